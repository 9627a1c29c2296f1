"""Every job file the loader accepts, on every shipped stack and each of its teams: either rendering refuses it with a
ConfigError naming a job-file setting, or the team's policy admits every object the platform renders and every pod,
Service, PodGroup and HorizontalPodAutoscaler the Training Operator makes of them (of a serving Deployment: the
ReplicaSet the Deployment controller makes and its pods), each as the account that creates it, and each of those
objects passes the Kubernetes schema checks (infra/offline/kubernetes_schema.py; a Kubeflow job its CRD's, as
`jobs render` checks it: team_job._fits_its_crd) and is named as its validation asks (DNS_1035). The controllers are
modelled in test_r20_operator_pods.py."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components import tenancy
from infra.config import FRAMEWORKS, ConfigError, JobFile
from infra.config.job import load_job
from infra.core.names import JOB_NAME_PREFIXES
from infra.offline import kubernetes_schema, team_job
from infra.offline.pods import stack_repository
from tests.conftest import STACKS, config_of, team_rules
from tests.security.test_r20_operator_pods import (
    DEPLOYMENT_CONTROLLER,
    REPLICASET_CONTROLLER,
    _as_the_deployment_controller_makes_it,
    _as_the_operator_groups_it,
    _as_the_operator_makes_it,
    _as_the_operator_scales_it,
    _as_the_replicaset_controller_makes_it,
    _replicas,
    _the_service_the_operator_makes,
)
from tests.security.test_tenancy import denied_by

# A DNS-1035 label: what the Training Operator's validating webhook asks of a Kubeflow job's name (NameIsDNS1035Label,
# kubeflow/trainer:pkg/webhooks/*/*_webhook.go@v1.9.4; MPIJob has none) and the API server of a Service's
# (ValidateServiceName, kubernetes/kubernetes:pkg/apis/core/validation/validation.go).
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
NAMED_AS_DNS_1035 = {kind for kind, *_ in FRAMEWORKS.values() if kind != "MPIJob"} | {"Service"}
# the settings a job file writes, as written (a refusal's key starts with one of them)
SETTINGS = {field.alias or name for name, field in JobFile.model_fields.items()}
SERVING = "serving"  # the class of a serving job, which has no framework
GPU_MODELS = ["H100", "H200", "B200", "A100", "L40S"]
# a team's own names, names the platform sets, the pre-flight's switch (each maybe refused, by the loader or rendering)
ENV_NAMES = ["MY_FLAG", "OMP_NUM_THREADS", "NCCL_DEBUG", "FI_PROVIDER", "PYTHONPATH", "HF_HOME", "HIGGSFIELD_PREFLIGHT"]


def _mostly(draw: Any, fitting: st.SearchStrategy, other: st.SearchStrategy) -> Any:
    """A value from `fitting` seven times in eight, else from `other`: most files render, some are refused."""
    return draw(other if draw(st.integers(0, 7)) == 7 else fitting)


def _maybe(draw: Any) -> bool:
    """Whether to write an optional setting (hypothesis leans to the first of a choice: here, writing it)."""
    return draw(st.sampled_from([True, False]))


@st.composite
def _job_files(draw: Any, framework: str, name: str) -> tuple[str, dict]:
    """(a shipped stack, a job file of `framework` (SERVING: a serving job) named `name` after its kind's prefix for
    one of its teams) over the settings that change how it renders, most of them what one of the stack's pools and the
    team's classes offer."""
    stack = draw(st.sampled_from(STACKS))
    cfg = config_of(stack)
    pool, team = draw(st.sampled_from(cfg.gpu_pools)), draw(st.sampled_from(cfg.scheduler.teams))
    per_node, serving = pool.gpus_per_node, framework == SERVING
    # many nodes, one whole node, a node's share, one GPU
    nodes = st.integers(1, pool.max_size + 1).map(lambda n: n * per_node)
    gpus = draw(st.one_of(nodes, st.integers(1, per_node), st.just(1)))
    resources: dict[str, Any] = {"gpus": gpus}
    if _maybe(draw):
        every = st.lists(st.sampled_from(GPU_MODELS), min_size=1, max_size=3)
        resources["gpuType"] = _mostly(draw, st.just([pool.instance.gpu_model]), every)
    if _maybe(draw):
        gib = pool.instance.gpu_memory_mib // per_node // 1024
        resources["gpuMemoryGiB"] = _mostly(draw, st.sampled_from([gib, 16]), st.just(gib + 1))
    if not serving:
        resources["interconnect"] = _mostly(
            draw, st.sampled_from(["efa" if pool.efa else "any", "any"]), st.just("efa")
        )
    if _maybe(draw):
        resources["cudaDriver"] = _mostly(
            draw, st.sampled_from([">=570", "580", ">=535"]), st.sampled_from(["570", ">=590"])
        )
    classes = [c for c in ("training", "evaluation") if cfg.scheduler.classes_of(team, c)]
    class_ = SERVING if serving else _mostly(draw, st.sampled_from(classes), st.just(SERVING))
    prefix = "" if serving else JOB_NAME_PREFIXES.get(FRAMEWORKS[framework][0], "")
    data: dict[str, Any] = {
        "name": prefix + name,
        "team": team.name,
        "class": class_,
        "command": draw(st.sampled_from([["python", "train.py", "--epochs", "3"], ["mpirun", "all_reduce_perf"]])),
        "resources": resources,
    }
    if not serving:
        data["framework"] = framework
        data["checkpoints"] = draw(st.sampled_from(["shared", "off"]))
        if framework == "pytorch" and _maybe(draw):
            least = st.integers(1, max(1, gpus // per_node)).map(lambda n: n * per_node)
            data["elastic"] = {"minGpus": _mostly(draw, least, st.integers(1, gpus))}
    elif _maybe(draw):
        data["port"] = draw(st.sampled_from([8000, 80, 8080]))
        if _maybe(draw):
            data["readyPath"] = "/healthz"
    theirs = [d.name for d in cfg.fsx.datasets if team.name in (d.owner, *d.readers)] if cfg.fsx.enabled else []
    if _maybe(draw) and _mostly(draw, st.just(bool(theirs)), st.just(True)):  # none to name: mostly none named
        data["data"] = [{"dataset": _mostly(draw, st.sampled_from(theirs or ["none"]), st.just("other"))}]
    if _maybe(draw):
        names = draw(st.lists(st.sampled_from(ENV_NAMES), max_size=3, unique=True))
        data["env"] = {n: draw(st.sampled_from(["run", "skip"])) if n.startswith("HIGGSFIELD") else "1" for n in names}
    if _maybe(draw):
        theirs = list(cfg.scheduler.classes_of(team, class_)) or ["none"]
        every = [c.name for c in cfg.scheduler.priority_classes]
        data["priority"] = _mostly(draw, st.sampled_from(theirs), st.sampled_from(every))
    image = _mostly(draw, st.sampled_from([None, "own"]), st.just("docker.io/library/python:3.12"))
    if image:
        data["image"] = f"{stack_repository(cfg)}:v1" if image == "own" else image
    return stack, data


def _findings(stack: str, data: dict) -> list[str]:
    """What goes wrong with job file `data` on `stack`, each as a line naming the object; [] when it is refused with a
    key of the job file or runs."""
    try:
        job = load_job(data)
    except ConfigError:
        return []  # the loader's refusals name their keys (tests/config/test_job_file.py)
    cfg = config_of(stack)
    try:
        objects, _ = team_job.render(job, cfg)
    except ConfigError as refused:
        root = re.split(r"[.\[]", refused.key, maxsplit=1)[0]
        return [] if root in SETTINGS else [f"refused naming no job-file setting: {refused.key}: {refused}"]
    rules, version, found = team_rules(stack, job.team), cfg.kubernetes_version, []

    def check(obj: dict, user: str | None = None, schema: bool = True) -> None:
        what = f"{obj['kind']} {obj['metadata'].get('name') or obj['metadata'].get('generateName')}"
        denied = denied_by(obj, rules, **({"user": user} if user else {}))
        found.extend(f"{what} ({user or 'the team'}): {message}" for message in denied)
        problem = schema and kubernetes_schema.problem(obj, version)
        if problem:
            found.append(f"{what}: schema: {problem}")
        if obj["kind"] in NAMED_AS_DNS_1035 and not DNS_1035.match(obj["metadata"]["name"]):
            found.append(f"{what}: its name is no DNS-1035 label (a letter first)")

    for obj in objects:
        check(obj)
    workload = objects[-1]
    if workload["kind"] == "Deployment":
        check(_as_the_deployment_controller_makes_it(workload), DEPLOYMENT_CONTROLLER)
        check(_as_the_replicaset_controller_makes_it(workload), REPLICASET_CONTROLLER)
        return found
    grown = workload["spec"].get("elasticPolicy", {}).get("maxReplicas", 0)  # the most pods the operator's HPA asks
    for replica, spec in _replicas(workload).items():
        for index in sorted({0, int(spec.get("replicas", 1)) - 1, max(0, grown - 1)}):
            check(_as_the_operator_makes_it(workload, replica, index), tenancy.OPERATOR_USER)
            if workload["kind"] != "MPIJob":
                check(_the_service_the_operator_makes(workload, replica, index), tenancy.OPERATOR_USER)
    # no schema of Volcano's PodGroup is kept (infra/offline/crd_schemas.py)
    check(_as_the_operator_groups_it(workload, stack), tenancy.OPERATOR_USER, schema=False)
    if "elasticPolicy" in workload["spec"]:
        check(_as_the_operator_scales_it(workload), tenancy.OPERATOR_USER)
    return found


@pytest.mark.parametrize("name", ["job", "7b-job"])  # a pytorch or serving job's name may start with a digit
@pytest.mark.parametrize("framework", [*FRAMEWORKS, SERVING])
@settings(max_examples=15, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_every_job_file_is_refused_naming_a_setting_or_every_object_made_of_it_is_admitted(framework, name, data):
    stack, job_file = data.draw(_job_files(framework, name))
    findings = _findings(stack, job_file)
    assert not findings, "\n".join([f"stack {stack}: {job_file}", *findings])
