"""`hetero run` as a user runs it, in a process of its own (`tests.support.run_command.Run`): the quick start's commands
(docs/quickstart.md) with their defaults end with exit 0 and leave no process behind, for each framework, and the same
run is each framework's end-to-end check of the default layout (1 data host + 1 trainer, then the baseline, the
evaluation and the plan); SIGTERM, SIGINT or SIGHUP stop a run once its jobs run, and every process it started
(emulated hosts, TensorFlow servers, Ray's daemons and its workers, which move to process groups of their own and
rename themselves ``ray::<Actor>``), within 30 s."""

from __future__ import annotations

import json
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.graph import resolve_parameters
from pipeline.iam.judge import deployed_for, judge_files
from pipeline.iam.permissions import BEGIN, END, markdown
from pipeline.local.settings import local_training_image
from steps.frameworks import framework as framework_row
from tests.support.metrics import (
    PIXEL_BYTES,
    assert_data_hosts_measured_themselves,
    assert_every_sample_once_per_epoch,
    assert_the_evaluation_and_the_plan,
)
from tests.support.run_command import (
    MOMENTS,
    ROOT,
    STOPPED_WITHIN_S,
    TRAINING,
    Run,
    names,
    reach,
    run_hosts,
    stop_at,
    stops,
    temp_dir,
)
from tests.support.stacks import synthesised_once

pytestmark = pytest.mark.e2e


@dataclass
class ReadmeRun:
    """One `hetero run --framework <framework>` with every default, ended: what the tests below read."""

    framework: str
    code: int
    wall_s: float
    lines: list[str]
    left: list[str]
    tail: str
    execution_dir: Path
    store_dir: Path

    def metrics(self, step: str) -> dict:
        return json.loads((self.execution_dir / "jobs" / step / "model" / "metrics.json").read_text())

    def host_dirs(self, step: str) -> list[Path]:
        return sorted((self.execution_dir / "jobs" / step).glob("algo-*"))


@pytest.fixture(scope="module", params=["pytorch", "tensorflow", "ray"])
def readme_run(request, tmp_path_factory, cluster_lock) -> ReadmeRun:
    """`make run ARGS="--framework <framework>"`: sample data, a 1-vCPU baseline, then 1 data host + 1 trainer pinned to
    the machine's CPUs; only the work folder differs. Each takes minutes on 2 cores, so it runs once per framework and
    every test below reads the same run."""
    framework = request.param
    work_dir = tmp_path_factory.mktemp(f"readme-{framework}") / "runs"
    with cluster_lock():
        run = Run(work_dir, "--framework", framework)
        try:
            code = run.process.wait(timeout=900)
            wall = time.monotonic() - run.started
            run.reader.join(timeout=10)
            left = run.leftovers(within_s=5)
        finally:
            run.close()
    print(
        f"hetero run --framework {framework}: exit {code} in {wall:.0f} s, {len(run.lines)} lines, {len(left)} process(es) left"
    )
    executions = sorted(work_dir.glob("local-*"))
    execution = executions[0] if executions else work_dir / "no-execution"
    return ReadmeRun(framework, code, wall, run.lines, left, run.tail(), execution, work_dir / "results" / execution.name)


def test_the_readme_run_with_its_defaults_ends_with_exit_0_and_leaves_no_process(readme_run):
    assert readme_run.code == 0, readme_run.tail
    assert not readme_run.left, readme_run.left
    assert any(line.startswith("speedup ") for line in readme_run.lines), readme_run.tail
    # progress is the step code's metric lines; no framework redraws a progress bar into the log
    assert not [line for line in readme_run.lines if "row/s" in line or "Running Dataset" in line][:3]
    assert len(readme_run.lines) < 1000, f"{len(readme_run.lines)} lines"
    assert any("step_time_ms=" in line for line in readme_run.lines)  # metric lines streamed while it ran


def test_the_readme_run_trains_each_sample_once_per_epoch_on_both_layouts_and_keeps_every_output(readme_run):
    """Both training jobs of the default run: the framework's own accounting of every sample once per epoch, a model,
    the data host's own measurements, the results on every host that SageMaker may pack; then the evaluation, the plan
    for the next run (made from this run's measurements, so it predicts this run too) and the report."""
    assert readme_run.code == 0, readme_run.tail
    defaults = resolve_parameters({})
    epochs, batch = defaults["Epochs"], defaults["BatchSize"]
    manifest = json.loads((readme_run.execution_dir / "Shard" / "manifest.json").read_text())
    train_samples = manifest["splits"]["train"]["samples"]
    assert manifest["format"] == ("tfrecord" if readme_run.framework == "tensorflow" else "webdataset")
    model_file = {"pytorch": "model.pt", "tensorflow": "model.keras", "ray": "model.pt"}[readme_run.framework]
    for step, mode in (("TrainBaseline", "homogeneous"), ("TrainHeterogeneous", "heterogeneous")):
        metrics = readme_run.metrics(step)
        assert (metrics["framework"], metrics["mode"], metrics["config"]["epochs"]) == (readme_run.framework, mode, epochs)
        assert metrics["samples_seen"] == epochs * train_samples
        if readme_run.framework == "tensorflow":
            assert_every_sample_once_per_epoch(metrics, train_samples, epochs=epochs)
        if readme_run.framework == "ray":
            ledger = [(e["epoch"], e["samples"], e["distinct"], e["duplicates"]) for e in metrics["sample_ledger"]["epochs"]]
            assert ledger == [(e, train_samples, train_samples, 0) for e in range(epochs)]
            assert metrics["gpus"] == {"per_host": 0, "used_per_host": 0, "idle": None}  # this machine has no GPU
        assert metrics["corrupt_samples"]["count"] == 0
        assert metrics["accuracy"] is not None and 0 <= metrics["accuracy"] <= 1
        assert metrics["global_batch_size"] == batch and metrics["model_parameters"] > 0
        assert (readme_run.execution_dir / "jobs" / step / "model" / model_file).stat().st_size > 0
        if readme_run.framework != "ray":  # Ray Data moves the samples as objects: no bytes of ours to count
            assert_data_hosts_measured_themselves(metrics, 1 if mode == "heterogeneous" else 0)
        groups = {g["name"]: g for g in metrics["instance_groups"]}
        assert groups["dnn_group"]["count"] == 1
        if mode == "heterogeneous":
            assert groups["data_group"] == {"name": "data_group", "instance_type": "ml.c5.4xlarge", "count": 1, "role": "data"}
    hetero = readme_run.metrics("TrainHeterogeneous")
    roles = {host.name: _role(host) for host in readme_run.host_dirs("TrainHeterogeneous")}
    if readme_run.framework == "pytorch":
        assert {t for h in hetero["data_hosts"] for t in h["batches_sent"]} == {n for n, r in roles.items() if r == "trainer"}
    if readme_run.framework == "tensorflow":  # the tensors of a sample: uint8 pixels, int64 label and id
        assert hetero["bytes_received_per_sample"] == PIXEL_BYTES + 16
        assert sum("worker registered with dispatcher" in line for line in readme_run.lines) == 1
    if readme_run.framework == "ray":
        decoded = sum(h["samples_sent"] for h in hetero["data_hosts"]) + sum(m["samples"] for m in hetero["local_decode"])
        assert decoded == epochs * train_samples  # every sample, from whichever node decoded it
        assert any("[ray] head: 2 node(s)" in line for line in readme_run.lines)
    # every host of the heterogeneous job holds the results (the trainer the original, the data host a copy), so algo-1
    # has them whatever its role, whichever host's model dir SageMaker packs
    trainer_metrics = (readme_run.execution_dir / "jobs" / "TrainHeterogeneous" / "model" / "metrics.json").read_bytes()
    for host in readme_run.host_dirs("TrainHeterogeneous"):
        assert (host / "model" / "metrics.json").read_bytes() == trainer_metrics, host.name
        assert (host / "model" / model_file).is_file(), host.name
        log = (host / "output" / "host.log").read_text()
        assert "Traceback" not in log, log[-3000:]
        if readme_run.framework == "pytorch" and roles[host.name] == "data":  # the trainers' end is no error
            assert log.rstrip().endswith(f"[data] {host.name}: all trainers stopped; exiting"), log[-3000:]
    assert_the_evaluation_and_the_plan(readme_run.execution_dir / "Evaluate", hetero, readme_run.execution_dir.name)
    assert (readme_run.store_dir / "price_performance.json").is_file()


# the deploy options that change IAM: each framework's run is judged under its stack as cdk.json deploys it, and with
# every one of these at once (each adds or changes grants; with none, cdk.json's stack is the tightest)
IAM_OPTIONS = {
    "hetero:fsx": True,
    "hetero:networkIsolation": True,
    "hetero:retrainAdoptsPlan": True,
    "hetero:notifyEmail": "ops@example.com",
    "hetero:codeDirs": ["tests/fixtures"],
}


@pytest.fixture(scope="module")
def iam_templates(tmp_path_factory, readme_run) -> dict[str, Path]:
    """The run's framework's stack, synthesized once per session: as cdk.json deploys it, and with every IAM option.
    A framework without an AWS image deploys the image its Dockerfile builds (the one the local run names)."""
    framework = {"hetero:framework": readme_run.framework} if readme_run.framework != "pytorch" else {}
    if not framework_row(readme_run.framework).aws_image:
        framework["hetero:trainingImage"] = local_training_image(readme_run.framework)
    folder = tmp_path_factory.mktemp(f"iam-templates-{readme_run.framework}")
    templates = {}
    for name, overrides in {"cdk.json": framework, "every IAM option": {**framework, **IAM_OPTIONS}}.items():
        path = folder / f"{name.replace(' ', '-')}.template.json"
        path.write_text(json.dumps(synthesised_once(tmp_path_factory, **overrides).template_json))
        templates[name] = path
    return templates


def test_every_aws_call_of_the_readme_run_is_allowed_by_each_deployed_stack(readme_run, iam_templates, capsys):
    """The run's call ledger (every call the deployed pipeline would make, by principal) judged by `hetero iam`
    against its framework's stack as cdk.json deploys it and with every deploy option that changes IAM: nothing
    denied."""
    assert readme_run.code == 0, readme_run.tail
    ledger = json.loads((readme_run.execution_dir / "aws_calls.json").read_text())
    by_principal = {}
    for call in ledger["calls"]:
        by_principal[call["principal"]] = by_principal.get(call["principal"], 0) + 1
    print(f"{readme_run.framework}: calls per principal {by_principal}")
    actions = {(c["principal"], c["action"]) for c in ledger["calls"]}
    for expected in (
        ("pipeline_role", "sagemaker:CreateTrainingJob"),
        ("pipeline_role", "sagemaker:CreateProcessingJob"),
        ("pipeline_role", "iam:PassRole"),
        ("pipeline_role", "sagemaker:CreateModelPackage"),
        ("pipeline_role", "s3:GetObject"),  # the property files Std:JsonGet reads
        ("job_role", "s3:GetObject"),
        ("job_role", "s3:PutObject"),
        ("job_role", "ecr:BatchGetImage"),
        ("job_role", "logs:PutLogEvents"),
        ("events", "sns:Publish"),
    ):
        assert expected in actions, expected
    for name, template in iam_templates.items():
        assert main(["iam", str(readme_run.execution_dir), "--template", str(template)]) == 0, (name, capsys.readouterr().out)
        last = capsys.readouterr().out.strip().splitlines()[-1]
        assert re.fullmatch(r"\d+ calls, 0 denied", last), (name, last)


def test_the_permissions_page_is_generated_from_the_stack_and_the_readme_run(readme_run, iam_templates):
    """docs/deploy.md's Permissions section: what `hetero iam --markdown` makes of cdk.json's stack and the default
    PyTorch run."""
    if readme_run.framework != "pytorch":
        pytest.skip("the page is made from the default framework's run")
    ledger = readme_run.execution_dir / "aws_calls.json"
    made = markdown(deployed_for(ledger, iam_templates["cdk.json"]), judge_files(ledger, iam_templates["cdk.json"]))
    page = (ROOT / "docs" / "deploy.md").read_text()
    begin, end = page.index(BEGIN), page.index(END) + len(END)
    assert page[begin:end] == made, (
        "docs/deploy.md's Permissions differ from the stack: run `make run`, `npx cdk synth -q` and paste "
        "`hetero iam runs/<execution> --template cdk.out/HeteroTraining.template.json --markdown` over the section"
    )


def test_the_registered_model_serves_the_trained_models_predictions(readme_run, capsys, tmp_path):
    """The package the run registered, served as its container serves it (`hetero models predict`: the PyTorch
    package's own server; a TensorFlow package's TF Serving stand-in and Python service): the top classes and their
    scores are what the trained model itself gives the same image, decoded as evaluation decodes."""
    import numpy as np
    from PIL import Image

    from pipeline.commands.models import default_registry

    assert readme_run.code == 0, readme_run.tail
    image = tmp_path / "shape.png"
    Image.fromarray(np.random.default_rng(7).integers(0, 256, (96, 96, 3), dtype=np.uint8)).save(image)
    registry = default_registry(readme_run.execution_dir.parent)
    assert main(["models", "predict", "1", str(image), "--registry", registry]) == 0
    served = capsys.readouterr().out.strip().splitlines()[-1].split("  ")[1:]
    metrics = readme_run.metrics("TrainHeterogeneous")
    if framework_row(readme_run.framework).serves_as == "tensorflow":
        scores = _keras_scores(readme_run, image, metrics)
    else:
        scores = _torch_scores(readme_run, image, metrics)
    top = np.argsort(-scores, kind="stable")[:3]
    assert served == [f"{metrics['classes'][i]} {scores[i]:.3f}" for i in top]


def _torch_scores(readme_run, image: Path, metrics: dict):
    import numpy as np
    import torch

    from steps.train.workload import load_workload

    model_dir = readme_run.execution_dir / "jobs" / "TrainHeterogeneous" / "model"
    workload = load_workload(metrics["config"]["workload"], metrics["config"]["workload_options"])
    model = workload.build_model(len(metrics["classes"]))
    model.load_state_dict(torch.load(model_dir / "model.pt", weights_only=True))
    pixels = workload.decode(image.read_bytes(), train=False, rng=np.random.default_rng(0))
    with torch.no_grad():
        return torch.softmax(model.eval()(workload.normalize(torch.from_numpy(np.array(pixels)).unsqueeze(0))), dim=1)[0].numpy()


def _keras_scores(readme_run, image: Path, metrics: dict):
    """A TensorFlow package: the trained Keras model's scores; every host's folder holds the package (SavedModel in 1/
    and code/), whichever SageMaker packs."""
    import keras
    import tensorflow as tf

    from steps.train.workload import load_workload

    model_dir = readme_run.execution_dir / "jobs" / "TrainHeterogeneous" / "model"
    assert (model_dir / "1" / "saved_model.pb").is_file() and (model_dir / "code" / "inference.py").is_file()
    hosts = sorted(model_dir.parent.glob("algo-*"))
    assert len(hosts) == 2 and all((h / "model" / "1" / "saved_model.pb").is_file() for h in hosts), hosts
    workload = load_workload(metrics["config"]["workload"], metrics["config"]["workload_options"])
    model = keras.saving.load_model(model_dir / "model.keras")
    pixels = workload.tf_decode(tf.constant(image.read_bytes()), train=False, seed=tf.constant([0, 0], tf.int64))
    return tf.nn.softmax(model(workload.tf_normalize(pixels[tf.newaxis]), training=False))[0].numpy()


def _role(host_dir: Path) -> str:
    """The role the launcher gave a host, from the first line of its log ("[launcher] host=... role=data ...")."""
    return re.search(r"role=(\w+)", (host_dir / "output" / "host.log").read_text()).group(1)


@pytest.mark.parametrize(**stops(early=False))
def test_a_signal_at_any_moment_ends_the_run_in_one_line_leaving_nothing(tmp_path, framework, moment, sig):
    """A signal once a job started its hosts, mid-training, the baseline starting, Evaluate, RegisterModel
    (`tests.support.run_command.stop_at`; the moments before: tests/e2e/test_run_stops_early.py)."""
    stop_at(tmp_path, framework, moment, sig)


def test_a_second_signal_during_the_stop_kills_what_is_left_at_once(tmp_path):
    """The stop gives each host seconds to exit after its SIGTERM; hosts that cannot (frozen here) keep it waiting, and a
    second signal, never ignored, kills them at once: exit 128 + the first signal, one line naming both."""
    with temp_dir() as temp:
        run = Run(tmp_path / "runs", *TRAINING, stderr=tmp_path / "stderr", temp_dir=temp)
        try:
            reach(run, MOMENTS["mid-training"])
            hosts = run_hosts(run)
            assert len(hosts) >= 2, names(hosts)
            for host in hosts:
                host.suspend()
            before = len(run.lines)
            run.process.send_signal(signal.SIGTERM)
            time.sleep(1.0)
            assert run.process.poll() is None, run.tail()  # waiting for the frozen hosts: seconds
            run.process.send_signal(signal.SIGINT)
            code = run.process.wait(timeout=STOPPED_WITHIN_S)
            left = run.leftovers(within_s=STOPPED_WITHIN_S)
        finally:
            run.close()
        temp_left = list(temp.iterdir())
    errors = (tmp_path / "stderr").read_text().splitlines()
    assert code == 128 + signal.SIGTERM, (errors, run.tail())
    assert errors == ["interrupted (SIGTERM, then SIGINT: what was left killed at once); all hosts stopped"], errors
    assert not [line for line in run.lines[before:] if "Traceback" in line or "Exception ignored" in line], run.tail()
    assert not left, left
    assert not temp_left, temp_left
