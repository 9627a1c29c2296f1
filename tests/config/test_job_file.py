"""A team's job file is typed like a stack file: the issue's example validates as written, against
the model and against the generated JSON Schema editors use; every bad key is one line naming it."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from infra.config import ConfigError, load_job
from infra.config.job import FRAMEWORKS
from infra.core.names import JOB_NAME_PREFIXES
from tests.conftest import ROOT

EXAMPLE = yaml.safe_load((ROOT / "examples" / "llama-ft.job.yaml").read_text())
SCHEMA = json.loads((ROOT / "schemas" / "job.schema.json").read_text())


def _framework_job(framework: str, env: dict[str, str]) -> dict:
    """The example as a job of `framework`, named as its kind's jobs must be."""
    name = JOB_NAME_PREFIXES.get(FRAMEWORKS[framework][0], "") + EXAMPLE["name"]
    return {**EXAMPLE, "name": name, "framework": framework, "env": env}


def _problems(data: dict) -> dict[str, str]:
    with pytest.raises(ConfigError) as refused:
        load_job(data, "job.yaml")
    return {p.key: p.message for p in refused.value.problems}


def test_the_issues_example_validates_against_the_model_and_the_schema():
    job = load_job(EXAMPLE)
    assert (job.resources.gpus, job.resources.gpu_type, job.resources.driver_wanted()) == (
        16,
        ("H100", "H200"),
        (">=", 570),
    )
    jsonschema.Draft202012Validator(SCHEMA).validate(EXAMPLE)


def test_one_gpu_type_may_be_written_without_a_list_in_the_model_and_the_schema():
    data = {**EXAMPLE, "resources": {**EXAMPLE["resources"], "gpuType": "H100"}}
    assert load_job(data).resources.gpu_type == ("H100",)
    jsonschema.Draft202012Validator(SCHEMA).validate(data)


def test_every_wrong_key_is_named_in_one_line_each():
    problems = _problems(
        {
            "name": "Llama_FT",
            "team": "llm",
            "command": [],
            "resources": {"gpus": 0, "interconnect": "infiniband", "cudaDriver": "570.86"},
            "checkpoint": "shared",
        }
    )
    assert set(problems) == {
        "job.yaml: name",
        "job.yaml: command",
        "job.yaml: resources.gpus",
        "job.yaml: resources.interconnect",
        "job.yaml: resources.cudaDriver",
        "job.yaml: checkpoint",
    }
    assert problems["job.yaml: checkpoint"] == (
        "is not a job file setting; did you mean checkpoints? (docs/reference/job-file.md)"
    )
    assert "'infiniband' is not one of: efa, any" in problems["job.yaml: resources.interconnect"]


def test_the_schema_refuses_what_the_model_refuses():
    bad = {**EXAMPLE, "resources": {**EXAMPLE["resources"], "interconnect": "infiniband"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(SCHEMA).validate(bad)


def test_checkpoints_off_written_unquoted_is_off_not_a_boolean():
    data = yaml.safe_load("name: j\nteam: llm\ncommand: [python, t.py]\nresources: {gpus: 1}\ncheckpoints: off\n")
    assert data["checkpoints"] is False and load_job(data).checkpoints == "off"


def test_only_a_pytorch_job_is_elastic():
    problems = _problems({**EXAMPLE, "name": "mpi-llama", "framework": "mpi", "elastic": {"minGpus": 8}})
    assert problems == {"job.yaml: elastic": "only PyTorch jobs are elastic (the operator's elasticPolicy), not mpi"}


def test_an_elastic_minimum_above_the_jobs_gpus_is_refused():
    problems = _problems({**EXAMPLE, "elastic": {"minGpus": 32}})
    assert "more than resources.gpus 16" in problems["job.yaml: elastic.minGpus"]


SERVING = {"name": "classifier", "team": "llm", "class": "serving", "command": ["serve"], "resources": {"gpus": 1}}


def test_a_serving_job_file_is_a_deployment_and_needs_no_framework_elastic_or_checkpoints():
    job = load_job(SERVING)
    assert job.kind == "Deployment" and load_job({**SERVING, "checkpoints": "off"}).kind == "Deployment"


def test_what_a_serving_job_has_no_use_for_is_refused_each_by_its_key():
    problems = _problems(
        {
            **SERVING,
            "framework": "pytorch",
            "checkpoints": "shared",
            "elastic": {"minGpus": 1},
            "resources": {"gpus": 1, "interconnect": "efa"},
        }
    )
    assert set(problems) == {
        "job.yaml: framework",
        "job.yaml: checkpoints",
        "job.yaml: elastic",
        "job.yaml: resources.interconnect",
    }
    assert "runs as a Deployment" in problems["job.yaml: framework"]


def test_only_a_serving_job_has_a_port():
    assert load_job({**SERVING, "port": 8000}).port == 8000
    assert _problems({**EXAMPLE, "port": 8000}) == {
        "job.yaml: port": "only a serving job has a port (class: serving), not a training job"
    }


@pytest.mark.parametrize(
    ("job", "said"),
    [
        ({**SERVING, "readyPath": "/healthz"}, "is asked on the replicas' port: set port too"),
        ({**SERVING, "port": 8000, "readyPath": "healthz"}, "is not an absolute URL path"),
        ({**SERVING, "port": 8000, "readyPath": "/ready?full=1"}, "is not an absolute URL path"),
        ({**EXAMPLE, "readyPath": "/healthz"}, "only a serving job has a readiness path"),
    ],
    ids=["without-port", "relative", "with-a-query", "training"],
)
def test_a_ready_path_that_cannot_be_asked_is_refused_naming_it(job, said):
    (key, message), *others = _problems(job).items()
    assert (key, others) == ("job.yaml: readyPath", []) and said in message, message


# Any value YAML can hold, in place of any key of the example: a ConfigError naming keys, never another exception.
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, deadline=1000, derandomize=True, database=None)
@given(
    st.sampled_from(["name", "team", "command", "image", "framework", "class", "elastic", "data", "env", "priority"])
    | st.sampled_from(["resources.gpus", "resources.gpuType", "resources.gpuMemoryGiB", "resources.cudaDriver"]),
    _VALUES,
)
def test_any_value_in_any_key_is_accepted_or_refused_naming_keys_never_crashing(key, value):
    data = json.loads(json.dumps(EXAMPLE))
    outer, _, inner = key.partition(".")
    (data[outer] if inner else data)[inner or outer] = value
    try:
        load_job(data, "job.yaml")
    except ConfigError as refused:
        assert all(p.key.startswith("job.yaml") and p.message for p in refused.problems)


@pytest.mark.parametrize("name", ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_IMEX_CHANNELS"])
def test_an_env_that_picks_gpus_by_name_is_refused_naming_it(name):
    """Attack: such an env rendered, and only the API server refused the submitted job (the team policy's
    message, naming no job-file key)."""
    problems = _problems({**EXAMPLE, "env": {"OK": "1", name: "all"}})
    assert list(problems) == [f"job.yaml: env.{name}"]


def test_a_misspelt_resource_key_suggests_the_one_it_means():
    with pytest.raises(ConfigError) as refused:
        load_job({**EXAMPLE, "resources": {"gpu": 4}}, "job.yaml")
    problems = {p.key: p.message for p in refused.value.problems}
    assert problems["job.yaml: resources.gpu"].startswith("is not a job file setting; did you mean gpus?")


def test_a_misspelt_key_whose_setting_is_missing_is_one_line_not_also_required():
    resources = {k: v for k, v in EXAMPLE["resources"].items() if k != "gpus"}
    problems = _problems({**EXAMPLE, "resources": {**resources, "gpu": 16}})
    assert list(problems) == ["job.yaml: resources.gpu"]


def test_a_misspelt_keys_value_is_checked_as_the_setting_it_means():
    resources = {k: v for k, v in EXAMPLE["resources"].items() if k != "gpus"}
    with pytest.raises(ConfigError) as refused:
        load_job({**EXAMPLE, "resources": {**resources, "gpu": 0}}, "job.yaml")
    assert [(p.key, p.message) for p in refused.value.problems] == [
        ("job.yaml: resources.gpu", "is not a job file setting; did you mean gpus? (docs/reference/job-file.md)"),
        ("job.yaml: resources.gpu", "must be at least 1, got 0"),
    ]


def test_the_preflight_switch_takes_only_run_or_skip_naming_it():
    (message,) = _problems({**EXAMPLE, "env": {"HIGGSFIELD_PREFLIGHT": "off"}}).values()
    assert message.startswith("'off': the pre-flight check's switch is run or skip")


@pytest.mark.parametrize(("key", "data"), [("resources.cudaDriver", {"cudaDriver": 580}), ("command[3]", None)])
def test_a_number_where_text_is_asked_is_told_to_be_quoted(key, data):
    """`cudaDriver: 580` and `--epochs, 3` are numbers to YAML; the refusal said only 'must be a string'."""
    job = {**EXAMPLE, "command": ["python", "train.py", "--epochs", 3]}
    if data:
        job = {**EXAMPLE, "resources": {**EXAMPLE["resources"], **data}}
    problems = _problems(job)
    assert problems[f"job.yaml: {key}"].endswith("(YAML reads it unquoted as a number: quote it)")


@pytest.mark.parametrize(
    ("where", "key", "said"),
    [
        ("resources", "instanceType", "resources.gpuType"),
        (None, "instanceType", "resources.gpuType"),
        (None, "pool", "resources.gpuType"),
        ("resources", "nodes", "resources.gpus"),
        ("resources", "memory", "resources.gpuMemoryGiB"),
    ],
)
def test_a_key_that_says_where_to_run_points_at_what_the_job_file_says_instead(where, key, said):
    """A newcomer asked for an instance type finds no such key: the refusal named none to use instead."""
    job = {**EXAMPLE, "resources": {**EXAMPLE["resources"], key: "p5.48xlarge"}} if where else {**EXAMPLE, key: "x"}
    (message,) = _problems(job).values()
    assert said in message and "docs/reference/job-file.md" in message


def test_one_gpu_type_may_be_written_without_a_list_by_its_python_name_too():
    """The Python API takes names (gpu_type) as well as the file's keys: `gpu_type="H100"` said 'must be a list'."""
    data = {**EXAMPLE, "resources": {"gpus": 16, "gpu_type": "H100"}}
    assert load_job(data).resources.gpu_type == ("H100",)


@pytest.mark.parametrize(
    ("resources", "key", "kind"),
    [
        ({1: 2}, "resources.1", "a number"),
        ({True: 2}, "resources.true", "a boolean"),
        ({None: 2}, "resources.null", "null"),
    ],
)
def test_a_key_yaml_reads_as_no_text_is_named_as_written_and_why(resources, key, kind):
    """`1: 2` under resources said `resources[1]: Keys should be strings`, pydantic's words, a list's index."""
    problems = _problems({**EXAMPLE, "resources": {**EXAMPLE["resources"], **resources}})
    assert problems[f"job.yaml: {key}"].startswith(f"is not a job file setting: YAML reads this key as {kind}")


@pytest.mark.parametrize(
    ("framework", "name", "kind", "on"),
    [
        ("mpi", "OMPI_MCA_orte_default_hostfile", "MPIJob", "an MPIJob's launcher"),
        ("tensorflow", "TF_CONFIG", "TFJob", "every pod of a TFJob"),
        ("xgboost", "WORKER_ADDRS", "XGBoostJob", "every pod of an XGBoostJob"),
        ("jax", "COORDINATOR_ADDRESS", "JAXJob", "every pod of a JAXJob"),
        ("paddle", "PADDLE_MASTER", "PaddleJob", "every pod of a PaddleJob"),
    ],
)
def test_an_env_the_training_operator_sets_over_the_teams_is_refused_naming_the_kind(framework, name, kind, on):
    """The operator appends its own value after the template's env, so the team's was silently lost."""
    problems = _problems(_framework_job(framework, {"OK": "1", name: "mine"}))
    assert list(problems) == [f"job.yaml: env.{name}"]
    assert problems[f"job.yaml: env.{name}"].startswith(f"is set on {on} by the Training Operator (")


@pytest.mark.parametrize(
    ("framework", "name"),
    [
        ("pytorch", "TF_CONFIG"),
        ("tensorflow", "MASTER_ADDR"),
        ("mpi", "RANK"),
        ("mpi", "I_MPI_HYDRA_BOOTSTRAP"),  # the operator sets it only where the template has not
        ("xgboost", "COORDINATOR_ADDRESS"),
        ("jax", "PADDLE_MASTER"),
        ("paddle", "WORKER_ADDRS"),
    ],
)
def test_an_env_another_kinds_operator_sets_is_the_teams_in_this_kind(framework, name):
    job = load_job(_framework_job(framework, {name: "mine"}))
    assert job.env == {name: "mine"}


@pytest.mark.parametrize("data", [{**EXAMPLE, "name": "70b-ft"}, {**SERVING, "name": "7b-chat", "port": 8000}])
def test_a_job_name_starting_with_a_digit_is_refused_naming_it(data):
    """A Kubeflow job's name is a DNS-1035 label to the Training Operator's validating webhook (validatePyTorchJob and
    its kin: NameIsDNS1035Label, kubeflow/trainer:pkg/webhooks/pytorch/pytorchjob_webhook.go@v1.9.4), and so is a
    Service's to the API server: `70b-ft` rendered, and its submission was refused."""
    problems = _problems(data)
    assert list(problems) == ["job.yaml: name"] and "starting with a letter" in problems["job.yaml: name"]
