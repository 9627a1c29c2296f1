"""A team's job file of class serving renders as the platform serves: a Deployment shaped like the
serving-classifier example, placed by the job's constraints, admitted by the team's policy and no
other team's, valid against the Kubernetes schema; what serving has no use for is refused by key."""

from __future__ import annotations

import copy

import pytest
import yaml

from components.teams import rules_of
from infra.config import ConfigError, load_job
from infra.core.names import DO_NOT_DISRUPT, DRIVER_MAJOR_LABEL
from infra.offline import jobs, kubernetes_schema, team_job
from tests.conftest import config_of
from tests.security.test_tenancy import denied_by, is_denied

SERVING = {
    "name": "classifier",
    "team": "llm",
    "class": "serving",
    "command": ["python", "-m", "server"],
    "resources": {"gpus": 2, "gpuType": ["H100"], "cudaDriver": ">=570"},
}


def _render(stack: str = "prod", **changes):
    data = copy.deepcopy(SERVING)
    for key, value in changes.items():
        if key.startswith("resources."):
            data["resources"][key.split(".", 1)[1]] = value
        else:
            data[key] = value
    return team_job.render(load_job(data), config_of(stack))


def _template(objects) -> dict:
    (template,) = jobs.pod_templates(objects[-1])
    return template


def _replica_pod(template: dict, team: str = "llm") -> dict:
    """A replica as the ReplicaSet controller creates it: the template's metadata and spec as written,
    owned by its ReplicaSet as controller (GetPodFromTemplate appends the controllerRef:
    kubernetes/kubernetes:pkg/controller/controller_utils.go)."""
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "classifier-abc", "uid": "u-1", "controller": True}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "classifier-abc-1",
            "namespace": team,
            "ownerReferences": [owner],
            **copy.deepcopy(template["metadata"]),
        },
        "spec": copy.deepcopy(template["spec"]),
    }


def test_a_serving_job_is_a_deployment_of_its_teams_serving_class_scheduled_by_volcano():
    objects, placed = _render()
    (deployment,) = objects
    assert deployment["kind"] == "Deployment" and deployment["metadata"]["namespace"] == "llm"
    assert deployment["spec"]["replicas"] == 1 and placed.pool.name == "h100"
    spec = _template(objects)["spec"]
    assert spec["schedulerName"] == "volcano" and spec["priorityClassName"] == "serving"
    assert _template(objects)["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == "research"


def test_a_serving_job_has_the_serving_examples_marks_placement_and_identity():
    objects, _ = _render()
    example = jobs.render("serving-classifier", config_of("prod"), pool="h100", team="llm")[-1]
    ours, theirs = _template(objects), example["spec"]["template"]
    for key in (
        "schedulerName",
        "priorityClassName",
        "nodeSelector",
        "securityContext",
        "automountServiceAccountToken",
    ):
        assert ours["spec"][key] == theirs["spec"][key], key
    assert theirs["spec"]["tolerations"] == ours["spec"]["tolerations"]
    assert (
        theirs["metadata"]["labels"]["higgsfield.io/workload"] == ours["metadata"]["labels"]["higgsfield.io/workload"]
    )
    assert deployment_floor(objects[-1]) == deployment_floor(example) == "1"
    assert objects[-1]["spec"]["selector"]["matchLabels"].items() <= ours["metadata"]["labels"].items()


def deployment_floor(deployment: dict) -> str:
    return deployment["metadata"]["annotations"]["scheduling.volcano.sh/group-min-member"]


def test_a_serving_replica_takes_its_share_of_a_node_and_the_teams_storage_but_nothing_only_training_has():
    objects, placed = _render()
    template = _template(objects)
    main = template["spec"]["containers"][0]
    limits = main["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 2 and "vpc.amazonaws.com/efa" not in limits and "memory" in limits
    assert {"name": "shm", "mountPath": "/dev/shm"} in main["volumeMounts"]
    assert {"name": "shared", "mountPath": "/fsx"} in main["volumeMounts"]
    assert not any(e["name"].startswith("CHECKPOINT") for e in main["env"])
    assert "terminationGracePeriodSeconds" not in template["spec"]
    assert DO_NOT_DISRUPT not in template["metadata"]["annotations"]
    assert template["metadata"]["annotations"]["volcano.sh/preemptable"] == "false"
    assert main["command"] == ["python", "-m", "server"]  # the team's own, no launcher in front
    assert placed.gpus_per_pod == 2


def test_gpus_beyond_a_node_are_replicas_of_one_whole_node_each():
    objects, placed = _render(**{"resources.gpus": 16})
    assert objects[-1]["spec"]["replicas"] == 2 == placed.pods
    assert _template(objects)["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 8


def test_a_serving_job_may_run_its_own_image_on_an_efa_pool_as_it_uses_no_efa():
    """A training job there is refused a stock image (NCCL would fall back to TCP); a server has no NCCL ring."""
    objects, placed = _render(image="docker.io/vllm/vllm-openai:v0.9.0")
    assert (
        placed.pool.efa and _template(objects)["spec"]["containers"][0]["image"] == "docker.io/vllm/vllm-openai:v0.9.0"
    )


def test_without_a_port_a_serving_job_is_its_deployment_alone():
    objects, _ = _render()
    assert [o["kind"] for o in objects] == ["Deployment"] and "ports" not in _template(objects)["spec"]["containers"][0]


def test_a_port_names_the_replicas_http_port_and_puts_the_serving_examples_service_in_front():
    cfg = config_of("prod")
    objects, _ = _render(port=8000)
    service, deployment = objects
    main = _template(objects)["spec"]["containers"][0]
    assert main["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]  # the scrape job's port
    example = next(o for o in jobs.render("serving-classifier", cfg, team="llm") if o["kind"] == "Service")
    assert service["spec"]["ports"][0]["port"] == example["spec"]["ports"][0]["port"] == 80
    assert service["spec"]["ports"][0]["targetPort"] == example["spec"]["ports"][0]["targetPort"] == "http"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    llm = next(t for t in cfg.scheduler.teams if t.name == "llm")
    assert denied_by(service, rules_of(llm, cfg.scheduler.priority_classes)) == []
    kubernetes_schema.validate(service, cfg.kubernetes_version)


def test_a_ready_path_is_the_replicas_readiness_probe_on_their_http_port_as_the_serving_examples():
    """Without it a replica takes requests from its Service as soon as its container starts, before its model loads."""
    cfg = config_of("prod")
    objects, _ = _render(port=8000, readyPath="/healthz")
    probe = _template(objects)["spec"]["containers"][0]["readinessProbe"]
    example = next(o for o in jobs.render("serving-classifier", cfg, team="llm") if o["kind"] == "Deployment")
    (container,) = example["spec"]["template"]["spec"]["containers"]
    assert probe["httpGet"] == container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    kubernetes_schema.validate(objects[-1], cfg.kubernetes_version)
    llm = next(t for t in cfg.scheduler.teams if t.name == "llm")
    pod = _replica_pod(_template(objects))
    assert denied_by(pod, rules_of(llm, cfg.scheduler.priority_classes)) == []


def test_the_driver_requirement_is_node_affinity_on_the_serving_replicas_too():
    objects, _ = _render()
    terms = _template(objects)["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": DRIVER_MAJOR_LABEL, "operator": "Gt", "values": ["569"]}
    ]


def test_a_serving_job_and_its_replicas_pass_its_teams_admission_policy_and_no_other_teams():
    cfg = config_of("prod")
    objects, _ = _render()
    rules = {t.name: rules_of(t, cfg.scheduler.priority_classes) for t in cfg.scheduler.teams}
    pod = _replica_pod(_template(objects))
    assert denied_by(objects[-1], rules["llm"]) == [] and denied_by(pod, rules["llm"]) == []
    assert is_denied(objects[-1], rules["vision"]) and is_denied(
        _replica_pod(_template(objects), "vision"), rules["vision"]
    )


def test_a_serving_replica_outside_volcano_would_be_refused_by_the_policy():
    """What the renderer's schedulerName buys: the policy refuses a serving pod kube-scheduler would place."""
    cfg = config_of("prod")
    pod = _replica_pod(_template(_render()[0]))
    pod["spec"]["schedulerName"] = "default-scheduler"
    llm = next(t for t in cfg.scheduler.teams if t.name == "llm")
    assert any("scheduled by volcano" in d for d in denied_by(pod, rules_of(llm, cfg.scheduler.priority_classes)))


def test_the_deployment_validates_against_the_kubernetes_schema():
    objects, _ = _render(**{"resources.gpus": 16})
    kubernetes_schema.validate(objects[-1], config_of("prod").kubernetes_version)


@pytest.mark.parametrize(
    ("key", "changes", "said"),
    [
        ("resources.gpuType", {"resources.gpuType": ["A100"]}, "A100: no GPU pool of stack prod has it"),
        ("resources.gpuMemoryGiB", {"resources.gpuMemoryGiB": 300}, "300 GiB per GPU"),
        ("resources.cudaDriver", {"resources.cudaDriver": ">=590"}, "branch 580"),
        ("resources.gpus", {"resources.gpus": 12}, "neither one node's share nor whole nodes"),
        ("resources.gpus", {"resources.gpus": 24}, "serving quota of 16 GPUs"),
        ("class", {"team": "vision"}, "given no serving priority class"),
        ("priority", {"priority": "batch-low"}, "not one of team llm's serving classes"),
        ("data[0].dataset", {"data": [{"dataset": "medical"}]}, "no dataset 'medical'"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_what_no_pool_or_rule_allows_a_serving_job_is_refused_naming_the_key(key, changes, said):
    with pytest.raises(ConfigError) as refused:
        _render(**changes)
    assert refused.value.key == key and said in refused.value.problems[0].message, refused.value


def test_the_cli_renders_a_serving_job_file_with_its_placement_on_top(tmp_path, capsys):
    from infra.cli.main import main

    path = tmp_path / "classifier.job.yaml"
    path.write_text(yaml.safe_dump(SERVING))
    assert main(["jobs", "render", "prod", "-f", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# classifier (Deployment, serving) for stack prod")
    assert "# Placed on pool h100 (8 x H100 80 GiB, EFA): 1 replica(s) x 2 GPUs" in out
    assert [d["kind"] for d in yaml.safe_load_all(out)] == ["Deployment"]


def test_the_manuals_serving_job_file_renders_for_prod_as_written():
    from tests.conftest import ROOT

    page = (ROOT / "docs" / "concepts" / "training-jobs.md").read_text()
    text = page.split("### A serving job file", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    objects, placed = team_job.render(load_job(yaml.safe_load(text)), config_of("prod"))
    assert objects[-1]["kind"] == "Deployment" and (placed.pool.name, placed.pods, placed.gpus_per_pod) == (
        "h100",
        2,
        8,
    )


def test_every_stack_serves_a_one_gpu_job_file_for_each_team_given_a_serving_class(stack):
    cfg = config_of(stack)
    served = [t for t in cfg.scheduler.teams if cfg.scheduler.classes_of(t, "serving")]
    assert served, f"stack {stack} gives no team a serving class"
    for team in served:
        data = {**SERVING, "team": team.name, "resources": {"gpus": 1}}
        objects, _ = team_job.render(load_job(data), cfg)
        kubernetes_schema.validate(objects[-1], cfg.kubernetes_version)
        rules = rules_of(team, cfg.scheduler.priority_classes)
        assert (
            denied_by(objects[-1], rules) == [] and denied_by(_replica_pod(_template(objects), team.name), rules) == []
        )
