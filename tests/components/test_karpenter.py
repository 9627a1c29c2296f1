"""Karpenter as a per-pool option for on-demand and spot pools (docs/design/karpenter.md). The
EC2NodeClass and NodePool are checked against the v1 CRD facts read at
aws/karpenter-provider-aws@v1.14.1 (pkg/apis/crds/karpenter.k8s.aws_ec2nodeclasses.yaml,
karpenter.sh_nodepools.yaml); a cluster check is `kubectl apply --dry-run=server -f` of
`higgsfield plan --manifests` output once the CRDs are installed (docs/karpenter.md)."""

from __future__ import annotations

import json
import re

import pytest

from components import healthgate, karpenter
from components.delivery import DEPLOY_SERVICES, SCOPED_SERVICES
from components.efa import efa_count, efa_interfaces_for
from infra.config import STARTUP_TAINT_KEY, ConfigError
from infra.core import versions
from infra.core.names import DO_NOT_DISRUPT, interruption_queue, interruption_rule
from infra.offline import cold_start, cost, crd_schemas, jobs, kubernetes_schema, pods
from infra.offline import plan as plan_cli
from infra.offline.evaluate import record
from infra.offline.pods import stack_repository
from policies import rules
from policies.iam_evaluation import Request, evaluate
from tests.conftest import assert_plan_rejects, plan_of, set_pool, with_a_karpenter_pool
from tests.delivery.test_ci_identity import _deploy
from tests.policies.test_policies import violations

# Facts of the v1 CRDs at the pinned tag (field names, required fields, enums, patterns) - read with
# `git show v1.14.1:pkg/apis/crds/...` and written here, not copied.
NODECLASS_SPEC = {
    "amiFamily",
    "amiSelectorTerms",
    "associatePublicIPAddress",
    "blockDeviceMappings",
    "capacityReservationSelectorTerms",
    "connectionTracking",
    "context",
    "cpuOptions",
    "detailedMonitoring",
    "instanceProfile",
    "instanceStorePolicy",
    "ipPrefixCount",
    "kubelet",
    "metadataOptions",
    "networkInterfaces",
    "placementGroupSelector",
    "role",
    "securityGroupSelectorTerms",
    "subnetSelectorTerms",
    "tags",
    "userData",
}
NODECLASS_REQUIRED = {"amiSelectorTerms", "securityGroupSelectorTerms", "subnetSelectorTerms"}
INSTANCE_STORE_POLICIES = {"RAID0"}
METADATA = {
    "httpEndpoint": {"enabled", "disabled"},
    "httpProtocolIPv6": {"enabled", "disabled"},
    "httpTokens": {"required", "optional"},
}
INTERFACE_TYPES = {"interface", "efa-only"}
NODEPOOL_SPEC = {"disruption", "limits", "replicas", "template", "weight"}
TEMPLATE_SPEC = {"expireAfter", "nodeClassRef", "requirements", "startupTaints", "taints", "terminationGracePeriod"}
CONSOLIDATION = {"WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"}
DURATION = r"^(([0-9]+(s|m|h))+|Never)$"
BUDGET_REASONS = {"Underutilized", "Empty", "Drifted"}
OBSERVABILITY = "higgsfield:observability"
OPERATORS = {"Gte", "Lte", "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}


def _plan(project_copy, stack="staging", index=0, **fields):
    root = project_copy(stack, set_pool(index, provisioner="karpenter", **fields))
    return record("bad", root=root)


@pytest.fixture(scope="module")
def karpenter_plan(tmp_path_factory):
    return with_a_karpenter_pool(tmp_path_factory.mktemp("karpenter"), "staging", as_stack="bad")


def _objects(plan, kind):
    return [r.inputs for r in plan.resources if r.inputs.get("kind") == kind]


def test_a_karpenter_pool_has_no_node_group_but_a_nodeclass_and_a_nodepool(karpenter_plan):
    pool = karpenter_plan.config.gpu_pools[0]
    groups = [
        g
        for g in karpenter_plan.of_type("aws:eks/nodeGroup:NodeGroup")
        if (g.inputs.get("labels") or {}).get("higgsfield.io/pool") == pool.name
    ]
    assert groups == []
    assert [n["metadata"]["name"] for n in _objects(karpenter_plan, "EC2NodeClass")] == [f"gpu-{pool.name}"]
    assert [n["metadata"]["name"] for n in _objects(karpenter_plan, "NodePool")] == [f"gpu-{pool.name}"]


def _release(plan, name):
    (release,) = [r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.name == name]
    return release


def test_the_karpenter_chart_is_fetched_by_its_oci_reference_not_as_a_repository_index(karpenter_plan):
    """pulumi-kubernetes downloads index.yaml from repositoryOpts.repo; an OCI chart goes in `chart`
    whole (components/charts.py chart_reference)."""
    release = _release(karpenter_plan, "karpenter")
    assert release.inputs["chart"] == "oci://public.ecr.aws/karpenter/karpenter"
    assert release.inputs["version"] == versions.KARPENTER.version
    assert "repositoryOpts" not in release.inputs


def test_the_crds_are_a_release_of_their_own_chart_so_an_upgrade_upgrades_them(karpenter_plan):
    crds, controller = _release(karpenter_plan, "karpenter-crd"), _release(karpenter_plan, "karpenter")
    assert crds.inputs["chart"] == "oci://public.ecr.aws/karpenter/karpenter-crd"
    assert crds.inputs["version"] == controller.inputs["version"]
    assert controller.inputs["skipCrds"] is True and crds.urn in controller.dependencies


def test_the_karpenter_chart_is_pinned_and_runs_on_the_system_nodes(karpenter_plan):
    release = _release(karpenter_plan, "karpenter")
    assert release.inputs["version"] == versions.KARPENTER.version
    values = release.inputs["values"]
    assert values["settings"]["clusterName"] == karpenter_plan.config.name and values["settings"]["interruptionQueue"]
    assert (
        values["nodeSelector"] == karpenter.SYSTEM_LABELS
        and values["serviceAccount"]["name"] == karpenter.SERVICE_ACCOUNT
    )


def _gpu_node_groups_repair(plan) -> set[bool]:
    return {
        g.inputs["nodeRepairConfig"]["enabled"]
        for g in plan.of_type("aws:eks/nodeGroup:NodeGroup")
        if g.inputs["labels"].get("nvidia.com/gpu.present") == "true"
    }


def test_a_hung_karpenter_node_is_replaced_as_a_node_groups_is_under_node_auto_repair(karpenter_plan):
    """nodeAutoRepair on (staging's): the node-group pool gets EKS auto-repair and Karpenter its node
    repair, which deletes the NodeClaim of a node NotReady or Unknown for 30 min; no other gate is set,
    so the chart keeps its defaults for them."""
    assert karpenter_plan.config.observability.node_auto_repair is True
    assert _gpu_node_groups_repair(karpenter_plan) == {True}
    values = _release(karpenter_plan, "karpenter").inputs["values"]
    assert values["settings"]["featureGates"] == {"nodeRepair": True}


def test_node_auto_repair_off_keeps_karpenter_node_repair_off_whatever_the_charts_default(project_copy):
    """Off is written, not left to the chart: a later chart that turns the gate on by default (a beta
    promotion) does not turn it on for a stack that said no."""

    def change(config):
        set_pool(0, provisioner="karpenter", minSize=0)(config)
        config[OBSERVABILITY] = {**config[OBSERVABILITY], "nodeAutoRepair": False}

    plan = record("bad", root=project_copy("staging", change))
    assert _gpu_node_groups_repair(plan) == {False}
    values = _release(plan, "karpenter").inputs["values"]
    assert values["settings"]["featureGates"] == {"nodeRepair": False}


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
    expected = [
        (i.network_card, i.device_index, "efa-only" if i.efa_only else "interface")
        for i in efa_interfaces_for(pool.instance)
    ]
    assert [
        (n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) for n in spec["networkInterfaces"]
    ] == expected
    assert spec["instanceStorePolicy"] == "RAID0"
    assert (spec["metadataOptions"]["httpTokens"], spec["metadataOptions"]["httpPutResponseHopLimit"]) == (
        "required",
        1,
    )
    assert spec["blockDeviceMappings"][0]["ebs"]["encrypted"] is True
    assert "FastImagePull: true" in spec["userData"]


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
    assert budget["nodes"] == "0" and set(budget["reasons"]) == {"Underutilized"}
    assert set(budget["reasons"]) <= BUDGET_REASONS
    assert spec["template"]["spec"]["expireAfter"] == "Never"
    # Drift may replace a node only when no training pod holds it: do-not-disrupt blocks drift unless
    # the NodeClaim has a terminationGracePeriod (disruption.md@v1.14.1), which ours never has
    assert "terminationGracePeriod" not in spec["template"]["spec"]


def test_karpenter_nodes_follow_a_kubernetes_upgrade_once_they_run_no_training_pod(karpenter_plan):
    """The AMI alias resolves for the control plane's version, so an upgrade drifts every NodeClaim;
    no budget may hold drifted nodes at 0, or they would run the old version for ever."""
    (nodeclass,) = _objects(karpenter_plan, "EC2NodeClass")
    assert [t["alias"] for t in nodeclass["spec"]["amiSelectorTerms"]] == ["al2023@latest"]  # no pinned AMI version
    (nodepool,) = _objects(karpenter_plan, "NodePool")
    budgets = nodepool["spec"]["disruption"]["budgets"]
    assert not [b for b in budgets if b["nodes"] == "0" and "Drifted" in b.get("reasons", ["Drifted"])]


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
        assert template["metadata"]["annotations"][DO_NOT_DISRUPT] == "true"


def _statements() -> list[dict]:
    return json.loads(
        karpenter.karpenter_policy(
            "hf",
            "us-east-2",
            "444455556666",
            "arn:aws:iam::444455556666:role/node",
            "arn:aws:sqs:us-east-2:444455556666:q",
        )
    )["Statement"]


def test_the_controller_may_launch_tag_and_delete_only_what_carries_this_clusters_tag():
    mutating = {
        "ec2:CreateFleet",
        "ec2:CreateLaunchTemplate",
        "ec2:TerminateInstances",
        "ec2:DeleteLaunchTemplate",
        "ec2:CreateTags",
    }
    for s in _statements():
        actions = {s["Action"]} if isinstance(s["Action"], str) else set(s["Action"])
        if (
            s["Sid"] == "AllowScopedEC2InstanceAccessActions"
        ):  # images, subnets, SGs a launch uses: unconditioned upstream too
            continue
        if actions & mutating:
            keys = {k for cond in s["Condition"].values() for k in cond}
            assert {"aws:ResourceTag/kubernetes.io/cluster/hf", "aws:RequestTag/kubernetes.io/cluster/hf"} & keys, s[
                "Sid"
            ]
    assert not [s for s in _statements() if "*" in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])]


def test_the_controller_passes_only_the_node_role_to_ec2_and_reads_only_its_queue():
    by_sid = {s["Sid"]: s for s in _statements()}
    assert by_sid["AllowPassingInstanceRole"]["Resource"] == "arn:aws:iam::444455556666:role/node"
    assert by_sid["AllowPassingInstanceRole"]["Condition"] == {
        "StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}
    }
    assert by_sid["AllowInterruptionQueueActions"]["Resource"] == "arn:aws:sqs:us-east-2:444455556666:q"


def test_the_interruption_queue_keeps_messages_5_minutes_encrypted_and_refuses_plain_http(karpenter_plan):
    (queue,) = karpenter_plan.of_type("aws:sqs/queue:Queue")
    assert queue.inputs["messageRetentionSeconds"] == 300 and queue.inputs["sqsManagedSseEnabled"] is True
    (deny,) = [s for s in json.loads(queue.inputs["policy"])["Statement"] if s["Effect"] == "Deny"]
    assert deny["Action"] == "sqs:*" and deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    rules = karpenter_plan.of_type("aws:cloudwatch/eventRule:EventRule")
    patterns = {
        json.loads(r.inputs["eventPattern"])["detail-type"][0] for r in rules if r.name.startswith("karpenter-")
    }
    assert patterns == {detail for _, detail in karpenter.INTERRUPTION_EVENTS.values()}
    assert (
        len(
            [
                t
                for t in karpenter_plan.of_type("aws:cloudwatch/eventTarget:EventTarget")
                if t.name.startswith("karpenter-")
            ]
        )
        == 5
    )


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


@pytest.mark.parametrize(
    "capacity",
    [
        {"type": "reservation", "reservationId": "cr-0fedcba9876543210"},
        {
            "type": "capacity-block",
            "reservationId": "cr-0a1b2c3d4e5f60718",
            "start": "2027-01-04T11:30:00Z",
            "end": "2027-01-18T11:30:00Z",
        },
    ],
)
def test_karpenter_is_refused_for_reserved_capacity_with_the_reason(capacity, project_copy, capsys):
    extra = {"placementGroup": False} if capacity["type"] else {}
    assert_plan_rejects(
        project_copy,
        capsys,
        "prod",
        set_pool(0, provisioner="karpenter", capacity=capacity, **extra),
        "higgsfield:gpuPools[0].provisioner",
        "aws/karpenter-provider-aws#8514",
    )


def test_a_karpenter_pool_with_a_minimum_is_refused(project_copy, capsys):
    assert_plan_rejects(
        project_copy,
        capsys,
        "staging",
        set_pool(0, provisioner="karpenter", minSize=1),
        "higgsfield:gpuPools[0].minSize",
        "a Karpenter NodePool has no minimum",
    )


# What Karpenter computes for an EC2 instance type (computeCapacity, aws/karpenter-provider-aws:
# pkg/providers/instancetype/types.go@v1.14.1): a pod asking for anything else gets no node.
KARPENTER_CAPACITY = {
    "cpu",
    "memory",
    "ephemeral-storage",
    "pods",
    "vpc.amazonaws.com/pod-eni",
    "nvidia.com/gpu",
    "amd.com/gpu",
    "aws.amazon.com/neuron",
    "aws.amazon.com/neuroncore",
    "habana.ai/gaudi",
    "vpc.amazonaws.com/efa",
}


def _containers(objects):
    for obj in objects:
        for template in jobs.pod_templates(obj):
            yield from template["spec"]["containers"]


@pytest.mark.parametrize("example", ["pytorch-ddp", "mpi-nccl-tests"])
def test_efa_jobs_on_a_karpenter_pool_ask_only_for_what_karpenter_instance_types_offer(karpenter_plan, example):
    cfg = karpenter_plan.config
    pool = cfg.gpu_pools[0]
    assert pool.efa and pool.provisioner == "karpenter"
    containers = list(_containers(jobs.render(example, cfg, pool=pool.name, image=f"{stack_repository(cfg)}:t")))
    asked = {
        name
        for c in containers
        for part in ("requests", "limits")
        for name in ((c.get("resources") or {}).get(part) or {})
    }
    assert asked <= KARPENTER_CAPACITY, asked - KARPENTER_CAPACITY
    assert any("vpc.amazonaws.com/efa" in (c.get("resources") or {}).get("limits", {}) for c in containers)


def test_efa_jobs_on_a_karpenter_pool_tell_libfabric_not_to_use_huge_pages(karpenter_plan):
    cfg = karpenter_plan.config
    rendered = jobs.render("pytorch-ddp", cfg, pool=cfg.gpu_pools[0].name, image=f"{stack_repository(cfg)}:t")
    (main, *_) = list(_containers(rendered))
    assert {"name": "FI_EFA_USE_HUGE_PAGE", "value": "0"} in main["env"]


def test_efa_jobs_on_a_node_group_pool_keep_their_huge_pages():
    cfg = plan_of("prod").config
    pool = next(p for p in cfg.gpu_pools if p.efa and p.provisioner == "node-group")
    (main, *_) = list(_containers(jobs.render("pytorch-ddp", cfg, pool=pool.name, image=f"{stack_repository(cfg)}:t")))
    assert "hugepages-2Mi" in main["resources"]["limits"]
    assert "FI_EFA_USE_HUGE_PAGE" not in {e["name"] for e in main["env"]}


def test_a_huge_pages_request_on_a_karpenter_pool_is_refused_naming_the_key(karpenter_plan):
    pool = karpenter_plan.config.gpu_pools[0]
    spec = {"containers": [{"name": "main", "resources": {"limits": {"hugepages-2Mi": "2Gi"}}}]}
    with pytest.raises(ConfigError) as refused:
        pods.prepare_gpu_pod(spec, pool, "image:t", "my-job")
    assert refused.value.problems[0].key == "my-job.containers[0].resources.limits.hugepages-2Mi"
    assert "Karpenter" in refused.value.problems[0].message


def test_a_karpenter_node_reserves_no_huge_pages(karpenter_plan):
    (nodeclass,) = _objects(karpenter_plan, "EC2NodeClass")
    assert "nr_hugepages" not in nodeclass["spec"]["userData"]


def test_a_failed_karpenter_node_is_removed_whatever_the_pools_default(karpenter_plan):
    pool = karpenter_plan.config.gpu_pools[0]
    assert pool.health_gate.on_failure == "keep"  # the default, unset in the stack
    name = healthgate.expectations_name(pool.name)
    (config_map,) = [o for o in _objects(karpenter_plan, "ConfigMap") if o["metadata"]["name"] == name]
    assert json.loads(config_map["data"]["expectations.json"])["ON_FAILURE"] == "replace"


def test_the_gate_may_delete_nodeclaims_only_on_a_stack_with_karpenter_pools(karpenter_plan):
    def rules(plan):
        (role,) = [o for o in _objects(plan, "ClusterRole") if o["metadata"]["name"] == "higgsfield-health-gate"]
        return role["rules"]

    assert {"apiGroups": ["karpenter.sh"], "resources": ["nodeclaims"], "verbs": ["delete"]} in rules(karpenter_plan)
    assert not [r for r in rules(plan_of("prod")) if "karpenter.sh" in r["apiGroups"]]
    bindings = [o["spec"]["policyName"] for o in _objects(karpenter_plan, "ValidatingAdmissionPolicyBinding")]
    assert "higgsfield-health-gate-own-nodeclaim" in bindings


def _delete_denials(claim_node: str, token_node: str | None, user: str = healthgate.GATE_USER) -> list[str]:
    """What the gate's NodeClaim policy says to `user` deleting the NodeClaim of `claim_node`."""
    from tests.node_admission import denials

    claim = {"metadata": {"name": "gpu-a100-x7k2p"}, "status": {"nodeName": claim_node}}
    return denials(
        healthgate.own_nodeclaim_policy(), claim, None, "DELETE", user, healthgate.NODE_NAME_EXTRA, token_node
    )


def test_the_gate_may_delete_the_nodeclaim_of_its_own_node():
    assert _delete_denials("ip-10-0-1-5", "ip-10-0-1-5") == []


def test_the_gate_may_not_delete_another_nodes_nodeclaim_nor_with_a_token_without_a_node():
    assert _delete_denials("ip-10-0-1-5", "ip-10-0-9-9") and _delete_denials("ip-10-0-1-5", None)


def test_the_nodeclaim_policy_leaves_every_other_user_to_rbac():
    assert _delete_denials("ip-10-0-1-5", None, user="system:serviceaccount:kube-system:karpenter") == []


def test_keep_on_a_karpenter_pool_is_refused_with_the_upstream_reason(project_copy, capsys):
    keep = set_pool(0, provisioner="karpenter", healthGate={"onFailure": "keep"})
    assert_plan_rejects(
        project_copy, capsys, "staging", keep, "higgsfield:gpuPools[0].healthGate.onFailure", "counts it as room"
    )


def test_the_nodepool_and_nodeclass_pass_their_crds_schemas(karpenter_plan):
    for kind in ("NodePool", "EC2NodeClass"):
        for obj in _objects(karpenter_plan, kind):
            crd_schemas.validate(obj)


@pytest.mark.parametrize(
    "change",
    [
        lambda o: o["spec"]["disruption"].update(consolidationPolicy="WhenIdle"),  # not in the enum
        lambda o: o["spec"]["template"]["spec"].update(startupTaint=[]),  # a field the CRD lacks
        lambda o: o["spec"]["template"]["spec"].pop("nodeClassRef"),  # required
    ],
)
def test_the_nodepool_schema_refuses_what_the_api_server_would(karpenter_plan, change):
    import copy

    import kubernetes_validate

    (nodepool,) = _objects(karpenter_plan, "NodePool")
    bad = copy.deepcopy(nodepool)
    change(bad)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_schema.validate(bad, karpenter_plan.config.kubernetes_version)


def test_the_nodepool_schema_takes_a_required_field_the_crd_defaults_as_the_api_server_does(karpenter_plan):
    """A budget's `nodes` is required and defaults to 10%: the API server defaults a request before it validates it,
    so a budget that leaves it out is admitted, and `check` must not refuse it."""
    import copy

    (nodepool,) = _objects(karpenter_plan, "NodePool")
    defaulted = copy.deepcopy(nodepool)
    defaulted["spec"]["disruption"]["budgets"] = [{"reasons": ["Drifted"]}]
    kubernetes_schema.validate(defaulted, karpenter_plan.config.kubernetes_version)


def test_the_plan_summary_counts_a_karpenter_pools_gpus(karpenter_plan):
    pool = karpenter_plan.config.gpu_pools[0]
    summary = plan_cli.summarize(karpenter_plan)
    (row,) = [r for r in summary.gpu_pools if r["pool"] == pool.name]
    assert (row["max"], row["max_gpus"]) == (pool.max_size, pool.max_size * pool.gpus_per_node)
    assert row["gpus_per_node"] == str(pool.gpus_per_node)
    assert row["efa_interfaces"] == efa_count(efa_interfaces_for(pool.instance)) and "Karpenter" in row["capacity"]
    assert summary.gpu_capacity == sum(p.max_size * p.gpus_per_node for p in karpenter_plan.config.gpu_pools)


def test_a_stack_with_a_karpenter_pool_plans_checks_and_renders_through_the_cli(project_copy, capsys):
    """The one end-to-end run: `higgsfield plan`, `check` and `jobs render` on a staging variant
    whose EFA pool is provisioned by Karpenter."""
    import yaml as pyyaml

    from infra.cli.main import main
    from infra.offline.evaluate import load_stack

    project_copy("staging", set_pool(0, provisioner="karpenter"))
    assert main(["plan", "bad"]) == 0
    assert "(Karpenter)" in capsys.readouterr().out
    assert main(["check", "bad"]) == 0, capsys.readouterr()
    capsys.readouterr()
    image = f"{stack_repository(load_stack('bad'))}:t"
    assert main(["jobs", "render", "bad", "pytorch-ddp", "--pool", "a100", "--image", image]) == 0
    rendered = [o for o in pyyaml.safe_load_all(capsys.readouterr().out) if o]
    asked = {name for c in _containers(rendered) for name in (c.get("resources") or {}).get("limits", {})}
    assert "vpc.amazonaws.com/efa" in asked and asked <= KARPENTER_CAPACITY


def test_the_chart_export_names_an_oci_chart_by_its_reference_and_no_repository(karpenter_plan, tmp_path):
    """`higgsfield charts` feeds `helm template` in the contracts workflow: "-" there means no --repo."""
    from infra.offline import charts

    charts.export(karpenter_plan, tmp_path)
    rows = {r.split("\t")[0]: r.split("\t") for r in (tmp_path / "releases.tsv").read_text().splitlines()}
    assert rows["karpenter"][1:4] == ["oci://public.ecr.aws/karpenter/karpenter", versions.KARPENTER.version, "-"]


def test_the_interruption_queue_and_its_rules_are_named_by_the_stack_for_the_deploy_roles_policy(karpenter_plan):
    """The deploy role reaches sqs and events on the stack's queue and rules alone (components/delivery.py
    deploy_policy): it reads the queue and puts each rule's pattern, and an auto-named queue
    (`karpenter-interruptions-1a2b3c`) would be out of its reach. Making the queue and the rules' targets is the
    administrator's (InterruptionFeedIsTheAdministrators)."""
    stack = karpenter_plan.stack
    (queue,) = karpenter_plan.of_type("aws:sqs/queue:Queue")
    rules = karpenter_plan.of_type("aws:cloudwatch/eventRule:EventRule")
    assert queue.inputs["name"] == interruption_queue(stack)
    assert sorted(r.inputs["name"] for r in rules) == sorted(
        interruption_rule(stack, e) for e in karpenter.INTERRUPTION_EVENTS
    )
    account = karpenter_plan.config.delivery.account_id
    queue_arn = f"arn:aws:sqs:{karpenter_plan.config.region}:{account}:{queue.inputs['name']}"
    policy = _deploy(karpenter_plan)  # the deploy role's inline and managed policies
    assert evaluate(Request("sqs:GetQueueAttributes", queue_arn), [policy]).allowed
    for rule in rules:
        rule_arn = f"arn:aws:events:{karpenter_plan.config.region}:{account}:rule/{rule.inputs['name']}"
        assert evaluate(Request("events:DescribeRule", rule_arn), [policy]).allowed


def test_the_deploy_role_puts_each_rule_with_the_pattern_the_program_gives_it(karpenter_plan):
    """The deploy role may PutRule a rule of the stack's name only for Karpenter's sources and detail types
    (components/delivery.py RuleSourcesAreKarpenters...): each rule of the plan, with the keys its pattern gives
    PutRule (each key holds its field's values: docs.aws.amazon.com/eventbridge/latest/userguide/
    eb-use-conditions.html, examples 1 to 5; unverified on AWS, docs/security-ci.md says how to check)."""
    account, region = karpenter_plan.config.delivery.account_id, karpenter_plan.config.region
    rules = karpenter_plan.of_type("aws:cloudwatch/eventRule:EventRule")
    assert len(rules) == len(karpenter.INTERRUPTION_EVENTS)
    for rule in rules:
        pattern = json.loads(rule.inputs["eventPattern"])
        context = {"events:source": pattern["source"], "events:detail-type": pattern["detail-type"]}
        request = Request("events:PutRule", f"arn:aws:events:{region}:{account}:rule/{rule.inputs['name']}", context)
        decision = evaluate(request, [_deploy(karpenter_plan)])
        assert decision.allowed, (rule.inputs["name"], decision.reason)


def test_the_interruption_queues_policy_is_createqueues_not_a_queue_policy_resource(karpenter_plan):
    """Both ceilings refuse sqs:SetQueueAttributes, which an aws.sqs.QueuePolicy's create and delete are."""
    assert not karpenter_plan.of_type("aws:sqs/queuePolicy:QueuePolicy")
    (queue,) = karpenter_plan.of_type("aws:sqs/queue:Queue")
    (send,) = [s for s in json.loads(queue.inputs["policy"])["Statement"] if s["Effect"] == "Allow"]
    assert send["Principal"] == {"Service": "events.amazonaws.com"} and "aws:SourceArn" in send["Condition"]["ArnLike"]


def test_the_deploy_role_covers_every_service_a_karpenter_pool_adds(karpenter_plan):
    prefix = {"vpc": "ec2", "cloudwatch": "logs"}
    events = {"aws:cloudwatch/eventRule:EventRule", "aws:cloudwatch/eventTarget:EventTarget"}
    for r in karpenter_plan.resources:
        if r.custom and r.type.startswith("aws:"):
            module = "events" if r.type in events else r.type.split(":")[1].split("/")[0]
            assert prefix.get(module, module) in DEPLOY_SERVICES + SCOPED_SERVICES, r.type


def test_the_planned_interruption_queue_passes_the_pack_rule_on_queue_policies(karpenter_plan):
    (queue,) = karpenter_plan.of_type("aws:sqs/queue:Queue")
    assert violations("sqs-queue-policy-own-services", rules.SQS_QUEUE, dict(queue.inputs)) == []
