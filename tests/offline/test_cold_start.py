"""A job's cold start, modelled and shortened: `higgsfield timeline STACK --job
POOL` shows "job submitted -> first step" cold and warm, each step with a cited figure or marked
as an estimate; the image is pulled once per node before the gate passes; GPU nodes pull in
parallel (nodeadm FastImagePull); the half-delivered-gang bound per pool."""

from __future__ import annotations

import base64
import json

import pytest
import yaml

from infra.cli.main import main
from infra.offline import cold_start, jobs
from infra.offline.evaluate import record
from tests.conftest import ROOT, STACKS, plan_of, set_key

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"


def _pool(stack: str, name: str | None = None):
    cfg = plan_of(stack).config
    return next(p for p in cfg.gpu_pools if name in (None, p.name))


def test_timeline_job_shows_the_cold_and_the_warm_path_with_their_totals(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["timeline", "prod", "--job", "h100"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Job submitted -> first step on pool h100 (16 x p5.48xlarge):")
    assert "\n  cold: " in out and "\n  warm: " in out and "Half-delivered gang" in out


@pytest.mark.parametrize("stack", STACKS)
def test_every_step_has_a_source_and_uncited_figures_say_estimate(stack):
    for path in (cold_start.cold_path(_pool(stack), 2), cold_start.warm_path(_pool(stack), 2)):
        for step in path.steps:
            assert step.source
            assert step.estimate or "@" in step.source or step.source.startswith("config:"), step


def test_the_cited_autoscaler_and_volcano_defaults_are_the_figures_used():
    steps = {s.source.split(" ")[0]: s for s in cold_start.cold_path(_pool("prod", "h100"), 16).steps}
    ca = "kubernetes/autoscaler:cluster-autoscaler/config/const.go@cluster-autoscaler-1.35.2"
    gpu_buffer = "kubernetes/autoscaler:cluster-autoscaler/core/static_autoscaler.go@cluster-autoscaler-1.35.2"
    assert steps[ca].seconds == 10.0 and steps[gpu_buffer].seconds == 30.0


def test_the_gate_figure_is_bounded_by_the_pools_gate_timeout():
    pool = _pool("prod", "h100")
    (gate,) = [s for s in cold_start.cold_path(pool, 16).steps if s.what.startswith("health gate checks")]
    assert gate.seconds <= 20 * 60 and "healthGate.timeout = 20m" in gate.source


def test_a_warm_pool_starts_a_job_in_about_a_minute_and_a_cold_one_takes_minutes():
    pool = _pool("prod", "b200-odcr")
    cold, warm = cold_start.cold_path(pool, 4), cold_start.warm_path(pool, 4)
    assert warm.seconds < 90 < 5 * 60 < cold.seconds


def test_the_shortened_cold_path_is_shorter_than_the_devel_image_with_default_pull():
    pool = _pool("prod", "h100")
    assert cold_start.cold_path(pool, 16).seconds < cold_start.cold_path(pool, 16, shortened=False).seconds


def test_the_health_gate_runs_the_image_jobs_run_so_the_job_finds_it_pulled(project_copy):
    """The gate's DaemonSet pod pulls the training image on every new node before the taint comes
    off; a job that names the same image (tag pull policy IfNotPresent) does not pull again. A
    team's own trainingImage holds no health gate: the gate runs its own image and an init
    container pulls the team's (components/healthgate.py prepull_container)."""
    image = "123456789012.dkr.ecr.us-east-2.amazonaws.com/llm/efa-train:2026.11"
    root = project_copy("prod", set_key("higgsfield:trainingImage", image))
    plan = record("bad", root=root)
    gates = [r for r in plan.resources if r.name.startswith("health-gate-daemonset-")]  # one per gated pool
    assert gates
    for gate in gates:  # the gate runs its own image and pulls the team's in an init container
        spec = gate.inputs["spec"]["template"]["spec"]
        assert [c["image"] for c in spec["initContainers"]] == [image]
        assert {c["image"] for c in spec["containers"]} != {image}
    job = jobs.render("pytorch-ddp", plan.config, pool="h100")[-1]
    assert {t["spec"]["containers"][0]["image"] for t in jobs.pod_templates(job)} == {image}
    assert not image.endswith(":latest")  # IfNotPresent by default (a :latest tag would pull Always)


def _node_config(template) -> dict:
    body = base64.b64decode(template.inputs["userData"]).decode()
    part = body.split("Content-Type: application/node.eks.aws\n\n", 1)[1].split("\n--//", 1)[0]
    return yaml.safe_load(part)


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_nodes_turn_on_nodeadms_fast_image_pull(stack):
    """awslabs/amazon-eks-ami:nodeadm/api/v1alpha1/nodeconfig_types.go@v20260724: featureGates
    enum {InstanceIdNodeName, FastImagePull}; ignored below 4 vCPUs / 7 GiB (UseSOCISnapshotter)."""
    plan = plan_of(stack)
    gpu_templates = [t for t in plan.of_type(LAUNCH_TEMPLATE) if t.name.startswith("gpu-")]
    assert gpu_templates
    for template in gpu_templates:
        config = _node_config(template)
        assert config["kind"] == "NodeConfig" and config["spec"]["featureGates"] == {"FastImagePull": True}


def test_the_raid0_and_the_feature_gate_share_one_node_config():
    template = next(t for t in plan_of("prod").of_type(LAUNCH_TEMPLATE) if t.name == "gpu-h100-lt")
    spec = _node_config(template)["spec"]
    assert (spec["featureGates"], spec["instance"]) == (
        {"FastImagePull": True},
        {"localStorage": {"strategy": "RAID0"}},
    )


@pytest.mark.parametrize("stack", STACKS)
def test_each_pool_states_its_half_delivered_gang_bound(stack):
    for pool in plan_of(stack).config.gpu_pools:
        bound = cold_start.give_back(pool, 1.0)
        assert bound.deadline_s == cold_start.gang_deadline_s(pool)
        assert (
            bound.seconds
            == bound.deadline_s + bound.check_s + cold_start.seconds_of(pool.scale_down_unneeded_time) + 10.0
        )
        assert bound.usd == pytest.approx(max(pool.max_size - 1, 0) * bound.seconds / 3600)


def test_timeline_job_json_has_both_paths_and_the_bound(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["timeline", "prod", "--job", "b200-odcr", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["path"] for p in data["paths"]][:2] == ["cold", "warm"]
    assert data["half_delivered_gang"]["nodes_at_most"] == 3


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["timeline", "dev", "--job", "nope"], "error: --job: no GPU pool 'nope' in stack dev; pools: l40s"),
        (
            ["timeline", "dev", "--job", "l40s", "--nodes", "9"],
            "error: --nodes: must be between 1 and pool l40s's maxSize 2, got 9",
        ),
    ],
)
def test_a_bad_job_pool_or_size_names_the_option(argv, says, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == says
