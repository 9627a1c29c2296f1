"""Karpenter as a per-pool option for on-demand and spot pools (DESIGN.md decision 17, issue #25
point 4). The EC2NodeClass and NodePool are checked against the v1 CRD facts read at
aws/karpenter-provider-aws@v1.14.1 (pkg/apis/crds/karpenter.k8s.aws_ec2nodeclasses.yaml,
karpenter.sh_nodepools.yaml); a cluster check is `kubectl apply --dry-run=server -f` of
`higgsfield plan --manifests` output once the CRDs are installed (docs/karpenter.md)."""

from __future__ import annotations

import json
import re

import pytest

from components import karpenter
from components.efa import efa_interfaces_for
from infra.offline import cold_start, cost, jobs
from infra.offline.evaluate import record
from infra.config import STARTUP_TAINT_KEY
from tests.conftest import assert_plan_rejects, plan_of, set_pool

# Facts of the v1 CRDs at the pinned tag (field names, required fields, enums, patterns) - read with
# `git show v1.14.1:pkg/apis/crds/...` and written here, not copied.
NODECLASS_SPEC = {"amiFamily", "amiSelectorTerms", "associatePublicIPAddress", "blockDeviceMappings", "capacityReservationSelectorTerms",
                  "connectionTracking", "context", "cpuOptions", "detailedMonitoring", "instanceProfile", "instanceStorePolicy",
                  "ipPrefixCount", "kubelet", "metadataOptions", "networkInterfaces", "placementGroupSelector", "role",
                  "securityGroupSelectorTerms", "subnetSelectorTerms", "tags", "userData"}
NODECLASS_REQUIRED = {"amiSelectorTerms", "securityGroupSelectorTerms", "subnetSelectorTerms"}
INSTANCE_STORE_POLICIES = {"RAID0"}
METADATA = {"httpEndpoint": {"enabled", "disabled"}, "httpProtocolIPv6": {"enabled", "disabled"}, "httpTokens": {"required", "optional"}}
INTERFACE_TYPES = {"interface", "efa-only"}
NODEPOOL_SPEC = {"disruption", "limits", "replicas", "template", "weight"}
TEMPLATE_SPEC = {"expireAfter", "nodeClassRef", "requirements", "startupTaints", "taints", "terminationGracePeriod"}
CONSOLIDATION = {"WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"}
DURATION = r"^(([0-9]+(s|m|h))+|Never)$"
BUDGET_REASONS = {"Underutilized", "Empty", "Drifted"}
OPERATORS = {"Gte", "Lte", "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}


def _plan(project_copy, stack="staging", index=0, **fields):
    root = project_copy(stack, set_pool(index, provisioner="karpenter", **fields))
    return record("bad", root=root)


@pytest.fixture(scope="module")
def karpenter_plan(tmp_path_factory):
    import shutil

    from tests.conftest import ROOT
    import yaml as pyyaml

    root = tmp_path_factory.mktemp("karpenter")
    for part in ("Pulumi.yaml", "stacks"):
        (shutil.copytree if (ROOT / part).is_dir() else shutil.copy)(ROOT / part, root / part)
    config = pyyaml.safe_load((root / "stacks" / "Pulumi.staging.yaml").read_text())
    pools = config["config"]["higgsfield:gpuPools"]
    pools[0] = {**pools[0], "provisioner": "karpenter", "minSize": 0}
    (root / "stacks" / "Pulumi.bad.yaml").write_text(pyyaml.safe_dump(config))
    return record("bad", root=root)


def _objects(plan, kind):
    return [r.inputs for r in plan.resources if r.inputs.get("kind") == kind]


def test_a_karpenter_pool_has_no_node_group_but_a_nodeclass_and_a_nodepool(karpenter_plan):
    pool = karpenter_plan.config.gpu_pools[0]
    groups = [g for g in karpenter_plan.of_type("aws:eks/nodeGroup:NodeGroup") if (g.inputs.get("labels") or {}).get("higgsfield.io/pool") == pool.name]
    assert groups == []
    assert [n["metadata"]["name"] for n in _objects(karpenter_plan, "EC2NodeClass")] == [f"gpu-{pool.name}"]
    assert [n["metadata"]["name"] for n in _objects(karpenter_plan, "NodePool")] == [f"gpu-{pool.name}"]


def test_the_karpenter_chart_is_pinned_and_runs_on_the_system_nodes(karpenter_plan):
    (release,) = [r for r in karpenter_plan.of_type("kubernetes:helm.sh/v3:Release") if r.name == "karpenter"]
    assert (release.inputs["chart"], release.inputs["version"], release.inputs["repositoryOpts"]["repo"]) == ("karpenter", "1.14.1", "oci://public.ecr.aws/karpenter")
    values = release.inputs["values"]
    assert values["settings"]["clusterName"] == karpenter_plan.config.name and values["settings"]["interruptionQueue"]
    assert values["nodeSelector"] == karpenter.SYSTEM_LABELS and values["serviceAccount"]["name"] == karpenter.SERVICE_ACCOUNT


def test_the_nodeclass_uses_only_fields_the_crd_has_with_its_enums(karpenter_plan):
    (nodeclass,) = _objects(karpenter_plan, "EC2NodeClass")
    spec = nodeclass["spec"]
    assert nodeclass["apiVersion"] == "karpenter.k8s.aws/v1"
    assert set(spec) <= NODECLASS_SPEC and set(spec) >= NODECLASS_REQUIRED
    assert spec["instanceStorePolicy"] in INSTANCE_STORE_POLICIES
    assert all(spec["metadataOptions"][k] in allowed for k, allowed in METADATA.items())
    assert {i["interfaceType"] for i in spec["networkInterfaces"]} <= INTERFACE_TYPES


def test_the_nodeclass_has_the_launch_templates_efa_layout_raid0_and_imds(karpenter_plan):
    pool = karpenter_plan.config.gpu_pools[0]
    (nodeclass,) = _objects(karpenter_plan, "EC2NodeClass")
    spec = nodeclass["spec"]
    expected = [(i.network_card, i.device_index, "efa-only" if i.efa_only else "interface") for i in efa_interfaces_for(pool.instance)]
    assert [(n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) for n in spec["networkInterfaces"]] == expected
    assert spec["instanceStorePolicy"] == "RAID0"
    assert (spec["metadataOptions"]["httpTokens"], spec["metadataOptions"]["httpPutResponseHopLimit"]) == ("required", 1)
    assert spec["blockDeviceMappings"][0]["ebs"]["encrypted"] is True
    assert "FastImagePull: true" in spec["userData"] and "vm.nr_hugepages" in spec["userData"]


def test_the_nodepool_never_disrupts_a_running_training_pod(karpenter_plan):
    pool = karpenter_plan.config.gpu_pools[0]
    (nodepool,) = _objects(karpenter_plan, "NodePool")
    spec = nodepool["spec"]
    assert set(spec) <= NODEPOOL_SPEC and set(spec["template"]["spec"]) <= TEMPLATE_SPEC
    disruption = spec["disruption"]
    assert disruption["consolidationPolicy"] == "WhenEmpty" and disruption["consolidationPolicy"] in CONSOLIDATION
    assert re.fullmatch(DURATION, disruption["consolidateAfter"])
    assert int(disruption["consolidateAfter"][:-1]) >= cold_start.gang_deadline_s(pool)  # boot + gate + gang fill
    (budget,) = disruption["budgets"]
    assert budget["nodes"] == "0" and set(budget["reasons"]) == {"Drifted", "Underutilized"} and set(budget["reasons"]) <= BUDGET_REASONS
    assert spec["template"]["spec"]["expireAfter"] == "Never"


def test_the_nodepool_carries_the_pools_taints_labels_and_the_gates_startup_taint(karpenter_plan):
    pool = karpenter_plan.config.gpu_pools[0]
    (nodepool,) = _objects(karpenter_plan, "NodePool")
    template = nodepool["spec"]["template"]
    assert {t["key"] for t in template["spec"]["startupTaints"]} == {STARTUP_TAINT_KEY}
    assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"} in template["spec"]["taints"]
    assert template["metadata"]["labels"]["higgsfield.io/pool"] == pool.name
    requirements = {r["key"]: r for r in template["spec"]["requirements"]}
    assert all(r["operator"] in OPERATORS for r in requirements.values())
    assert requirements["karpenter.sh/capacity-type"]["values"] == ["on-demand"]
    assert requirements["topology.kubernetes.io/zone"]["values"] == [pool.availability_zone]
    assert nodepool["spec"]["limits"] == {"nvidia.com/gpu": str(pool.max_size * pool.gpus_per_node)}


def test_training_pods_carry_the_do_not_disrupt_annotation():
    job = jobs.render("pytorch-ddp", plan_of("prod").config, pool="h100")[-1]
    for template in jobs.pod_templates(job):
        assert template["metadata"]["annotations"][karpenter.DO_NOT_DISRUPT] == "true"


def _statements() -> list[dict]:
    return json.loads(karpenter.karpenter_policy("hf", "us-east-2", "444455556666", "arn:aws:iam::444455556666:role/node", "arn:aws:sqs:us-east-2:444455556666:q"))["Statement"]


def test_the_controller_may_launch_tag_and_delete_only_what_carries_this_clusters_tag():
    mutating = {"ec2:CreateFleet", "ec2:CreateLaunchTemplate", "ec2:TerminateInstances", "ec2:DeleteLaunchTemplate", "ec2:CreateTags"}
    for s in _statements():
        actions = {s["Action"]} if isinstance(s["Action"], str) else set(s["Action"])
        if s["Sid"] == "AllowScopedEC2InstanceAccessActions":  # images, subnets, SGs a launch uses: unconditioned upstream too
            continue
        if actions & mutating:
            keys = {k for cond in s["Condition"].values() for k in cond}
            assert {"aws:ResourceTag/kubernetes.io/cluster/hf", "aws:RequestTag/kubernetes.io/cluster/hf"} & keys, s["Sid"]
    assert not [s for s in _statements() if "*" in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])]


def test_the_controller_passes_only_the_node_role_to_ec2_and_reads_only_its_queue():
    by_sid = {s["Sid"]: s for s in _statements()}
    assert by_sid["AllowPassingInstanceRole"]["Resource"] == "arn:aws:iam::444455556666:role/node"
    assert by_sid["AllowPassingInstanceRole"]["Condition"] == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
    assert by_sid["AllowInterruptionQueueActions"]["Resource"] == "arn:aws:sqs:us-east-2:444455556666:q"


def test_the_interruption_queue_keeps_messages_5_minutes_encrypted_and_refuses_plain_http(karpenter_plan):
    (queue,) = karpenter_plan.of_type("aws:sqs/queue:Queue")
    assert queue.inputs["messageRetentionSeconds"] == 300 and queue.inputs["sqsManagedSseEnabled"] is True
    rules = karpenter_plan.of_type("aws:cloudwatch/eventRule:EventRule")
    patterns = {json.loads(r.inputs["eventPattern"])["detail-type"][0] for r in rules if r.name.startswith("karpenter-")}
    assert patterns == {detail for _, detail in karpenter.INTERRUPTION_EVENTS.values()}
    assert len([t for t in karpenter_plan.of_type("aws:cloudwatch/eventTarget:EventTarget") if t.name.startswith("karpenter-")]) == 5


def test_a_karpenter_pool_costs_nothing_idle_and_its_maximum_at_full_scale(karpenter_plan):
    est = cost.estimate(karpenter_plan, cost.load_prices())
    pool = karpenter_plan.config.gpu_pools[0]
    (line,) = [e for e in est.lines if e.resource == f"karpenter-{pool.name}" and e.item.startswith("EC2")]
    rate = cost.load_prices()["regions"][karpenter_plan.config.region]["ec2_on_demand_hour"][pool.instance.name]
    assert line.idle_hour == 0.0 and line.full_hour == pytest.approx(pool.max_size * rate)


def test_a_karpenter_pool_passes_the_policy_pack(karpenter_plan):
    """`higgsfield check` runs the same pack: a Karpenter pool plans and checks."""
    from pathlib import Path

    from infra.offline.check import run_policies

    config = json.loads((Path(__file__).resolve().parents[2] / "policies" / "config" / "staging.json").read_text())
    found, _ = run_policies(karpenter_plan, config)
    assert found == [], [f.message for f in found]


@pytest.mark.parametrize("capacity", [{"type": "reservation", "reservationId": "cr-0fedcba9876543210"},
                                      {"type": "capacity-block", "reservationId": "cr-0a1b2c3d4e5f60718", "start": "2027-01-04T11:30:00Z", "end": "2027-01-18T11:30:00Z"}])
def test_karpenter_is_refused_for_reserved_capacity_with_the_reason(capacity, project_copy, capsys):
    extra = {"placementGroup": False} if capacity["type"] else {}
    assert_plan_rejects(project_copy, capsys, "prod", set_pool(0, provisioner="karpenter", capacity=capacity, **extra),
                        "higgsfield:gpuPools[0].provisioner", "aws/karpenter-provider-aws#8514")


def test_a_karpenter_pool_with_a_minimum_is_refused(project_copy, capsys):
    assert_plan_rejects(project_copy, capsys, "staging", set_pool(0, provisioner="karpenter", minSize=1),
                        "higgsfield:gpuPools[0].minSize", "a Karpenter NodePool has no minimum")
