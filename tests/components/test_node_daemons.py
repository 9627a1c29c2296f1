"""Node-level daemons reach every GPU node whatever its taints, and the autoscaler sees GPU nodes
as GPU nodes: the accelerator label and the per-pool scale-down time (recorded plan of every
shipped stack)."""

from __future__ import annotations

import pytest
import yaml

from infra.config import GPU_SCALE_DOWN_UNNEEDED_DEFAULT
from infra.offline.evaluate import instance_types
from tests.components.test_gpu_pools_plan import ALL_GPU_GROUPS, NODE_GROUP, TEMPLATE_TAG, asg_tags, pool_groups
from tests.conftest import ROOT, STACKS, assert_plan_rejects, plan_of, set_pool

RELEASE = "kubernetes:helm.sh/v3:Release"
EVERY_TAINT = {"operator": "Exists"}  # no key: matches every taint (Kubernetes Toleration semantics)


def _values(plan, chart: str) -> dict:
    (release,) = [r for r in plan.of_type(RELEASE) if r.inputs["chart"] == chart]
    return release.inputs["values"]


def test_nvidia_device_plugin_and_gpu_feature_discovery_tolerate_every_taint(plan):
    """The chart renders `.Values.tolerations` into both the device-plugin and the GFD DaemonSet
    (NVIDIA/k8s-device-plugin:deployments/helm/nvidia-device-plugin/templates/daemonset-device-plugin.yml
    and daemonset-gfd.yml@v0.19.3)."""
    values = _values(plan, "nvidia-device-plugin")
    assert values["gfd"]["enabled"] is True
    assert EVERY_TAINT in values["tolerations"]


def test_feature_discovery_workers_tolerate_every_taint(plan):
    """NFD workers read `nfd.worker.tolerations` (NVIDIA/k8s-device-plugin:deployments/helm/
    nvidia-device-plugin/values.yaml@v0.19.3), whose default only tolerates nvidia.com/gpu=present."""
    assert EVERY_TAINT in _values(plan, "nvidia-device-plugin")["nfd"]["worker"]["tolerations"]


@pytest.mark.parametrize("efa_stack", [s for s in STACKS if pool_groups(s, efa_only=True)])
def test_efa_device_plugin_tolerates_every_taint(efa_stack):
    """`tolerations` is appended after the chart's own CriticalAddonsOnly toleration
    (aws/eks-charts:stable/aws-efa-k8s-device-plugin/templates/daemonset.yaml@5239609, chart v0.5.30)."""
    assert EVERY_TAINT in _values(plan_of(efa_stack), "aws-efa-k8s-device-plugin")["tolerations"]


def test_dcgm_exporter_tolerates_every_taint(plan):
    """`tolerations` (default: the control plane's taint only) is rendered into the DaemonSet
    (NVIDIA/dcgm-exporter:deployment/
    values.yaml and templates/daemonset.yaml@4.5.3-4.8.2, the tag of chart 4.8.2)."""
    assert EVERY_TAINT in _values(plan, "dcgm-exporter")["tolerations"]


@pytest.fixture(params=ALL_GPU_GROUPS, ids=lambda p: f"{p[0]}-{p[1]}")
def gpu_group(request):
    stack, name = request.param
    plan = plan_of(stack)
    return plan, next(g for g in plan.of_type(NODE_GROUP) if g.name == name)


def test_every_gpu_pool_carries_the_accelerator_label_on_nodes_and_in_the_node_template(gpu_group):
    """`k8s.amazonaws.com/accelerator=<gpu-type>` (kubernetes/autoscaler:cluster-autoscaler/
    cloudprovider/aws/aws_cloud_provider.go GPULabel and README.md@cluster-autoscaler-1.35.0)."""
    plan, group = gpu_group
    model = instance_types()[group.inputs["instanceTypes"][0]]["GpuInfo"]["Gpus"][0]["Name"]
    assert group.inputs["labels"]["k8s.amazonaws.com/accelerator"] == f"nvidia-{model.lower()}"
    assert asg_tags(plan, group)[f"{TEMPLATE_TAG}/label/k8s.amazonaws.com/accelerator"] == f"nvidia-{model.lower()}"


def test_gpu_pool_scale_down_unneeded_time_is_set_on_its_asg(gpu_group):
    """Per-ASG override of --scale-down-unneeded-time (kubernetes/autoscaler:cluster-autoscaler/
    cloudprovider/aws/aws_manager.go optionsTagsPrefix + config/const.go
    DefaultScaleDownUnneededTimeKey@cluster-autoscaler-1.35.0)."""
    plan, group = gpu_group
    settings = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{plan.stack}.yaml").read_text())["config"][
        "higgsfield:gpuPools"
    ]
    (pool,) = [p for p in settings if f"gpu-{p['name']}" == group.name]
    wanted = pool.get("scaleDownUnneededTime", GPU_SCALE_DOWN_UNNEEDED_DEFAULT)
    assert asg_tags(plan, group)[f"{TEMPLATE_TAG}/autoscaling-options/scaledownunneededtime"] == wanted


def test_a_shipped_pool_sets_its_own_scale_down_time():
    """prod's Capacity Block pool keeps idle nodes for an hour: the block is paid for anyway."""
    (pool,) = [p for p in plan_of("prod").config.gpu_pools if p.name == "h200-block"]
    assert pool.scale_down_unneeded_time == "1h" != GPU_SCALE_DOWN_UNNEEDED_DEFAULT


def test_a_bad_pool_scale_down_time_names_its_key(project_copy, capsys):
    assert_plan_rejects(
        project_copy,
        capsys,
        "prod",
        set_pool(0, scaleDownUnneededTime="half an hour"),
        "higgsfield:gpuPools[0].scaleDownUnneededTime",
        "is not a duration like 10m, 600s or 1h",
    )
