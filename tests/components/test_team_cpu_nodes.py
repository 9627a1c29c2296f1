"""The teams' CPU nodes: where a team's pods without GPUs run (an MPI job's launcher, a CPU-only Job), so that none
runs on a GPU node (components/tenancy.py). A managed node group in every stack, at zero until such a pod waits,
which the Cluster Autoscaler can plan from its Auto Scaling group's tags while it has no node."""

from __future__ import annotations

import pytest

from components.cpu_nodes import TEAM_CPU_LABELS, TEAM_CPU_TAINT
from infra.config.gpu_pools import seconds_of
from infra.core.names import AUTOSCALER_TEMPLATE, SCALE_DOWN_UNNEEDED_TAG, SYSTEM_TAINT_KEY
from infra.offline.evaluate import load_stack
from tests.conftest import STACKS, plan_of, set_key

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
ASG_TAG = "aws:autoscaling/tag:Tag"


def _group(stack: str):
    (group,) = [g for g in plan_of(stack).of_type(NODE_GROUP) if g.name == "team-cpu-nodes"]
    return group


def _asg_tags(stack: str) -> dict[str, str]:
    return {
        t.inputs["tag"]["key"]: t.inputs["tag"]["value"]
        for t in plan_of(stack).of_type(ASG_TAG)
        if t.name.startswith("team-cpu-nodes-asg-")
    }


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_has_the_teams_cpu_nodes_at_zero_labelled_and_tainted_for_them(stack):
    group = _group(stack)
    assert group.inputs["scalingConfig"]["minSize"] == 0 and group.inputs["scalingConfig"]["desiredSize"] == 0
    assert group.inputs["labels"] == TEAM_CPU_LABELS
    (taint,) = group.inputs["taints"]
    assert (taint["key"], taint["value"], taint["effect"]) == (TEAM_CPU_TAINT["key"], "true", "NO_SCHEDULE")
    assert taint["key"] != SYSTEM_TAINT_KEY


@pytest.mark.parametrize("stack", STACKS)
def test_the_autoscaler_plans_a_teams_cpu_node_from_zero_by_its_label_and_taint(stack):
    """Managed node group tags do not reach the Auto Scaling group: the autoscaler reads these off the ASG."""
    tags = _asg_tags(stack)
    (label, value), *_ = TEAM_CPU_LABELS.items()
    assert tags[f"{AUTOSCALER_TEMPLATE}/label/{label}"] == value
    assert tags[f"{AUTOSCALER_TEMPLATE}/taint/{TEAM_CPU_TAINT['key']}"] == "true:NoSchedule"


@pytest.mark.parametrize("stack", STACKS)
def test_the_launcher_the_operator_makes_fits_the_node_the_autoscaler_plans_from_zero(stack):
    """The autoscaler's node of an empty group has the instance type's CPU and memory and, of anything else, what the
    ASG's `resources/` tags say (cluster-autoscaler/cloudprovider/aws/aws_manager.go buildNodeFromTemplate
    @cluster-autoscaler-1.35.2): the MPI launcher's kubectl-delivery asks ephemeral storage, so without that tag no
    launcher ever brought a node up."""
    from kubernetes.utils.quantity import parse_quantity

    from infra.core.bundled import instance_types
    from infra.offline import jobs
    from tests.security.test_r20_operator_pods import _as_the_operator_makes_it

    cfg = plan_of(stack).config
    if "mpi-nccl-tests" not in jobs.examples_for(cfg):
        pytest.skip(f"{stack} renders no MPIJob")
    launcher = _as_the_operator_makes_it(jobs.workload_of(jobs.render("mpi-nccl-tests", cfg)), "Launcher")
    facts = min(
        (instance_types()[t] for t in cfg.team_cpu_nodes.instance_types), key=lambda t: t["VCpuInfo"]["DefaultVCpus"]
    )
    node = {
        "cpu": parse_quantity(facts["VCpuInfo"]["DefaultVCpus"]),
        "memory": parse_quantity(f"{facts['MemoryInfo']['SizeInMiB']}Mi"),
        "ephemeral-storage": parse_quantity(
            _asg_tags(stack).get(f"{AUTOSCALER_TEMPLATE}/resources/ephemeral-storage", 0)
        ),
    }
    spec = launcher["spec"]

    def asked(containers: list[dict], resource: str):
        return sum((parse_quantity(c.get("resources", {}).get("requests", {}).get(resource, 0)) for c in containers), 0)

    for resource, room in node.items():
        running = asked(spec["containers"], resource)
        each_init = max((asked([c], resource) for c in spec.get("initContainers", [])), default=0)
        assert max(running, each_init) <= room, (resource, running, each_init, room)
    assert any(asked([c], "ephemeral-storage") for c in spec.get("initContainers", []))  # kubectl-delivery's


@pytest.mark.parametrize("stack", STACKS)
def test_a_teams_cpu_node_outlasts_the_gpu_pools_scale_down_time(stack):
    """A gang's launcher's node comes before its GPU nodes and stays empty until Volcano binds the whole gang: it is
    kept as long as the GPU pools keep theirs."""
    longest = max(seconds_of(p.scale_down_unneeded_time) for p in plan_of(stack).config.gpu_pools)
    assert seconds_of(_asg_tags(stack)[SCALE_DOWN_UNNEEDED_TAG]) == longest


@pytest.mark.parametrize("stack", STACKS)
def test_the_teams_cpu_nodes_hold_every_teams_cpu_only_room_at_once(stack):
    """16 vCPUs a team (components/teams.py cpu_only_quota), on the smallest of the group's types."""
    cfg = plan_of(stack).config
    vcpus = {"m7i.xlarge": 4, "m7i.2xlarge": 8, "m6i.2xlarge": 8}
    smallest = min(vcpus[t] for t in cfg.team_cpu_nodes.instance_types)
    assert _group(stack).inputs["scalingConfig"]["maxSize"] * smallest >= 16 * len(cfg.scheduler.teams)


def test_a_type_of_few_pod_slots_counts_every_node_a_teams_pods_fill(project_copy):
    """t3.medium holds 17 pods (3 interfaces of 6 addresses), 7 past the node daemons (TEAM_CPU_NODE_DAEMON_PODS): one
    team's 16 pods of a millicore fill three nodes' slots, and maxSize counts them beside the nodes its CPU and memory
    take (2 x 16 vCPUs over 1.7, 2 x 64 GiB over 3.4: 18 + 37), so another team's launcher still finds a node."""
    root = project_copy("dev", set_key("higgsfield:teamCpuNodes", {"instanceTypes": ["t3.medium"]}))
    cfg = load_stack("bad", root=root)
    assert len(cfg.scheduler.teams) == 1
    assert cfg.team_cpu_nodes.max_size == 18 + 37 + 3
