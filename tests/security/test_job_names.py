"""A Kubeflow job's name says its kind (issue 34, gangs admitted as they are): the Training Operator
finds a job's PodGroup by namespace and name alone (SyncPodGroup, kubeflow/trainer:pkg/controller.v1/
common/scheduling.go@v1.9.4) and makes the job's pods at once under a group past Pending, so a job of
another kind named like a running gang would start beside it, outside its queue's enqueue order. The
team policy admits a name for one kind only, and none of Volcano's `podgroup-<uid>` names. The job
file and `jobs render --name` say the same before anything is submitted. cel-expr-python, as
tests/security/test_tenancy.py evaluates the policy."""

from __future__ import annotations

import pytest

from components import tenancy
from components.tenancy import REPLICA_SPECS
from infra.config import ConfigError, load_job
from infra.core.names import JOB_NAME_PREFIXES, KUBEFLOW_JOB_KINDS, job_name_problem
from infra.offline import jobs
from tests.conftest import plan_of
from tests.security.test_tenancy import VISION, _job, denied_by, verdicts

NAMES = "a Kubeflow job's name starts with its kind's prefix"
SPECS = dict(zip(KUBEFLOW_JOB_KINDS, REPLICA_SPECS, strict=True))  # both in the operator's order
# Every kind's own prefix, near misses of them, Volcano's group names, and a plain name.
CANDIDATES = [
    "llama",
    *(f"{prefix}llama" for prefix in JOB_NAME_PREFIXES.values()),
    "tfllama",
    "mpi",
    "pytorch-tf-llama",
    "podgroup-6f1c2a9e-1b7d-4a51-9d0e-2f3c4b5a6d7e",
]


def _of_kind(kind: str, name: str | None, generate_name: str | None = None) -> dict:
    job = _job()
    job["kind"] = kind
    job["spec"][SPECS[kind]] = job["spec"].pop("pytorchReplicaSpecs")
    job["metadata"] = {"namespace": "vision"}
    if name is not None:
        job["metadata"]["name"] = name
    if generate_name is not None:
        job["metadata"]["generateName"] = generate_name
    return job


# The team policy with its name rule alone: the other rules are other tests' (test_a_tfjob_... runs them all).
POLICY = tenancy.admission_policy(VISION)
POLICY["spec"]["validations"] = [v for v in POLICY["spec"]["validations"] if v["message"].startswith(NAMES)]


def _names_refused(job: dict, **request) -> bool:
    return any(not ok for _, ok in verdicts(POLICY, job, **request))


@pytest.mark.parametrize("name", CANDIDATES)
def test_no_name_is_admitted_for_two_kinds_of_job(name):
    admitted = [kind for kind in KUBEFLOW_JOB_KINDS if not _names_refused(_of_kind(kind, name))]
    assert len(admitted) <= 1, admitted


@pytest.mark.parametrize("name", CANDIDATES)
@pytest.mark.parametrize("kind", list(KUBEFLOW_JOB_KINDS))
def test_the_job_file_and_the_team_policy_admit_the_same_names(kind, name):
    assert (job_name_problem(name, kind) is None) == (not _names_refused(_of_kind(kind, name)))


def test_a_tfjob_named_like_a_running_pytorchjob_is_denied_and_named_as_its_kind_is_admitted():
    assert denied_by(_of_kind("PyTorchJob", "llama")) == []
    assert [m for m in denied_by(_of_kind("TFJob", "llama")) if m.startswith(NAMES)]
    assert denied_by(_of_kind("TFJob", "tf-llama")) == []


def test_a_job_named_like_the_podgroup_volcano_made_for_a_plain_workload_is_denied():
    """Volcano names a plain workload's group `podgroup-<owner UID>` (GeneratePodgroupName, volcano-sh/volcano:
    staging/src/volcano.sh/apis/pkg/apis/helpers/helpers.go@v1.15.1), and the UID of a team's own ReplicaSet is
    the team's to read: the operator would resize that running group by the job's name and start its pods."""
    assert _names_refused(_of_kind("PyTorchJob", CANDIDATES[-1]))


@pytest.mark.parametrize(("kind", "prefix", "admitted"), [("TFJob", "tf-", True), ("TFJob", "", False)])
def test_a_job_made_by_generate_name_is_judged_by_its_prefix(kind, prefix, admitted):
    assert _names_refused(_of_kind(kind, None, generate_name=f"{prefix}llama-")) is not admitted
    assert _names_refused(_of_kind(kind, f"{prefix}llama-x7k2p", generate_name=f"{prefix}llama-")) is not admitted


def test_a_job_made_before_the_rule_may_still_be_updated():
    job = _of_kind("TFJob", "llama")
    assert not _names_refused(job, operation="UPDATE", old=job)


def test_a_job_file_of_another_framework_without_its_prefix_is_refused_naming_the_setting():
    data = {"name": "llama", "team": "vision", "command": ["python", "t.py"], "resources": {"gpus": 8}}
    with pytest.raises(ConfigError) as refused:
        load_job({**data, "framework": "tensorflow"}, "job.yaml")
    assert refused.value.key == "job.yaml: name"
    assert "a TFJob's name starts with 'tf-'" in str(refused.value)
    assert load_job({**data, "name": "tf-llama", "framework": "tensorflow"}).name == "tf-llama"


def test_a_pytorch_job_file_named_with_another_kinds_prefix_is_refused():
    data = {"name": "mpi-llama", "team": "vision", "command": ["python", "t.py"], "resources": {"gpus": 8}}
    with pytest.raises(ConfigError, match="may not start with 'mpi-'"):
        load_job(data, "job.yaml")


def test_a_serving_job_is_a_deployment_and_keeps_any_name():
    data = {"name": "tf-serve", "team": "vision", "command": ["python", "s.py"], "resources": {"gpus": 1}}
    assert load_job({**data, "class": "serving"}).name == "tf-serve"


def test_rendering_an_example_refuses_a_name_without_the_examples_kind_prefix():
    cfg = plan_of("prod").config
    with pytest.raises(ConfigError) as refused:
        jobs.render("tf-mnist", cfg, name="mnist")
    assert refused.value.key == "name" and "a TFJob's name starts with 'tf-'" in str(refused.value)


def test_every_example_keeps_its_default_name():
    cfg = plan_of("prod").config
    for example in jobs.examples_for(cfg):
        job = jobs.workload_of(jobs.render(example, cfg))
        if job["apiVersion"].startswith("kubeflow.org/"):
            assert job_name_problem(job["metadata"]["name"], job["kind"]) is None, example
