"""Make GPUs and EFA interfaces schedulable: the NVIDIA and EFA device plugins."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi

from components.charts import helm_release
from components.cpu_nodes import SYSTEM_LABELS, SYSTEM_TOLERATION
from infra.config import GPU_TAINT_KEY
from infra.core.names import KUBE_SYSTEM as NAMESPACE
from infra.core.versions import Chart

GPU_NODES = {"nvidia.com/gpu.present": "true"}
EFA_NODES = {"vpc.amazonaws.com/efa.present": "true"}
GPU_TOLERATION = {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
# Node-level daemons tolerate every taint (an empty key with operator Exists matches all taints):
# a pool with an extra taint (`dedicated=research:NoSchedule`), or a node under the health gate's
# startup taint, must still advertise its GPUs and EFA interfaces (docs/design/health-gate.md).
EVERY_TAINT = {"operator": "Exists"}
# No /dev/infiniband, gdrdrv or nvidia-fs in GPU pods on the NVIDIA plugin's account.
GPU_ONLY_INJECTION = {"mofedEnabled": False, "gdrcopyEnabled": False, "gdsEnabled": False}
# How the device plugin tells the container runtime which GPUs a container was allocated:
# `volume-mounts` (the chart value `deviceListStrategy`, passed as DEVICE_LIST_STRATEGY; the choices
# envvar | volume-mounts | cdi-annotations | cdi-cri in api/config/v1/consts.go; NVIDIA/
# k8s-device-plugin:deployments/helm/nvidia-device-plugin/values.yaml and templates/
# daemonset-device-plugin.yml, identical at v0.19.0 and v0.19.3). With it the plugin mounts /dev/null
# at /var/run/nvidia-container-devices/<uuid> for each allocated GPU (updateResponseForDeviceMounts,
# internal/plugin/server.go), and the GPU nodes' NVIDIA Container Toolkit takes the device list
# from those mounts and ignores NVIDIA_VISIBLE_DEVICES in unprivileged containers
# (components/gpu_pools.py CONTAINER_TOOLKIT_SETTINGS). A pod cannot fake the mounts: only a
# source of /dev/null counts (requestsFromMounts, NVIDIA/nvidia-container-toolkit:internal/
# config/image/cuda_image.go@v1.20.0), which only a hostPath could give, and team pods may not
# use hostPath. The chart adds SYS_ADMIN to the plugin's container for this strategy
# (deviceListStrategyIncludesVolumeMount in templates/_helpers.tpl, same refs).
# Not `cdi-cri`: the EKS NVIDIA AMI's containerd runs every container through
# nvidia-container-runtime (nodeadm's NVIDIA runtime mixin, awslabs/amazon-eks-ami:nodeadm/
# internal/containerd/runtime_config_nvidia.go@v20260724), whose legacy hook would still honour
# the variable, so the toolkit setting is needed either way; volume-mounts is the pairing the
# toolkit documents for it (accept-nvidia-visible-devices-as-volume-mounts).
DEVICE_LIST_STRATEGY = "volume-mounts"


@dataclass(frozen=True, kw_only=True)
class DevicePluginsArgs:
    nvidia: Chart
    efa: Chart
    efa_pools: bool
    provider: pulumi.ProviderResource
    depends_on: Sequence[pulumi.Resource]


class DevicePlugins(pulumi.ComponentResource):
    """The NVIDIA device plugin (with GPU feature discovery, which labels nodes with driver
    and CUDA versions) on GPU nodes, and, when a pool uses EFA, the EKS EFA device plugin
    (extended resource `vpc.amazonaws.com/efa`) on EFA nodes; both tolerate every taint.

    GPUs reach a container only through the plugin's allocation (DEVICE_LIST_STRATEGY), never
    through an environment variable. Chart values at the pinned versions: `tolerations` is used by both the device
    plugin and
    the GFD DaemonSet, `nfd.worker.tolerations` by the NFD workers (NVIDIA/k8s-device-plugin:
    deployments/helm/nvidia-device-plugin/values.yaml and templates/daemonset-gfd.yml@v0.19.3);
    MOFED, GDRCopy and GDS injection off (`mofedEnabled` etc., rendered as MOFED_ENABLED=false by
    templates/daemonset-device-plugin.yml@v0.19.3): a GPU pod gets its GPUs, and EFA devices only
    from the EFA plugin, as many as it asked for (NVIDIA/k8s-device-plugin#1692);
    the EFA chart appends `tolerations` to its own CriticalAddonsOnly one (aws/eks-charts:
    stable/aws-efa-k8s-device-plugin/templates/daemonset.yaml@5239609, chart v0.5.30).

    Creates: one Helm release per plugin. Replaced when: never; chart upgrades are in place.
    """

    def __init__(self, name: str, args: DevicePluginsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:device_plugins:DevicePlugins", name, None, opts)
        release_opts = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on))
        self.releases = [
            helm_release(
                f"{name}-nvidia",
                args.nvidia,
                NAMESPACE,
                {
                    "deviceListStrategy": DEVICE_LIST_STRATEGY,
                    "gfd": {"enabled": True},
                    **GPU_ONLY_INJECTION,
                    "nodeSelector": GPU_NODES,
                    "tolerations": [EVERY_TAINT],  # the device plugin and GFD
                    # NFD's master and gc run on the system nodes (tainted); its workers label GPU nodes.
                    # `master.tolerations` (also the post-delete prune Job's) and `gc.tolerations` replace the
                    # chart's control-plane ones (node-feature-discovery chart 0.17.3 values.yaml, templates/
                    # master.yaml, nfd-gc.yaml, post-delete-job.yaml, bundled in deployments/helm/nvidia-device-plugin/
                    # charts/@v0.19.0).
                    "nfd": {
                        "master": {"nodeSelector": SYSTEM_LABELS, "tolerations": [SYSTEM_TOLERATION]},
                        "gc": {"nodeSelector": SYSTEM_LABELS, "tolerations": [SYSTEM_TOLERATION]},
                        "worker": {"nodeSelector": GPU_NODES, "tolerations": [EVERY_TAINT]},
                    },
                },
                release_opts,
            )
        ]
        if args.efa_pools:
            self.releases.append(
                helm_release(
                    f"{name}-efa",
                    args.efa,
                    NAMESPACE,
                    {"nodeSelector": EFA_NODES, "tolerations": [EVERY_TAINT]},
                    release_opts,
                )
            )
        self.register_outputs({"releases": [r.name for r in self.releases]})
