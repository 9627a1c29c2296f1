"""The health gate in every stack's plan: the startup taint on every gated GPU node group (and in
the autoscaler's node template), the DaemonSet on GPU nodes only, RBAC limited to nodes, the
admission policy that keeps the gate on its own node (its CEL evaluated with cel-expr-python on the
requests the API server would admit), no team account able to patch nodes, the replacement role,
and the Capacity Block window's scheduled actions."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime

import pytest
import yaml

from components import gpu_pools, healthgate
from infra.config import STARTUP_TAINT_KEY
from infra.config import gpu_pools as pool_settings
from infra.offline import healthcheck, kubernetes_schema
from infra.offline.evaluate import record
from tests.conftest import ROOT, plan_of, set_pool
from tests.node_admission import node_update_denials

DAEMONSET = "kubernetes:apps/v1:DaemonSet"


def _gates(plan) -> dict[str, dict]:
    """The gate's DaemonSets by pool (one per gated pool)."""
    return {
        d.inputs["metadata"]["labels"]["higgsfield.io/pool"]: d.inputs
        for d in plan.of_type(DAEMONSET)
        if d.inputs["metadata"]["name"].startswith("health-gate-")
    }


def _gate(plan):
    return next(iter(_gates(plan).values()))


def _gated_pools(plan):
    return [p for p in plan.config.gpu_pools if p.health_gate.enabled]


def test_every_gated_pool_has_its_own_gate(plan):
    assert set(_gates(plan)) == {p.name for p in _gated_pools(plan)}


def test_every_gpu_node_group_joins_with_the_startup_taint(plan):
    for group in plan.of_type("aws:eks/nodeGroup:NodeGroup"):
        if "gpu-" not in group.name:
            continue
        taints = {(t["key"], t["effect"]) for t in group.inputs["taints"]}
        assert (STARTUP_TAINT_KEY, "NO_SCHEDULE") in taints, group.name


def test_the_startup_taint_carries_the_autoscalers_startup_prefix():
    """The prefix the autoscaler drops from template nodes (StartupTaintPrefix, kubernetes/autoscaler:
    cluster-autoscaler/utils/taints/taints.go@cluster-autoscaler-1.35.0)."""
    assert STARTUP_TAINT_KEY.startswith("startup-taint.cluster-autoscaler.kubernetes.io/")


def test_the_autoscaler_node_template_describes_the_startup_taint(plan):
    for group in plan.of_type("aws:eks/nodeGroup:NodeGroup"):
        if "gpu-" not in group.name:
            continue
        tags = {
            t.inputs["tag"]["key"]: t.inputs["tag"]["value"]
            for t in plan.of_type("aws:autoscaling/tag:Tag")
            if t.name.startswith(f"{group.name}-asg-")
        }
        assert tags[f"k8s.io/cluster-autoscaler/node-template/taint/{STARTUP_TAINT_KEY}"] == "pending:NoSchedule", (
            group.name
        )
        assert tags["k8s.io/cluster-autoscaler/node-template/label/higgsfield.io/gated"] == "true"


def test_the_gate_runs_on_its_pools_gated_gpu_nodes_until_they_pass_and_tolerates_every_taint(plan):
    for pool, gate in _gates(plan).items():
        spec = gate["spec"]["template"]["spec"]
        assert spec["nodeSelector"] == {
            "nvidia.com/gpu.present": "true",
            "higgsfield.io/gated": "true",
            "higgsfield.io/pool": pool,
        }
        assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "higgsfield.io/health", "operator": "NotIn", "values": ["healthy"]}]}
            ]
        }
        assert spec["tolerations"] == [{"operator": "Exists"}]  # the startup taint, nvidia.com/gpu and a pool's own


def test_the_gate_daemonset_is_a_valid_kubernetes_object(plan):
    for gate in _gates(plan).values():
        manifest = copy.deepcopy(gate)
        manifest["spec"]["template"]["spec"]["containers"][0]["image"] = (
            "123456789012.dkr.ecr.us-east-2.amazonaws.com/x:src-1"
        )
        kubernetes_schema.validate(manifest, "1.35")


def test_the_gate_gets_every_gpu_of_its_node_from_the_device_plugin_not_from_an_env_var(plan):
    pools = {p.name: p for p in _gated_pools(plan)}
    for pool, gate in _gates(plan).items():
        containers = gate["spec"]["template"]["spec"]["containers"]
        container = next(c for c in containers if c["name"] == "gate")
        gpus = str(pools[pool].gpus_per_node)
        assert (
            container["resources"]["requests"]["nvidia.com/gpu"]
            == container["resources"]["limits"]["nvidia.com/gpu"]
            == gpus
        )
        assert not {e["name"] for e in container["env"]} & {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"}


def test_a_new_node_in_the_autoscalers_template_has_passed_so_the_gates_gpus_stay_free_for_jobs(plan):
    """The template node carries higgsfield.io/health=healthy, which the gate's required node
    affinity excludes: the autoscaler does not put the gate's pod (all GPUs) on it."""
    for pool in _gated_pools(plan):
        group = next(
            g
            for g in plan.of_type("aws:eks/nodeGroup:NodeGroup")
            if g.inputs["labels"].get("higgsfield.io/pool") == pool.name
        )
        tags = {
            t.inputs["tag"]["key"]: t.inputs["tag"]["value"]
            for t in plan.of_type("aws:autoscaling/tag:Tag")
            if t.name.startswith(f"{group.name}-asg-")
        }
        assert tags["k8s.io/cluster-autoscaler/node-template/label/higgsfield.io/health"] == "healthy"
        assert (
            "higgsfield.io/health" not in group.inputs["labels"]
        )  # a real node joins without it, so the gate runs there


def test_the_gates_cluster_wide_rights_are_get_list_and_patch_on_nodes(plan):
    """list: its pool's healthy nodes' drivers (health_gate.pool_drivers); patch stays limited to
    its own node by the admission policy."""
    (role,) = [
        r.inputs
        for r in plan.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole")
        if r.inputs["metadata"]["name"] == "higgsfield-health-gate"
    ]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]}]
    roles = {
        (r.inputs["metadata"]["namespace"], r.inputs["metadata"]["name"]): r.inputs["rules"]
        for r in plan.of_type("kubernetes:rbac.authorization.k8s.io/v1:Role")
        if r.inputs["metadata"]["name"].startswith(("health-gate", "higgsfield-health-gate"))
    }
    assert roles == {
        ("default", "higgsfield-health-gate-events"): [  # list: the re-check requests (health_gate.recheck)
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "list"]}
        ],
        ("higgsfield-health", "health-gate-expectations"): [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
        ],
    }


def _can_patch_nodes(rules: list[dict]) -> bool:
    return any(
        set(r.get("apiGroups", [])) & {"", "*"}
        and set(r.get("resources", [])) & {"nodes", "*"}
        and set(r.get("verbs", [])) & {"patch", "update", "*"}
        for r in rules
    )


def test_no_team_service_account_is_bound_to_a_role_that_can_patch_nodes(stack):
    plan = plan_of(stack)
    teams = {t.name for t in plan.config.scheduler.teams}
    objects = [r.inputs for r in plan.resources if r.type.startswith("kubernetes:rbac")]
    for pool in plan.config.gpu_pools:  # and what `higgsfield healthcheck render` prints for a team
        objects += healthcheck.render(plan.config, pool.name)
    roles = {o["metadata"]["name"]: o.get("rules", []) for o in objects if o.get("kind") == "ClusterRole"}
    for binding in (o for o in objects if o.get("kind") in ("ClusterRoleBinding", "RoleBinding")):
        if any(s.get("namespace") in teams for s in binding.get("subjects", [])):
            assert not _can_patch_nodes(roles.get(binding["roleRef"]["name"], [])), binding["metadata"]["name"]
    assert all(
        o.get("kind") not in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
        for p in plan.config.gpu_pools
        for o in healthcheck.render(plan.config, p.name)
    )


# --- the admission policy: only its own node, only its taint and labels ----------------------------


def _node(labels=None, taints=None) -> dict:
    return {
        "metadata": {"name": "ip-10-40-1-5.ec2.internal", "labels": {"higgsfield.io/pool": "h100", **(labels or {})}},
        "spec": {
            "providerID": "aws:///us-east-2b/i-0abc",
            "taints": taints
            if taints is not None
            else [
                {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
                {"key": STARTUP_TAINT_KEY, "value": "pending", "effect": "NoSchedule"},
            ],
        },
    }


def denied(
    old: dict, new: dict, node_of_token: str | None = "ip-10-40-1-5.ec2.internal", user: str = healthgate.GATE_USER
) -> list[str]:
    """The messages of the validations that deny this update (none if the policy does not match)."""
    return node_update_denials(healthgate.own_node_policy(), old, new, user, healthgate.NODE_NAME_EXTRA, node_of_token)


def _passed(node: dict) -> dict:
    new = copy.deepcopy(node)
    new["metadata"]["labels"].update({"higgsfield.io/health": "healthy"})
    new["spec"]["taints"] = [t for t in new["spec"]["taints"] if t["key"] != STARTUP_TAINT_KEY]
    return new


def test_the_gate_may_untaint_and_label_its_own_node():
    assert denied(_node(), _passed(_node())) == []


def test_the_gate_may_not_touch_another_node():
    assert denied(_node(), _passed(_node()), node_of_token="ip-10-40-9-9.ec2.internal") == [
        "the health gate may change only the node its pod runs on"
    ]


def test_a_token_without_a_node_is_refused():
    assert "the health gate may change only the node its pod runs on" in denied(
        _node(), _passed(_node()), node_of_token=None
    )


def test_the_gate_may_not_remove_other_taints_or_change_other_labels():
    new = _passed(_node())
    new["spec"]["taints"] = []
    new["metadata"]["labels"]["higgsfield.io/pool"] = "b200"
    assert set(denied(_node(), new)) == {
        f"the health gate may add or remove only the taint {STARTUP_TAINT_KEY}",
        "the health gate may change only the higgsfield.io/health* labels",
    }


def test_the_gate_may_not_cordon_a_node():
    new = _passed(_node())
    new["spec"]["unschedulable"] = True
    assert denied(_node(), new) == ["the health gate may not change a node's annotations or cordon it"]


def test_the_gate_may_put_its_taint_back_no_schedule_after_a_failure_or_reboot():
    old = _passed(_node())
    new = copy.deepcopy(old)
    new["spec"]["taints"].append({"key": STARTUP_TAINT_KEY, "value": "failed", "effect": "NoSchedule"})
    assert denied(old, new) == []


def test_the_gate_may_not_re_taint_its_node_no_execute():
    """A NoExecute startup taint would evict every pod of the node, other teams' jobs included."""
    old = _passed(_node())
    new = copy.deepcopy(old)
    new["spec"]["taints"].append({"key": STARTUP_TAINT_KEY, "value": "failed", "effect": "NoExecute"})
    assert denied(old, new) == [f"the health gate's taint {STARTUP_TAINT_KEY} is NoSchedule (never NoExecute)"]


NODE, NODE_NAME_EXTRA = "ip-10-40-1-5.ec2.internal", healthgate.NODE_NAME_EXTRA
BESIDE_ITS_OWN = {
    "finalizer": ("metadata", "finalizers", ["example.com/hold"]),
    "owner_reference": ("metadata", "ownerReferences", [{"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": "1"}]),
    "provider_id": ("spec", "providerID", "aws:///us-east-2b/i-0other"),
    "pod_cidr": ("spec", "podCIDR", "10.99.0.0/24"),
    "pod_cidrs": ("spec", "podCIDRs", ["10.99.0.0/24"]),
    "config_source": (
        "spec",
        "configSource",
        {"configMap": {"name": "x", "namespace": "kube-system", "kubeletConfigKey": "kubelet"}},
    ),
}


@pytest.mark.parametrize("field", sorted(BESIDE_ITS_OWN))
def test_the_gate_may_change_nothing_of_its_node_but_its_taint_and_labels(field):
    part, key, value = BESIDE_ITS_OWN[field]
    new = _passed(_node())
    new[part][key] = value
    assert denied(_node(), new) == [
        "the health gate may change only its taint and health labels: not a node's finalizers, owner references, "
        "providerID, pod CIDRs or config source"
    ]


@pytest.mark.parametrize("field", sorted(BESIDE_ITS_OWN))
def test_the_fsx_csi_node_plugin_may_change_nothing_of_its_node_but_its_taint_either(field):
    """The policy beside the gate's: the CSI node plugin removes its agent-not-ready taint, nothing else."""
    from components.storage import CSI_NODE_USER, CSI_NOT_READY_TAINT, csi_node_policy

    old = _node(taints=[{"key": CSI_NOT_READY_TAINT, "effect": "NoExecute"}])
    new = copy.deepcopy(old)
    new["spec"]["taints"] = []
    part, key, value = BESIDE_ITS_OWN[field]
    assert node_update_denials(csi_node_policy(), old, new, CSI_NODE_USER, NODE_NAME_EXTRA, NODE) == []
    new[part][key] = value
    assert node_update_denials(csi_node_policy(), old, new, CSI_NODE_USER, NODE_NAME_EXTRA, NODE) == [
        "the FSx CSI node plugin may not change a node's finalizers, owner references, providerID, pod CIDRs or "
        "config source"
    ]


def test_the_policy_leaves_every_other_user_to_rbac():
    new = _passed(_node())
    new["spec"]["taints"] = []
    assert denied(_node(), new, node_of_token=None, user="system:node:ip-10-40-1-5.ec2.internal") == []


def test_the_policy_is_bound_to_deny(plan):
    (binding,) = [
        b.inputs
        for b in plan.of_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding")
        if b.inputs["spec"]["policyName"] == "higgsfield-health-gate-own-node"
    ]
    assert binding["spec"]["validationActions"] == ["Deny"]


# --- replacement of failed nodes: only the pools that ask, only their groups ------------------------


@pytest.fixture(scope="module")
def replacing_plan():
    config = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())["config"]
    set_pool(0, healthGate={"onFailure": "replace"})(config)
    return record("prod", root=ROOT, overrides={"higgsfield:gpuPools": config["higgsfield:gpuPools"]})


def test_no_pool_asking_for_replacement_means_no_aws_identity_for_the_gate(plan):
    assert not [
        a
        for a in plan.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
        if a.inputs["namespace"] == healthgate.NAMESPACE
    ]


def test_replacement_is_allowed_only_in_the_auto_scaling_groups_of_replacing_pools(replacing_plan):
    (association,) = [
        a
        for a in replacing_plan.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
        if a.inputs["namespace"] == healthgate.NAMESPACE
    ]
    assert association.inputs["serviceAccount"] == healthgate.SERVICE_ACCOUNT
    (policy,) = [p for p in replacing_plan.of_type("aws:iam/rolePolicy:RolePolicy") if p.name == "health-gate-replace"]
    (statement,) = json.loads(policy.inputs["policy"])["Statement"]
    assert statement["Action"] == ["autoscaling:SetInstanceHealth"]
    assert statement["Condition"] == {
        "StringEquals": {
            "aws:ResourceTag/k8s.io/cluster-autoscaler/higgsfield-prod": "owned",
            "aws:ResourceTag/higgsfield.io/pool": ["h100"],
        }
    }


def test_every_gpu_auto_scaling_group_names_its_pool(plan):
    tags = {t.name: t.inputs["tag"] for t in plan.of_type("aws:autoscaling/tag:Tag") if t.name.endswith("-asg-pool")}
    assert {v["value"] for v in tags.values()} == {p.name for p in plan.config.gpu_pools}
    assert {v["key"] for v in tags.values()} == {"higgsfield.io/pool"}


# --- Capacity Blocks: inside the window only --------------------------------------------------------


def _block_pool():
    return next(p for p in plan_of("prod").config.gpu_pools if p.capacity_type == "capacity-block")


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_before_its_window_a_capacity_block_pool_is_held_at_zero_then_opened_then_drained():
    actions = {a.name: a for a in gpu_pools.window_actions(_block_pool(), _at("2026-12-03T00:00:00"))}
    assert list(actions) == ["closed-until-start", "open", "drain"]
    closed, opened, drain = actions.values()
    assert (closed.max_size, closed.end_time, closed.recurrence is not None) == (0, "2027-01-04T11:30:00Z", True)
    assert (opened.min_size, opened.desired, opened.max_size, opened.start_time) == (
        8,
        8,
        8,
        "2027-01-04T11:30:00Z",
    )  # warm: the whole block
    assert (drain.min_size, drain.max_size, drain.desired, drain.start_time) == (
        0,
        0,
        0,
        "2027-01-18T10:30:00Z",
    )  # drainBefore 1h


def test_inside_its_window_only_the_drain_is_scheduled():
    assert [a.name for a in gpu_pools.window_actions(_block_pool(), _at("2027-01-10T00:00:00"))] == ["drain"]


def test_after_the_drain_nothing_is_scheduled_in_the_past():
    assert gpu_pools.window_actions(_block_pool(), _at("2027-01-18T10:30:00")) == []


def test_the_plan_schedules_the_block_pools_actions_on_its_auto_scaling_group(monkeypatch):
    monkeypatch.setattr(pool_settings, "now", lambda: _at("2026-12-03T00:00:00"))
    plan = record("prod", root=ROOT)
    schedules = {s.name: s.inputs for s in plan.of_type("aws:autoscaling/schedule:Schedule")}
    assert set(schedules) == {"gpu-h200-block-closed-until-start", "gpu-h200-block-open", "gpu-h200-block-drain"}
    assert (
        schedules["gpu-h200-block-drain"]["startTime"] == "2027-01-18T10:30:00Z"
        and schedules["gpu-h200-block-drain"]["maxSize"] == 0
    )


def test_with_fsx_the_gate_checks_lustre_in_a_directory_of_its_own(plan):
    if not _gates(plan):
        return
    spec = _gate(plan)["spec"]["template"]["spec"]
    claims = {v["persistentVolumeClaim"]["claimName"] for v in spec.get("volumes", []) if "persistentVolumeClaim" in v}
    expected = {
        p.inputs["metadata"]["name"]: json.loads(p.inputs["data"]["expectations.json"])
        for p in plan.of_type("kubernetes:core/v1:ConfigMap")
        if p.inputs["metadata"]["namespace"] == healthgate.NAMESPACE
    }
    if not plan.config.fsx.enabled:
        assert claims == set() and {e["LUSTRE_PATH"] for e in expected.values()} == {""}
        return
    assert claims == {"lustre-health"} and {e["LUSTRE_PATH"] for e in expected.values()} == {"/fsx"}
    (volume,) = [
        v.inputs
        for v in plan.of_type("kubernetes:core/v1:PersistentVolume")
        if v.inputs["spec"]["claimRef"] == {"namespace": healthgate.NAMESPACE, "name": "lustre-health"}
    ]
    assert volume["metadata"]["annotations"]["higgsfield.io/lustre-path"] == "/health"
