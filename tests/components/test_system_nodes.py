"""System nodes tainted, and every platform workload able to run there.

The system node group carries `higgsfield.io/system=true:NoSchedule`. A test walks every
workload the plan deploys -- each Helm release's pods (by the value keys its chart reads, cited
below), the objects we render ourselves, the Training Operator's kustomization and the EKS
managed add-ons -- and checks that each either tolerates the taint and is placed on the system
nodes, or is a node daemon tolerating every taint. A release or add-on the table does not know
fails the walk. On a new cluster the system nodes are the only nodes, so a Deployment that does
not tolerate the taint never runs: CoreDNS' add-on would stay DEGRADED and the deploy fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from components import addons, cpu_nodes
from components.cpu_nodes import SYSTEM_LABELS, SYSTEM_TAINT
from infra.config import SYSTEM_TAINT_KEY
from tests.scheduling_rules import tolerates

RELEASE = "kubernetes:helm.sh/v3:Release"
ROOT = Path(__file__).resolve().parents[2]
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
ANY_TAINT = {"key": "example.com/anything", "value": "x", "effect": "NoExecute"}

# chart -> its workloads: (workload, path of its tolerations, path of its nodeSelector, role).
# role "system": tolerates the system taint and selects the system nodes; "daemon": tolerates
# every taint (a node-level daemon). Paths read in each chart's values.yaml/templates at its pin:
_V = "custom"
CHART_WORKLOADS: dict[str, list[tuple[str, str, str | None, str]]] = {
    # kubernetes/autoscaler:cluster-autoscaler/charts/cluster-autoscaler/values.yaml@cluster-autoscaler-chart-9.59.0
    "cluster-autoscaler": [("deployment", "tolerations", "nodeSelector", "system")],
    # kubernetes-sigs/metrics-server:charts/metrics-server/values.yaml@metrics-server-helm-chart-3.13.0
    "metrics-server": [("deployment", "tolerations", "nodeSelector", "system")],
    # volcano-sh/volcano:installer/helm/chart/volcano/templates/{scheduler,controllers,admission,admission-
    # init}.yaml@v1.15.1
    "volcano": [
        (w, f"{_V}.default_tolerations", f"{_V}.default_ns", "system")
        for w in ("scheduler", "controllers", "admission", "admission-init")
    ],
    # NVIDIA/k8s-device-plugin:deployments/helm/nvidia-device-plugin/values.yaml@v0.19.0 and its NFD chart 0.17.3
    "nvidia-device-plugin": [
        ("device-plugin + gfd", "tolerations", None, "daemon"),
        ("nfd-worker", "nfd.worker.tolerations", None, "daemon"),
        ("nfd-master (+ prune Job)", "nfd.master.tolerations", "nfd.master.nodeSelector", "system"),
        ("nfd-gc", "nfd.gc.tolerations", "nfd.gc.nodeSelector", "system"),
    ],
    # aws/eks-charts:stable/aws-efa-k8s-device-plugin/templates/daemonset.yaml@5239609
    "aws-efa-k8s-device-plugin": [("daemonset", "tolerations", None, "daemon")],
    # NVIDIA/dcgm-exporter:deployment/values.yaml@4.5.3-4.8.2
    "dcgm-exporter": [("daemonset", "tolerations", None, "daemon")],
    # aws/karpenter-provider-aws:charts/karpenter/values.yaml@v1.14.1
    "karpenter": [("controller", "tolerations", "nodeSelector", "system")],
    # prometheus-community/helm-charts:charts/prometheus-adapter/values.yaml@prometheus-adapter-5.3.0
    "prometheus-adapter": [("deployment", "tolerations", "nodeSelector", "system")],
    # prometheus-community/helm-charts:charts/kube-prometheus-stack/values.yaml@kube-prometheus-stack-88.5.3
    # (crds.upgradeJob and thanosRuler are off by default; grafana: charts/grafana/values.yaml@grafana-12.11.1)
    "kube-prometheus-stack": [
        ("operator", "prometheusOperator.tolerations", "prometheusOperator.nodeSelector", "system"),
        (
            "admission webhook patch Jobs",
            "prometheusOperator.admissionWebhooks.patch.tolerations",
            "prometheusOperator.admissionWebhooks.patch.nodeSelector",
            "system",
        ),
        (
            "admission webhook deployment",
            "prometheusOperator.admissionWebhooks.deployment.tolerations",
            "prometheusOperator.admissionWebhooks.deployment.nodeSelector",
            "system",
        ),
        ("kube-state-metrics", "kube-state-metrics.tolerations", "kube-state-metrics.nodeSelector", "system"),
        (
            "alertmanager",
            "alertmanager.alertmanagerSpec.tolerations",
            "alertmanager.alertmanagerSpec.nodeSelector",
            "system",
        ),
        ("prometheus", "prometheus.prometheusSpec.tolerations", "prometheus.prometheusSpec.nodeSelector", "system"),
        ("grafana", "grafana.tolerations", "grafana.nodeSelector", "system"),
        ("node-exporter", "prometheus-node-exporter.tolerations", None, "daemon"),
    ],
}
POD_KINDS = ("Pod", "Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "ReplicaSet")


def _at(values: dict, path: str):
    for part in path.split("."):
        if not isinstance(values, dict) or part not in values:
            return None
        values = values[part]
    return values


def _placed(role: str, tolerations, node_selector) -> str | None:
    """Why a workload would not run where it must (None: it would)."""
    tolerations = tolerations or []
    if role == "daemon":
        return (
            None
            if tolerates(tolerations, ANY_TAINT) and tolerates(tolerations, SYSTEM_TAINT)
            else "a node daemon must tolerate every taint"
        )
    if not tolerates(tolerations, SYSTEM_TAINT):
        return f"does not tolerate {SYSTEM_TAINT_KEY}"
    if node_selector != SYSTEM_LABELS:
        return f"not placed on the system nodes (nodeSelector {node_selector})"
    return None


def test_system_node_group_carries_the_system_taint(plan):
    (group,) = [g for g in plan.of_type("aws:eks/nodeGroup:NodeGroup") if g.inputs["labels"] == SYSTEM_LABELS]
    assert group.inputs["taints"] == [{"key": SYSTEM_TAINT_KEY, "value": "true", "effect": "NO_SCHEDULE"}]
    assert SYSTEM_TAINT == {"key": "higgsfield.io/system", "value": "true", "effect": "NoSchedule"}


def test_gpu_pools_are_not_system_nodes(plan):
    for group in plan.of_type("aws:eks/nodeGroup:NodeGroup"):
        if group.inputs["labels"] != SYSTEM_LABELS:
            assert SYSTEM_TAINT_KEY not in {t["key"] for t in group.inputs.get("taints", [])}, group.name


def test_every_chart_workload_tolerates_the_system_taint_or_every_taint(plan):
    problems = []
    for release in plan.of_type(RELEASE):
        chart = release.inputs["chart"]
        assert chart in CHART_WORKLOADS, (
            f"release of {chart}: say where its pods run (CHART_WORKLOADS, read in its values.yaml)"
        )
        for workload, tolerations, selector, role in CHART_WORKLOADS[chart]:
            why = _placed(
                role,
                _at(release.inputs["values"], tolerations),
                _at(release.inputs["values"], selector) if selector else None,
            )
            if why:
                problems.append(f"{chart} {workload}: {why}")
    assert not problems, problems


def _pod_spec(manifest: dict) -> dict | None:
    if manifest.get("kind") not in POD_KINDS:
        return None
    spec = manifest.get("spec", {})
    if manifest["kind"] == "Pod":
        return spec
    if manifest["kind"] == "CronJob":
        return spec["jobTemplate"]["spec"]["template"]["spec"]
    return spec["template"]["spec"]


def test_every_workload_we_render_runs_on_system_nodes_or_tolerates_everything(plan):
    problems = []
    for resource in plan.resources:
        spec = _pod_spec(resource.inputs) if resource.type.startswith("kubernetes:") else None
        if spec is None:
            continue
        role = "daemon" if resource.inputs["kind"] == "DaemonSet" else "system"
        why = _placed(role, spec.get("tolerations"), spec.get("nodeSelector"))
        if why:
            problems.append(f"{resource.inputs['kind']} {resource.inputs['metadata']['name']}: {why}")
    assert not problems, problems


def test_training_operator_tolerates_the_system_taint():
    """The kustomization's strategic-merge patch of the upstream Deployment (kubeflow/trainer:
    manifests/base/deployment.yaml@v1.9.4 sets no tolerations, so ours are the pod's)."""
    kustomization = yaml.safe_load((ROOT / "components/kustomize/training-operator/kustomization.yaml").read_text())
    (patch,) = [
        yaml.safe_load(p["patch"]) for p in kustomization["patches"] if p["target"]["name"] == "training-operator"
    ]
    spec = patch["spec"]["template"]["spec"]
    assert _placed("system", spec.get("tolerations"), spec.get("nodeSelector")) is None


def test_every_addon_deployment_tolerates_the_system_taint_through_its_configuration(plan):
    """The first-deploy deadlock: CoreDNS (and the CSI and CloudWatch controllers) must schedule on
    tainted system nodes, the only nodes of a new cluster."""
    problems = []
    for addon in plan.of_type("aws:eks/addon:Addon"):
        name = addon.inputs["addonName"]
        if name in addons.ADDON_DAEMONS:
            continue
        assert name in addons.SYSTEM_ADDON_CONFIGURATION, (
            f"add-on {name}: give its Deployments the system toleration, or list it as a daemon"
        )
        values = json.loads(addon.inputs.get("configurationValues") or "{}")
        path = (
            "tolerations"
            if name == "coredns"
            else ("manager.tolerations" if name == "amazon-cloudwatch-observability" else "controller.tolerations")
        )
        if not tolerates(_at(values, path) or [], SYSTEM_TAINT):
            problems.append(f"{name}: {path} does not tolerate {SYSTEM_TAINT_KEY}")
    assert not problems, problems


def test_addon_tolerations_keep_the_upstream_defaults():
    """A list value replaces the chart's list: CriticalAddonsOnly (and the controllers' NoExecute
    grace) stay."""
    for name in ("coredns", "aws-fsx-csi-driver", "aws-ebs-csi-driver"):
        config = addons.SYSTEM_ADDON_CONFIGURATION[name]
        tolerations = config.get("tolerations") or config["controller"]["tolerations"]
        assert tolerates(tolerations, {"key": "CriticalAddonsOnly", "value": "", "effect": "NoSchedule"}), name


def test_caller_configuration_and_system_tolerations_are_merged():
    merged = addons.addon_configuration("amazon-cloudwatch-observability", {"dcgmExporter": {"enabled": False}})
    assert merged == {"manager": {"tolerations": [cpu_nodes.SYSTEM_TOLERATION]}, "dcgmExporter": {"enabled": False}}
    assert addons.addon_configuration("kube-proxy", None) is None


def test_tolerating_the_gpu_taint_does_not_tolerate_the_system_taint():
    """The rule the walk relies on (Toleration.ToleratesTaint): a keyed toleration matches its key only."""
    gpu = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert tolerates(gpu, GPU_TAINT) and not tolerates(gpu, SYSTEM_TAINT)
    assert tolerates([{"operator": "Exists"}], SYSTEM_TAINT)
    assert not tolerates([{"key": SYSTEM_TAINT_KEY, "value": "false"}], SYSTEM_TAINT)


@pytest.mark.parametrize("chart", sorted(CHART_WORKLOADS))
def test_the_walk_fails_a_chart_whose_tolerations_are_removed(chart):
    """Mutation check: a system workload without its toleration is reported."""
    for _, _, _, role in CHART_WORKLOADS[chart]:
        assert _placed(role, [], SYSTEM_LABELS) is not None


def _team_pod_templates():
    from infra.offline import healthcheck, jobs
    from tests.conftest import STACKS, plan_of

    for stack in STACKS:
        cfg = plan_of(stack).config
        for example in jobs.examples_for(cfg):
            for t in jobs.pod_templates(jobs.render(example, cfg)[-1]):
                yield f"{stack} {example}", t["spec"]
        for pool in cfg.gpu_pools:
            for obj in healthcheck.render(cfg, pool.name):
                spec = _pod_spec(obj)
                if spec is not None:
                    yield f"{stack} healthcheck {pool.name}", spec


def test_no_team_pod_we_render_is_placed_on_the_system_nodes():
    """The examples and the team health check (the MPI launcher included) run on GPU pools."""
    for where, spec in _team_pod_templates():
        assert spec.get("nodeSelector", {}).get("higgsfield.io/role") != "system", where
        assert not tolerates(spec.get("tolerations", []), SYSTEM_TAINT), where


def test_the_mpi_launcher_runs_on_the_teams_cpu_nodes_and_holds_no_gpu_or_efa():
    """Off the system nodes and off every GPU node (the team policy refuses a pod without GPUs there): onto the
    teams' CPU nodes, no devices; its workers stay on the job's pool."""
    from components.cpu_nodes import TEAM_CPU_LABELS, TEAM_CPU_TAINT
    from infra.offline import jobs
    from tests.conftest import STACKS, plan_of

    for stack in STACKS:
        cfg = plan_of(stack).config
        if "mpi-nccl-tests" not in jobs.examples_for(cfg):
            continue
        job = jobs.render("mpi-nccl-tests", cfg)[-1]
        launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
        assert launcher["nodeSelector"] == TEAM_CPU_LABELS, stack
        assert tolerates(launcher["tolerations"], TEAM_CPU_TAINT), stack
        assert not tolerates(launcher["tolerations"], GPU_TAINT), stack
        worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
        assert worker["nodeSelector"]["higgsfield.io/pool"] in {p.name for p in cfg.gpu_pools}, stack
        limits = launcher["containers"][0].get("resources", {}).get("limits", {})
        assert not {"nvidia.com/gpu", "vpc.amazonaws.com/efa", "hugepages-2Mi"} & set(limits), stack
