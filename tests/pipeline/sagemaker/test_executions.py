"""`hetero start` / `hetero executions` over HTTP: a moto server for SageMaker and S3, and a
recording endpoint that proves bad input never leaves the machine."""

from __future__ import annotations

import json
import re

import boto3
import pytest

from pipeline.cli import main
from pipeline.sagemaker.executions import execution_id, list_executions, pipeline_parameters
from pipeline.sagemaker.images import default_processing_image, default_training_image
from pipeline.sagemaker.job_access import JobAccess
from pipeline.sagemaker.settings import DeploySettings
from steps.common.errors import UserError
from steps.contract import TUNABLES
from steps.evaluate import evaluate as ev
from steps.evaluate.store import open_store
from tests.support.aws_endpoint import JsonHandler, aws_endpoint
from tests.support.metrics import metrics, write_json

PIPELINE = "HeteroTraining"
BUCKET = "hetero-artifacts"
RESULTS = f"s3://{BUCKET}/results"


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


MINIMAL_DEFINITION = {
    "Version": "2020-12-01",
    "Steps": [],
    "Parameters": [
        {
            "Name": p.name,
            "Type": {int: "Integer", float: "Float", bool: "Boolean"}.get(p.type, "String"),
            "DefaultValue": p.default,
        }
        for p in TUNABLES
    ],
}


@pytest.fixture
def sagemaker(aws_env):
    """A moto SageMaker with the pipeline created (a minimal definition declaring our parameters)."""
    client = boto3.client("sagemaker")
    client.create_pipeline(
        PipelineName=PIPELINE,
        PipelineDefinition=json.dumps(MINIMAL_DEFINITION),
        RoleArn="arn:aws:iam::123456789012:role/hetero-pipeline",
    )
    return client


def start(capsys, *params: str, name: str = PIPELINE) -> str:
    code, out, err = run_cli(capsys, "start", "--pipeline-name", name, *(a for p in params for a in ("--param", p)))
    assert code == 0, err
    match = re.search(r"^  arn: +(\S+)$", out, re.M)
    assert match and f"started execution {execution_id(match[1])} of {name}" in out, out
    return match[1]


# --- starting ---


@pytest.mark.slow
def test_start_sends_checked_overrides_as_sagemaker_strings(sagemaker, capsys):
    arn = start(
        capsys,
        "InputData=s3://data/images/",
        "Epochs=3",
        "RunBaseline=no",
        "ShardSizeMB=32",
        "DataDistribution=FullyReplicated",
        "DnnInstanceCount=2",
        'WorkloadOptions={"blur_passes": 4}',
    )
    sent = sagemaker.list_pipeline_parameters_for_execution(PipelineExecutionArn=arn)["PipelineParameters"]
    assert sent == [
        {"Name": "InputData", "Value": "s3://data/images/"},
        {"Name": "Epochs", "Value": "3"},
        {"Name": "RunBaseline", "Value": "false"},
        {"Name": "ShardSizeMB", "Value": "32.0"},
        {"Name": "DataDistribution", "Value": "FullyReplicated"},
        {"Name": "DnnInstanceCount", "Value": "2"},
        {"Name": "WorkloadOptions", "Value": '{"blur_passes": 4}'},
    ]
    described = sagemaker.describe_pipeline_execution(PipelineExecutionArn=arn)
    assert described["PipelineExecutionArn"] == arn
    assert described["PipelineArn"].endswith(f":pipeline/{PIPELINE}")


def test_start_without_overrides_keeps_the_deployed_defaults(sagemaker, capsys):
    code, out, _ = run_cli(capsys, "start", "--pipeline-name", PIPELINE, "--display-name", "nightly")
    assert code == 0 and "parameters: the deployed defaults" in out
    arn = re.search(r"arn: +(\S+)", out)[1]
    assert sagemaker.list_pipeline_parameters_for_execution(PipelineExecutionArn=arn).get("PipelineParameters") in (None, [])
    assert sagemaker.describe_pipeline_execution(PipelineExecutionArn=arn)["PipelineExecutionDisplayName"] == "nightly"


def test_start_uses_the_run_precedence(sagemaker, capsys, monkeypatch, tmp_path):
    config = tmp_path / "params.json"
    config.write_text(json.dumps({"Epochs": 7, "MaxSteps": 50, "RunBaseline": False}))
    monkeypatch.setenv("HETERO_PARAM_MaxSteps", "60")  # env beats the file
    monkeypatch.setenv("HETERO_PIPELINE_NAME", PIPELINE)
    code, out, err = run_cli(capsys, "start", "--config", str(config), "--param", "Epochs=2")  # the command line beats both
    assert code == 0, err
    arn = re.search(r"arn: +(\S+)", out)[1]
    sent = {
        p["Name"]: p["Value"]
        for p in sagemaker.list_pipeline_parameters_for_execution(PipelineExecutionArn=arn)["PipelineParameters"]
    }
    assert sent == {"Epochs": "2", "MaxSteps": "60", "RunBaseline": "false"}


# --- bad input never reaches AWS ---


class Recorder(JsonHandler):
    """Records every request and answers with the server's canned (status, JSON body)."""

    def do_POST(self):  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        target = self.headers.get("X-Amz-Target")
        self.server.requests.append((target, body))
        self.answer(*self.server.replies.get(target, self.server.reply))

    do_GET = do_PUT = do_POST


@pytest.fixture
def endpoint(aws_env, monkeypatch):
    """An HTTP endpoint that records what reaches it; AWS_ENDPOINT_URL points at it."""
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with aws_endpoint(Recorder, monkeypatch) as server:
        server.requests, server.reply = [], (400, {"__type": "ValidationException", "message": "canned"})
        # the deployed definition, read before an execution starts to check its requests
        server.replies = {"SageMaker.DescribePipeline": (200, {"PipelineDefinition": json.dumps(MINIMAL_DEFINITION)})}
        yield server


@pytest.mark.parametrize(
    "param,expected",
    [
        ("NoSuchThing=1", r"unknown parameter 'NoSuchThing'; known: InputData, .*ImprovementThreshold"),
        ("Epochs=two", r"Epochs='two' is not an int"),
        ("Epochs=0", r"Epochs=0 must be >= 1"),
        ("DnnInstanceCount=1.5", r"DnnInstanceCount='1.5' is not an int"),
        ("ShardSizeMB=500", r"ShardSizeMB=500.0 must be between 1 and 128"),
        ("DataDistribution=Striped", r"DataDistribution='Striped': allowed values are ShardedByS3Key, FullyReplicated"),
        ("InputMode=file", r"InputMode='file': allowed values are File, FastFile"),
        ("Precision=half", r"Precision='half': allowed values are auto, fp32, bf16, fp16"),
        ("Compile=true", r"Compile='true': allowed values are off, on"),
        ("RunBaseline=maybe", r"RunBaseline='maybe' is not a bool"),
        ("WorkloadOptions=[1]", r"WorkloadOptions='\[1\]' must be a JSON object"),
        ("Epochs", r"--param 'Epochs': write Name=Value"),
        ("InputData=./my_images", r"InputData='./my_images': in the cloud it must be an s3://bucket/prefix URI"),
    ],
)
def test_bad_parameters_are_rejected_before_any_request(endpoint, capsys, param, expected):
    code, out, err = run_cli(capsys, "start", "--param", "Epochs=2", "--param", param)
    assert code == 2 and not out
    assert err.startswith("error: ") and "Traceback" not in err
    assert re.search(expected, err), err
    assert endpoint.requests == []


def test_the_recording_endpoint_does_see_a_valid_start(endpoint, capsys):
    code, _, err = run_cli(capsys, "start", "--param", "Epochs=2")
    assert code == 2 and "canned" in err
    [(describe, _), (target, body)] = endpoint.requests
    assert describe == "SageMaker.DescribePipeline" and target == "SageMaker.StartPipelineExecution"
    assert json.loads(body)["PipelineParameters"] == [{"Name": "Epochs", "Value": "2"}]


@pytest.mark.parametrize(
    "reply,expected",
    [
        # What AWS itself answers (moto says ValidationException "Could not find pipeline", tested below).
        (
            (
                400,
                {"__type": "ResourceNotFound", "message": "Pipeline 'arn:aws:sagemaker:us-east-1:1:pipeline/p' does not exist."},
            ),
            r"^error: pipeline not found: no pipeline 'HeteroTraining' in us-east-1: deploy it with `cdk deploy` first",
        ),
        (
            (400, {"__type": "AccessDeniedException", "Message": "User: arn:aws:iam::1:user/u is not authorized"}),
            r"^error: access denied: StartPipelineExecution on pipeline 'HeteroTraining' in us-east-1 was denied: .*not authorized.*"
            r"needs sagemaker:StartPipelineExecution",
        ),
        (
            (400, {"__type": "UnrecognizedClientException", "message": "The security token included in the request is invalid."}),
            r"^error: bad credentials: AWS rejected the credentials \(UnrecognizedClientException",
        ),
    ],
)
def test_aws_refusals_are_one_line_user_errors(endpoint, capsys, reply, expected):
    endpoint.reply = reply
    code, _, err = run_cli(capsys, "start")
    assert code == 2 and "Traceback" not in err
    assert re.search(expected, err), err


def test_no_credentials(aws_env, capsys, monkeypatch):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-metadata wait
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # an earlier test's session has credentials cached
    code, _, err = run_cli(capsys, "executions")
    assert code == 2 and err.startswith("error: no credentials: no AWS credentials found: run `aws configure`")


# --- the pipeline must exist ---


@pytest.mark.parametrize("command", ["start", "executions"])
def test_pipeline_not_found_says_deploy_first(sagemaker, capsys, command):
    code, _, err = run_cli(capsys, command, "--pipeline-name", "not-deployed")
    assert code == 2 and "Traceback" not in err
    assert err.strip() == (
        "error: pipeline not found: no pipeline 'not-deployed' in us-east-1: deploy it with `cdk deploy` "
        "first, or check --pipeline-name (env HETERO_PIPELINE_NAME) and AWS_REGION"
    )


# --- watching ---


@pytest.fixture
def three_executions(sagemaker, capsys, tmp_path):
    """Oldest first: one with baseline results, one without baseline, one whose results are missing.
    The results are written the way the cloud does it: the Evaluate step, keyed by execution id."""
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    arns = [start(capsys, "Epochs=1") for _ in range(3)]
    ids = [execution_id(a) for a in arns]
    hetero = write_json(tmp_path / "hetero" / "metrics.json", metrics("pt_heterogeneous"))
    baseline = write_json(tmp_path / "baseline" / "metrics.json", metrics("pt_homogeneous"))
    ev.evaluate(heterogeneous=hetero, baseline=baseline, output=tmp_path / "e0", execution_id=ids[0], store_uri=RESULTS)
    ev.evaluate(heterogeneous=hetero, baseline=None, output=tmp_path / "e1", execution_id=ids[1], store_uri=RESULTS)
    capsys.readouterr()
    return ids


# Each fixture above runs the Evaluate step (its report's charts take most of a second), so the tests that only read
# the same executions share one fixture: one test per view, the views' checks one after the other.


def test_executions_lists_newest_first_with_the_summary_and_its_limit_defaults_and_documents(
    three_executions, capsys, monkeypatch
):
    old, middle, new = three_executions
    code, out, err = run_cli(capsys, "executions", "--pipeline-name", PIPELINE, "--results", RESULTS)
    assert code == 0, err
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == [new, middle, old]
    # moto finishes every execution at once ("Succeeded"); AWS would say Executing first.
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ"
    assert re.fullmatch(rf"{new} +Succeeded +{stamp}  no price_performance\.json", lines[0]), lines[0]
    assert re.fullmatch(rf"{middle} +Succeeded +{stamp}  no baseline, \$0\.0289/100 steps", lines[1]), lines[1]
    assert re.fullmatch(rf"{old} +Succeeded +{stamp}  speedup 6\.48x, improvement 77\.2%, \$0\.0289/100 steps", lines[2]), lines[
        2
    ]

    # the API returns the documents
    executions = list_executions(pipeline_name=PIPELINE, results_uri=RESULTS, limit=10)
    by_id = {e["id"]: e for e in executions}
    assert by_id[three_executions[0]]["price_performance"]["execution_id"] == three_executions[0]
    assert by_id[three_executions[2]]["price_performance"] is None
    assert all(e["start_time"].utcoffset().total_seconds() == 0 for e in executions)

    # --limit, and the pipeline and results store from the environment
    monkeypatch.setenv("HETERO_PIPELINE_NAME", PIPELINE)
    monkeypatch.setenv("HETERO_RESULTS_URI", RESULTS)
    code, out, _ = run_cli(capsys, "executions", "--limit", "2")
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == three_executions[:0:-1]
    code, _, err = run_cli(capsys, "executions", "--limit", "0")
    assert code == 2 and "--limit 0: use 1 to 100" in err

    # without a results store: the status only
    monkeypatch.delenv("HETERO_RESULTS_URI", raising=False)
    code, out, err = run_cli(capsys, "executions", "--pipeline-name", PIPELINE)
    assert code == 0 and len(out.splitlines()) == 3
    assert "speedup" not in out and "price-performance not shown" in err


def test_details_prints_the_full_table_or_says_an_execution_has_no_results(three_executions, capsys):
    code, out, err = run_cli(capsys, "executions", "--results", RESULTS, "--details", three_executions[0])
    assert code == 0, err
    assert out.splitlines()[0] == f"execution {three_executions[0]}"
    assert re.search(r"^cost / 100 steps \(\$\) +0\.1268 +0\.0289$", out, re.M), out
    assert "speedup 6.48x   price-performance improvement 77.2%" in out

    code, _, err = run_cli(capsys, "executions", "--results", RESULTS, "--details", three_executions[2])
    assert code == 2 and err.startswith(f"error: no results: no price_performance.json for execution '{three_executions[2]}'")
    assert f"s3://{BUCKET}/results/{three_executions[2]}/price_performance.json" in err


def test_missing_results_bucket_is_a_user_error(sagemaker, capsys):
    start(capsys)
    code, _, err = run_cli(capsys, "executions", "--results", "s3://no-such-bucket/results")
    assert code == 2 and "NoSuchBucket" in err and "s3://no-such-bucket/results/" in err


def test_overrides_api_is_pure():
    assert pipeline_parameters({"RunBaseline": "1", "ImprovementThreshold": "0.2"}) == [
        {"Name": "RunBaseline", "Value": "true"},
        {"Name": "ImprovementThreshold", "Value": "0.2"},
    ]
    with pytest.raises(UserError, match="unknown parameter 'epochs'"):
        pipeline_parameters({"epochs": "2"})


# --- planning from an execution, and starting with its plan ---


@pytest.fixture
def planned_execution(sagemaker, capsys, tmp_path):
    """An execution whose Evaluate step stored a plan: one c5.xlarge fed a g5.xlarge that waited 40% of its steps, its
    decode (25 ms of CPU a sample) too heavy for any trainer's own vCPUs: the plan needs a data group."""
    from tests.support.metrics import DATA_HOST, input_bound_run

    boto3.client("s3").create_bucket(Bucket=BUCKET)
    exec_id = execution_id(start(capsys, "Epochs=1"))
    host = {**DATA_HOST, "cpus": 4, "decode_cpu_s_per_sample": 0.024, "service_cpu_s_per_sample": 0.001}
    hetero = write_json(tmp_path / "hetero" / "metrics.json", input_bound_run(rate=120.0, host=host))
    ev.evaluate(heterogeneous=hetero, baseline=None, output=tmp_path / "e", execution_id=exec_id, store_uri=RESULTS)
    capsys.readouterr()
    return exec_id, json.loads((tmp_path / "e" / "plan.json").read_text())


def test_plan_prints_the_frontier_and_how_to_apply_it(planned_execution, capsys):
    exec_id, stored = planned_execution
    code, out, err = run_cli(capsys, "plan", exec_id, "--results", RESULTS)
    assert code == 0, err
    pick = stored["recommendation"]
    assert pick["data"] is not None
    assert out.startswith(f"plan: {pick['trainers']} x {pick['trainer']} fed by {pick['data_count']} x {pick['data']}: ")
    # the run as it ran, apart from the frontier: on its types' own vCPUs here, so every row is on one basis
    this_run = rf"^1 x ml\.g5\.xlarge \+ 1 x ml\.c5\.xlarge +{exec_id} +its vCPUs +120 +data_cpu +120 +\+0\.0%$"
    assert re.search(this_run, out, re.M), out
    assert "\nbasis: every row at the instance types' own vCPUs: the runs' own clusters as measured" in out
    applied = f"--param DataInstanceType={pick['data']} --param DataInstanceCount={pick['data_count']}"
    assert f"apply: --param DnnInstanceType={pick['trainer']} --param DnnInstanceCount={pick['trainers']} {applied}" in out
    code, out, _ = run_cli(capsys, "plan", exec_id, "--results", RESULTS, "--json")
    assert code == 0 and json.loads(out)["recommendation"] == pick  # today's prices: the same as stored


def test_start_apply_plan_sends_the_planned_cluster(planned_execution, sagemaker, capsys):
    exec_id, stored = planned_execution
    code, out, err = run_cli(
        capsys, "start", "--pipeline-name", PIPELINE, "--results", RESULTS, "--apply-plan", exec_id, "--param", "Epochs=2"
    )
    assert code == 0, err
    arn = re.search(r"arn: +(\S+)", out)[1]
    sent = {
        p["Name"]: p["Value"]
        for p in sagemaker.list_pipeline_parameters_for_execution(PipelineExecutionArn=arn)["PipelineParameters"]
    }
    assert sent == {
        "Epochs": "2",
        "DnnInstanceType": stored["recommendation"]["trainer"],
        "DnnInstanceCount": str(stored["recommendation"]["trainers"]),
        "DataInstanceType": stored["recommendation"]["data"],
        "DataInstanceCount": str(stored["recommendation"]["data_count"]),
    }


def test_apply_plan_refuses_a_clash_and_an_unknown_execution(planned_execution, capsys):
    exec_id, _ = planned_execution
    for target, argv, expected in (
        (exec_id, ["--param", "DataInstanceCount=7"], "--apply-plan sets DataInstanceCount, which you also set: drop one"),
        ("no-such-execution", [], "no plan: no plan.json for execution 'no-such-execution'"),
    ):
        code, _, err = run_cli(capsys, "start", "--pipeline-name", PIPELINE, "--results", RESULTS, "--apply-plan", target, *argv)
        assert code == 2 and expected in err, (argv, err)


def _with_fallbacks(exec_id: str, stored: dict) -> list[dict]:
    """The stored plan given ``fallbacks``: its recommendation, then the two cheapest candidates of other data types."""
    pick = stored["recommendation"]
    others = sorted((c for c in stored["candidates"] if c["data"] not in (None, pick["data"])), key=lambda c: c["cost_per_epoch"])
    fallbacks = [pick, others[0], next(c for c in others if c["data"] != others[0]["data"])]
    open_store(RESULTS).put_json(exec_id, "plan.json", {**stored, "fallbacks": fallbacks})
    return fallbacks


def test_start_apply_plan_fallback_sends_that_candidate_of_the_plan(planned_execution, sagemaker, capsys):
    exec_id, stored = planned_execution
    for fallback, chosen in enumerate(_with_fallbacks(exec_id, stored)):
        argv = ["--apply-plan", exec_id] + (["--fallback", str(fallback)] if fallback else [])
        code, out, err = run_cli(capsys, "start", "--pipeline-name", PIPELINE, "--results", RESULTS, *argv)
        assert code == 0, err
        arn = re.search(r"arn: +(\S+)", out)[1]
        sent = {
            p["Name"]: p["Value"]
            for p in sagemaker.list_pipeline_parameters_for_execution(PipelineExecutionArn=arn)["PipelineParameters"]
        }
        expected = {"DataInstanceType": chosen["data"], "DataInstanceCount": str(chosen["data_count"])}
        if (chosen["trainer"], chosen["trainers"]) != (stored["trainer"]["instance_type"], stored["trainer"]["count"]):
            # another trainer group
            expected |= {"DnnInstanceType": chosen["trainer"], "DnnInstanceCount": str(chosen["trainers"])}
        assert sent == expected, fallback


def test_apply_plan_refuses_a_fallback_the_plan_does_not_have(planned_execution, capsys):
    exec_id, stored = planned_execution
    _with_fallbacks(exec_id, stored)
    for argv, expected in (
        (["--fallback", "3"], f"--fallback 3: execution {exec_id}'s plan has 3 candidate(s) (0: DataInstanceType="),
        (["--fallback", "-1"], "pick 0 to 2"),
    ):
        code, _, err = run_cli(capsys, "start", "--pipeline-name", PIPELINE, "--results", RESULTS, "--apply-plan", exec_id, *argv)
        assert code == 2 and expected in err, (argv, err)

    # a plan.json written before plans listed fallbacks has only its recommendation
    open_store(RESULTS).put_json(exec_id, "plan.json", {k: v for k, v in stored.items() if k != "fallbacks"})
    code, _, err = run_cli(
        capsys, "start", "--pipeline-name", PIPELINE, "--results", RESULTS, "--apply-plan", exec_id, "--fallback", "1"
    )
    assert code == 2 and "plan has 1 candidate(s)" in err and "pick 0 to 0" in err


def test_fallback_needs_a_plan(sagemaker, capsys):
    code, _, err = run_cli(capsys, "start", "--pipeline-name", PIPELINE, "--fallback", "1")
    assert code == 2 and "--fallback 1 picks a candidate of a plan: add --apply-plan EXECUTION_ID" in err


def test_apply_plan_needs_a_results_store(sagemaker, capsys, monkeypatch):
    monkeypatch.delenv("HETERO_RESULTS_URI", raising=False)
    code, _, err = run_cli(capsys, "start", "--pipeline-name", PIPELINE, "--apply-plan", "x")
    assert code == 2 and "--apply-plan needs --results" in err


# --- price files, service limits and workloads: checked before the execution starts ---

DEPLOYED = "HeteroDeployed"


DEPLOYED_SETTINGS = DeploySettings(
    pipeline_name=DEPLOYED,
    region="us-east-1",
    role_arn="arn:aws:iam::123456789012:role/jobs",
    bucket=BUCKET,
    code_uri=f"s3://{BUCKET}/hetero/code/code.tar.gz",
)


def create_deployed(client, definition: dict) -> None:
    """As the stack deploys it: the description says what the jobs' role may read (infra/sagemaker_pipeline.py)."""
    access = JobAccess(inputs=f"s3://{BUCKET}/hetero/raw/", artifacts=f"s3://{BUCKET}/hetero/")
    client.create_pipeline(
        PipelineName=DEPLOYED,
        PipelineDefinition=json.dumps(definition),
        PipelineDescription=f"Shard -> ... {access.describe()}",
        RoleArn="arn:aws:iam::123456789012:role/pipeline",
    )


@pytest.fixture
def deployed(aws_env, compile_once):
    """A moto SageMaker with the pipeline created from the real compiled definition, and its artifact bucket."""
    client = boto3.client("sagemaker")
    create_deployed(client, compile_once(DEPLOYED_SETTINGS))
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    return client


def sent_parameters(client, out: str) -> dict:
    arn = re.search(r"arn: +(\S+)", out)[1]
    return {
        p["Name"]: p["Value"]
        for p in client.list_pipeline_parameters_for_execution(PipelineExecutionArn=arn)["PipelineParameters"]
    }


@pytest.mark.slow
def test_start_uploads_a_refreshed_price_file_beside_the_artifacts_and_passes_its_uri(deployed, capsys, tmp_path):
    from tests.support.prices import refreshed_price_file

    prices = refreshed_price_file(tmp_path / "prices-override.json")
    assert len(prices.read_text()) > 2048  # over a parameter value's 1024 characters: it travels as an object
    code, out, err = run_cli(capsys, "start", "--pipeline-name", DEPLOYED, "--prices", str(prices), "--param", "Epochs=1")
    assert code == 0, err
    sent = sent_parameters(deployed, out)
    assert sent["Epochs"] == "1" and re.fullmatch(
        rf"s3://{BUCKET}/hetero/price-overrides/[0-9a-f]{{16}}\.json", sent["PriceOverrides"]
    )
    key = sent["PriceOverrides"].split("/", 3)[3]
    assert boto3.client("s3").get_object(Bucket=BUCKET, Key=key)["Body"].read() == prices.read_bytes()
    code, out, _ = run_cli(capsys, "start", "--pipeline-name", DEPLOYED, "--prices", str(prices))
    assert code == 0 and sent_parameters(deployed, out)["PriceOverrides"] == sent["PriceOverrides"]  # content-addressed


def test_start_takes_an_s3_price_file_once_it_has_read_it(deployed, capsys, tmp_path):
    s3 = boto3.client("s3")
    s3.put_object(Bucket=BUCKET, Key="hetero/mine/prices.json", Body=b'{"prices": {"ml.p9.mega": 99.0}}')
    uri = f"s3://{BUCKET}/hetero/mine/prices.json"
    code, out, err = run_cli(capsys, "start", "--pipeline-name", DEPLOYED, "--prices", uri)
    assert code == 0, err
    assert sent_parameters(deployed, out) == {"PriceOverrides": uri}
    s3.put_object(Bucket=BUCKET, Key="hetero/mine/bad.json", Body=b'{"ml.p9.mega": 99.0}')
    for bad, expected in (
        (
            f"s3://{BUCKET}/hetero/mine/bad.json",
            "bad price file: price file s3://hetero-artifacts/hetero/mine/bad.json: key 'prices' must be a non-empty object",
        ),
        (
            f"s3://{BUCKET}/hetero/mine/none.json",
            "cannot read the price file s3://hetero-artifacts/hetero/mine/none.json: NoSuchKey",
        ),
    ):
        code, _, err = run_cli(capsys, "start", "--pipeline-name", DEPLOYED, "--param", f"PriceOverrides={bad}")
        assert code == 2 and expected in err, err
    assert (
        '{"prices": {"ml.<type>": <USD per hour>, ...}}'
        in run_cli(capsys, "start", "--pipeline-name", DEPLOYED, "--prices", f"s3://{BUCKET}/hetero/mine/bad.json")[2]
    )
    assert len(deployed.list_pipeline_executions(PipelineName=DEPLOYED)["PipelineExecutionSummaries"]) == 1


def test_start_refuses_a_request_over_a_service_limit_before_the_execution_starts(deployed, capsys):
    long = (
        f"s3://{BUCKET}/hetero/raw/" + "raw-images/" * 22
    )  # a valid parameter (<= 1024), too long for the Shard step's argument
    code, out, err = run_cli(capsys, "start", "--pipeline-name", DEPLOYED, "--param", f"InputData={long}")
    assert code == 2 and not out and "Traceback" not in err
    assert (
        f"step Shard: An error occurred (ValidationException) when calling the CreateProcessingJob operation: "
        f"AppSpecification.ContainerArguments[11] would be {len(long)} characters long, from parameter InputData "
        f"({len(long)} characters); CreateProcessingJob allows at most 256: use a shorter S3 prefix"
    ) in err, err
    code, _, err = run_cli(
        capsys, "start", "--pipeline-name", DEPLOYED, "--param", "WorkloadOptions=" + json.dumps({"k": "x" * 1100})
    )
    assert (
        code == 2
        and "parameter WorkloadOptions is 1109 characters long; a SageMaker pipeline parameter value may have at "
        "most 1024: keep long or fixed options in the workload module"
        in err
    )
    assert deployed.list_pipeline_executions(PipelineName=DEPLOYED)["PipelineExecutionSummaries"] == []


@pytest.mark.parametrize(
    "argv,expected",
    [
        (
            ["--param", "Workload=my_pkg.my_workload"],
            "workload module 'my_pkg.my_workload' is not in the code the hosts get: no "
            "my_pkg/my_workload.py in steps/ or the code folders (none); deploy it with "
            "-c hetero:codeDirs='[\"DIR\"]' and run hetero start from that folder",
        ),
        (["--param", "Workload=steps.train.workloads.nope"], "workload module 'steps.train.workloads.nope' is not in the code"),
        (["--param", "Workload=steps.train.workload"], "defines no WORKLOAD"),
        (["--prices", "no-such-prices.json"], "PriceOverrides 'no-such-prices.json' (--prices): no such file"),
    ],
)
def test_a_bad_workload_or_price_file_is_refused_before_any_request(endpoint, capsys, argv, expected):
    code, out, err = run_cli(capsys, "start", *argv)
    assert code == 2 and not out and expected in err, err
    assert endpoint.requests == []


def test_a_denied_describe_pipeline_names_the_permission(endpoint, capsys):
    endpoint.replies["SageMaker.DescribePipeline"] = (400, {"__type": "AccessDeniedException", "Message": "not authorized"})
    code, _, err = run_cli(capsys, "start")
    assert code == 2 and "DescribePipeline on pipeline 'HeteroTraining' in us-east-1 was denied" in err
    assert "needs sagemaker:DescribePipeline" in err
    assert [t for t, _ in endpoint.requests] == ["SageMaker.DescribePipeline"]


# --- what the jobs' role may read, and where the images exist: checked before the execution starts ---


def test_start_refuses_input_data_the_jobs_role_cannot_read(deployed, capsys):
    for uri in ("s3://someone-elses-bucket/images/", f"s3://{BUCKET}/incoming/", f"s3://{BUCKET}/het"):
        code, out, err = run_cli(capsys, "start", "--pipeline-name", DEPLOYED, "--param", f"InputData={uri}")
        assert code == 2 and not out and "Traceback" not in err
        assert err.strip() == (
            f"error: bad parameter: parameter InputData={uri!r}: the pipeline's jobs may read only "
            f"s3://{BUCKET}/hetero/raw/ (inputs) and s3://{BUCKET}/hetero/ (the pipeline's artifacts): copy the "
            f"data under s3://{BUCKET}/hetero/raw/, or redeploy with another input prefix of that bucket "
            "(npx cdk deploy -c hetero:inputPrefix=<prefix>/)"
        ), err
    assert deployed.list_pipeline_executions(PipelineName=DEPLOYED)["PipelineExecutionSummaries"] == []


def test_start_takes_input_data_under_the_readable_prefixes(deployed, capsys):
    for uri in (f"s3://{BUCKET}/hetero/raw", f"s3://{BUCKET}/hetero/raw/2026-11/", f"s3://{BUCKET}/hetero/curated/"):
        code, out, err = run_cli(capsys, "start", "--pipeline-name", DEPLOYED, "--param", f"InputData={uri}")
        assert code == 0, err
        assert sent_parameters(deployed, out) == {"InputData": uri}


def test_start_refuses_a_price_file_the_jobs_role_cannot_read(deployed, capsys):
    code, _, err = run_cli(capsys, "start", "--pipeline-name", DEPLOYED, "--prices", "s3://someone-elses-bucket/prices.json")
    assert (
        code == 2 and "parameter PriceOverrides='s3://someone-elses-bucket/prices.json': the pipeline's jobs may read only" in err
    )
    assert f"pass the file with --prices FILE (hetero start uploads it under s3://{BUCKET}/hetero/)" in err


def test_a_pipeline_that_does_not_say_what_its_jobs_read_is_not_checked(sagemaker, capsys):
    arn = start(capsys, "InputData=s3://anywhere/images/")  # created without the stack's description
    assert sagemaker.list_pipeline_parameters_for_execution(PipelineExecutionArn=arn)["PipelineParameters"] == [
        {"Name": "InputData", "Value": "s3://anywhere/images/"}
    ]


def _in_region(definition: dict, registry: str) -> dict:
    """The definition with its AWS images moved to another registry (account.dkr.ecr.region.domain)."""
    return json.loads(json.dumps(definition).replace("763104351884.dkr.ecr.us-east-1.amazonaws.com", registry))


def test_start_refuses_aws_images_of_a_region_where_aws_does_not_publish_them(aws_env, capsys, compile_once):
    client = boto3.client("sagemaker")
    gov = "442386744353.dkr.ecr.us-gov-west-1.amazonaws.com"  # the SageMaker SDK's table lists it; AWS's DLC regions do not
    create_deployed(client, _in_region(compile_once(DEPLOYED_SETTINGS), gov))
    code, out, err = run_cli(capsys, "start", "--pipeline-name", DEPLOYED)
    assert code == 2 and not out and "Traceback" not in err
    image = default_processing_image("us-east-1").replace("763104351884.dkr.ecr.us-east-1.amazonaws.com", gov)
    assert err.startswith(
        f"error: bad region: pipeline {DEPLOYED!r} runs {image}: region 'us-gov-west-1' has no AWS Deep "
        "Learning Container for pytorch 2.13.0: AWS publishes it in 36 regions (af-south-1, "
    ), err
    assert err.rstrip().endswith("us-west-2); use one of them, or your own images"), err
    assert client.list_pipeline_executions(PipelineName=DEPLOYED)["PipelineExecutionSummaries"] == []


def test_own_images_are_not_checked_by_region(aws_env, capsys, compile_once):
    client = boto3.client("sagemaker")
    definition = _in_region(compile_once(DEPLOYED_SETTINGS), "123456789012.dkr.ecr.us-gov-west-1.amazonaws.com")
    assert default_training_image("us-east-1").split("/", 1)[1] in json.dumps(definition)  # same repository, own account
    create_deployed(client, definition)
    code, _, err = run_cli(capsys, "start", "--pipeline-name", DEPLOYED)
    assert code == 0, err
