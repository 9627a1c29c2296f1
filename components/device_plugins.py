"""Make GPUs and EFA interfaces schedulable: the NVIDIA and EFA device plugins."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi

from components.charts import helm_release

from infra.config import GPU_TAINT_KEY
from infra.versions import Chart

GPU_NODES = {"nvidia.com/gpu.present": "true"}
EFA_NODES = {"vpc.amazonaws.com/efa.present": "true"}
GPU_TOLERATION = {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
# Node-level daemons tolerate every taint (an empty key with operator Exists matches all taints):
# a pool with an extra taint (`dedicated=research:NoSchedule`), or a node under the health gate's
# startup taint, must still advertise its GPUs and EFA interfaces (DESIGN.md decision 11).
EVERY_TAINT = {"operator": "Exists"}
# No /dev/infiniband, gdrdrv or nvidia-fs in GPU pods on the NVIDIA plugin's account.
GPU_ONLY_INJECTION = {"mofedEnabled": False, "gdrcopyEnabled": False, "gdsEnabled": False}
NAMESPACE = "kube-system"


@dataclass(frozen=True)
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

    Chart values at the pinned versions: `tolerations` is used by both the device plugin and
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
                    "gfd": {"enabled": True},
                    **GPU_ONLY_INJECTION,
                    "nodeSelector": GPU_NODES,
                    "tolerations": [EVERY_TAINT],  # the device plugin and GFD
                    # NFD's master and gc run on the system nodes; its workers label GPU nodes.
                    "nfd": {
                        "master": {"nodeSelector": {"higgsfield.io/role": "system"}},
                        "gc": {"nodeSelector": {"higgsfield.io/role": "system"}},
                        "worker": {"nodeSelector": GPU_NODES, "tolerations": [EVERY_TAINT]},
                    },
                },
                release_opts,
            )
        ]
        if args.efa_pools:
            self.releases.append(
                helm_release(f"{name}-efa", args.efa, NAMESPACE, {"nodeSelector": EFA_NODES, "tolerations": [EVERY_TAINT]}, release_opts)
            )
        self.register_outputs({"releases": [r.name for r in self.releases]})
