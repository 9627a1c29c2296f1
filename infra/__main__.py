"""The Higgsfield platform, wired from components in reading order.

`pulumi up` runs this file; `higgsfield plan` calls `build()` under Pulumi's mocks.
"""

from __future__ import annotations

import pulumi

from components.addons import ClusterAddons, ClusterAddonsArgs
from components.autoscaler import ClusterAutoscaler, ClusterAutoscalerArgs
from components.cluster import Cluster, ClusterArgs
from components.cpu_nodes import CpuNodes, CpuNodesArgs
from components.device_plugins import DevicePlugins, DevicePluginsArgs
from components.gpu_pools import GpuPoolArgs, GpuPoolGroup
from components.network import Network, NetworkArgs
from components.nodes import NodeRole
from infra import versions
from infra.config import StackConfig, load


def build(cfg: StackConfig) -> None:
    tags = cfg.resource_tags
    addons = versions.EKS_ADDONS[cfg.kubernetes_version]

    network = Network(
        "network",
        NetworkArgs(
            cluster_name=cfg.name,
            region=cfg.region,
            cidr=cfg.vpc_cidr,
            availability_zones=cfg.availability_zones,
            nat_per_zone=cfg.production,
            interface_endpoints=cfg.production,
            tags=tags,
        ),
    )

    cluster = Cluster(
        "cluster",
        ClusterArgs(
            cluster_name=cfg.name,
            kubernetes_version=cfg.kubernetes_version,
            vpc_id=network.vpc_id,
            private_subnet_ids=network.private_subnet_ids,
            public_access_cidrs=cfg.endpoint.public_access_cidrs,
            admins=cfg.admins,
            addons=addons,
            protect=cfg.production,
            tags=tags,
        ),
    )

    node_role = NodeRole("node-role", tags)
    system_nodes = CpuNodes(
        "system-nodes",
        CpuNodesArgs(
            cluster_name=cluster.cluster_name,
            instance_types=cfg.cpu_nodes.instance_types,
            min_size=cfg.cpu_nodes.min_size,
            desired_size=cfg.cpu_nodes.desired_size,
            max_size=cfg.cpu_nodes.max_size,
            ami_type=versions.CPU_AMI_TYPE,
            subnet_ids=network.private_subnet_ids,
            node_role_arn=node_role.arn,
            security_group_ids=[cluster.node_security_group_id],
            depends_on=[cluster.eks, *cluster.node_addons, *node_role.ready],
            tags=tags,
        ),
    )
    ClusterAddons(
        "system-addons",
        ClusterAddonsArgs(cluster.cluster_name, [addons["coredns"]], depends_on=[system_nodes.node_group], tags=tags),
    )
    platform_ready = [system_nodes.node_group, *cluster.node_addons]

    gpu_pools = [
        GpuPoolGroup(
            f"gpu-{pool.name}",
            GpuPoolArgs(
                cluster_name=cluster.cluster_name,
                pool=pool,
                ami_type=versions.gpu_ami_type(pool.instance.architectures),
                vpc_id=network.vpc_id,
                subnet_id=network.private_subnets[pool.availability_zone].id,
                node_role_arn=node_role.arn,
                node_security_group_id=cluster.node_security_group_id,
                depends_on=[cluster.eks, *cluster.node_addons, *node_role.ready],
                tags=tags,
            ),
        )
        for pool in cfg.gpu_pools
    ]
    ClusterAutoscaler(
        "cluster-autoscaler",
        ClusterAutoscalerArgs(
            cluster_name=cluster.cluster_name,
            region=cfg.region,
            settings=cfg.autoscaler,
            chart=versions.CLUSTER_AUTOSCALER,
            image_tag=versions.CLUSTER_AUTOSCALER_IMAGE[cfg.kubernetes_version],
            provider=cluster.provider,
            depends_on=platform_ready,
            tags=tags,
        ),
    )
    DevicePlugins(
        "device-plugins",
        DevicePluginsArgs(
            nvidia=versions.NVIDIA_DEVICE_PLUGIN,
            efa=versions.EFA_DEVICE_PLUGIN,
            efa_pools=any(p.efa for p in cfg.gpu_pools),
            provider=cluster.provider,
            depends_on=platform_ready,
        ),
    )

    pulumi.export("clusterName", cluster.cluster_name)
    pulumi.export("region", cfg.region)
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("gpuNodeGroups", {g.pool_name: g.node_group.node_group_name for g in gpu_pools})


if __name__ == "__main__":
    build(load())
