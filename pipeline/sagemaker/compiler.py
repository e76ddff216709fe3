"""The compiler: `pipeline.graph.Graph` -> SageMaker SDK v3 pipeline objects.

Steps are compiled by kind (processing, training, check: `pipeline.sagemaker.kinds`). A training step with a
``condition`` parameter goes into a ConditionStep with every step downstream of
it; the else branch holds copies of those downstream steps without the inputs
the skipped step would have produced (the service never runs a step whose
upstream branch was not taken).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from pipeline.graph import Billing, CheckStep, Graph, Output, ProcessingStep, RegisterStep, TrainingStep
from pipeline.sagemaker.kinds import PRODUCED, StepCompiler, join
from pipeline.sagemaker.settings import MODEL_METRICS_PROPERTY_FILE, PROPERTY_FILE

if TYPE_CHECKING:  # the SDK is imported where used: it must not load before offline_sdk() has set the region
    from sagemaker.mlops.workflow.condition_step import ConditionStep
    from sagemaker.mlops.workflow.model_step import ModelStep
    from sagemaker.mlops.workflow.pipeline import Pipeline
    from sagemaker.mlops.workflow.steps import ProcessingStep as SmProcessingStep
    from sagemaker.mlops.workflow.steps import TrainingStep as SmTrainingStep


class Compiler(StepCompiler):
    """The graph as one SDK pipeline: its steps by kind (`StepCompiler`), the conditional step's branches, CheckParameters."""

    def compile_step(
        self,
        step: ProcessingStep | TrainingStep | CheckStep | RegisterStep,
        *,
        name: str | None = None,
        skip: Collection[str] = (),
        renamed: dict[str, str] | None = None,
    ) -> SmProcessingStep | SmTrainingStep | ConditionStep | ModelStep:
        """``name``: a copy of the step under that name (in the branch where ``skip`` do not run); ``renamed``: the
        names of such copies, for a copy that reads one."""
        from sagemaker.core.workflow.properties import PropertyFile

        if isinstance(step, TrainingStep):
            return self.training(step)
        if isinstance(step, CheckStep):
            return self.check(step)
        if isinstance(step, RegisterStep):
            return self.register(step, name=name, source=(renamed or {}).get(step.metrics.step))
        checked = [c for c in self.graph.steps if isinstance(c, CheckStep) and c.source.step == step.name]
        files = [PropertyFile(name=PROPERTY_FILE, output_name="output", path=c.file) for c in checked] if name is None else []
        registered = [r for r in self.graph.steps if isinstance(r, RegisterStep) and r.metrics.step == step.name]
        files += [PropertyFile(name=MODEL_METRICS_PROPERTY_FILE, output_name="output", path=r.file) for r in registered]
        return self.processing(step, name=name, skip=skip, property_files=files)

    # -- the pipeline --------------------------------------------------------
    def pipeline(self) -> Pipeline:
        from sagemaker.core.workflow.conditions import ConditionEquals
        from sagemaker.mlops.workflow.condition_step import ConditionStep
        from sagemaker.mlops.workflow.pipeline import Pipeline

        g = self.graph
        gated = [s for s in g.steps if getattr(s, "condition", None) is not None]
        assert len(gated) <= 1, "one conditional step is supported"
        downstream = _downstream(g, gated[0].name) if gated else set()
        first, *rest = [s for s in g.steps if s not in gated and s.name not in downstream]
        check_params = self.parameter_check(self.compile_step(first))
        top = [check_params] + [self.compile_step(s) for s in rest]
        if gated:
            skipped = gated[0]
            if_steps = [self.compile_step(skipped)] + [self.compile_step(s) for s in g.steps if s.name in downstream]
            copies = {
                s.name: f"{s.name}Without{skipped.name.removeprefix('Train')}"
                for s in g.steps
                if s.name in downstream and isinstance(s, (ProcessingStep, RegisterStep))
            }
            else_steps = [
                self.compile_step(g.step(original), name=copy, skip=(skipped.name,), renamed=copies)
                for original, copy in copies.items()
            ]
            top.append(
                ConditionStep(
                    name=f"{skipped.condition.name}Gate",
                    if_steps=if_steps,
                    else_steps=else_steps,
                    conditions=[ConditionEquals(left=self.params[skipped.condition.name], right=True)],
                )
            )
        return Pipeline(
            name=self.s.pipeline_name,
            parameters=list(self.params.values()),
            steps=top,
            sagemaker_session=self.session,
            pipeline_experiment_config=None,
        )

    def parameter_check(self, first_step: SmProcessingStep | SmTrainingStep | ConditionStep) -> ConditionStep:
        """CheckParameters: what this pipeline cannot run fails the execution before any job starts."""
        from sagemaker.core.workflow.conditions import ConditionEquals, ConditionLessThanOrEqualTo, ConditionOr
        from sagemaker.mlops.workflow.condition_step import ConditionStep
        from sagemaker.mlops.workflow.fail_step import FailStep

        p = self.params
        deployed = "FSx" if self.s.fsx else "S3"
        conditions = [
            ConditionEquals(left=p["DataSource"], right=deployed),
            ConditionOr(
                conditions=[
                    ConditionEquals(left=p["RunBaseline"], right=True),
                    ConditionLessThanOrEqualTo(left=p["ImprovementThreshold"], right=-1),
                ]
            ),
        ]
        message = [
            "parameters rejected, one of: DataSource=",
            p["DataSource"],
            f" (this pipeline was deployed to read training data from {deployed}; redeploy "
            f"{'without' if self.s.fsx else 'with'} FSx to change it); ImprovementThreshold=",
            p["ImprovementThreshold"],
            " with RunBaseline=",
            p["RunBaseline"],
            " (a threshold above -1 needs RunBaseline=true)",
        ]
        limit = self.graph.max_dnn_hosts
        if limit is not None:
            conditions.append(ConditionLessThanOrEqualTo(left=p["DnnInstanceCount"], right=limit))
            message += [
                "; DnnInstanceCount=",
                p["DnnInstanceCount"],
                f" (the {self.graph.framework} path trains on at most {limit} dnn host, every GPU of it: use "
                f"DnnInstanceCount={limit}, or the pytorch framework for several trainer hosts)",
            ]
        invalid = FailStep(name="InvalidParameters", error_message=join("", *message))
        return ConditionStep(name="CheckParameters", conditions=conditions, if_steps=[first_step], else_steps=[invalid])


def _downstream(graph: Graph, name: str) -> set[str]:
    """Steps that read (directly or not) an output of step ``name``, or depend on one that does."""
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for s in graph.steps:
            reads = {ref.step for ref in _refs(s)} | set(getattr(s, "depends_on", ()))
            if s.name not in found and reads & (found | {name}):
                found.add(s.name)
                changed = True
    return found


def _refs(step) -> list[Output | Billing]:
    values = []
    if isinstance(step, ProcessingStep):
        values = [*step.inputs.values(), *step.arguments.values()]
    elif isinstance(step, TrainingStep):
        values = [c.source for c in step.channels]
    elif isinstance(step, CheckStep):
        values = [step.source]
    elif isinstance(step, RegisterStep):
        values = [step.model, step.metrics]
    return [v for v in values if isinstance(v, PRODUCED)]
