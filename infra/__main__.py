"""The Higgsfield platform, wired from components in reading order (`higgsfield plan` runs `build()` under mocks)."""

import pulumi

from components.addons import stack_addons
from components.autoscaler import ClusterAutoscaler, ClusterAutoscalerArgs, unready_limits
from components.cluster import Cluster, ClusterArgs
from components.cpu_nodes import CpuNodes, CpuNodesArgs
from components.delivery import Delivery, DeliveryArgs, bound_every_role
from components.device_plugins import DevicePlugins, DevicePluginsArgs
from components.gpu_pools import GpuPoolArgs, GpuPoolGroup
from components.healthgate import HealthGate, HealthGateArgs
from components.karpenter import karpenter_pools
from components.logs import LogKey, LogKeyArgs
from components.network import Network, NetworkArgs
from components.nodes import NodeRole, NodeVersion
from components.observability import NAMESPACE as MONITORING_NAMESPACE, Monitoring, MonitoringArgs
from components.registry import TrainingImageRepository
from components.storage import LustreArgs, LustreFileSystem
from components.teams import Teams, TeamsArgs
from components.training import TrainingOperator, TrainingOperatorArgs, Volcano, VolcanoArgs
from infra.core import versions
from infra.config import StackConfig, load


def build(cfg: StackConfig) -> None:
    tags, addons, name = cfg.resource_tags, stack_addons(cfg), cfg.name
    bound_every_role(cfg.delivery, cfg.stack)  # with CI: every role under the deploy identity's ceiling
    # 1. Network and control plane, their logs encrypted with a key of ours
    logs = LogKey("logs", LogKeyArgs(cluster_name=name, region=cfg.region, protect=cfg.production, tags=tags))
    retention, log_key = cfg.observability.log_retention_days, dict(log_key_arn=logs.arn, log_key_ready=[logs.policy])
    network = Network("network", NetworkArgs(
        cluster_name=name, region=cfg.region, cidr=cfg.vpc_cidr, availability_zones=cfg.availability_zones,
        nat_per_zone=cfg.production, interface_endpoints=cfg.production, public_load_balancers=cfg.public_load_balancers, log_retention_days=retention, **log_key, tags=tags))
    cluster = Cluster("cluster", ClusterArgs(
        cluster_name=name, kubernetes_version=cfg.kubernetes_version, vpc_id=network.vpc_id,
        private_subnet_ids=network.private_subnet_ids, public_access_cidrs=cfg.endpoint.public_access_cidrs,
        admins=cfg.admins, addons=addons, protect=cfg.production, log_retention_days=retention, **log_key, tags=tags))

    # 2. Nodes: system pods on CPU nodes, training on GPU pools that scale from zero
    node_role, node_version = NodeRole("node-role", tags), NodeVersion(cfg.kubernetes_version, cfg.node_release_version)
    node_prerequisites = [*cluster.node_prerequisites, *node_role.ready]
    system_nodes = CpuNodes("system-nodes", CpuNodesArgs(
        cluster_name=name, instance_types=cfg.cpu_nodes.instance_types, min_size=cfg.cpu_nodes.min_size,
        desired_size=cfg.cpu_nodes.desired_size, max_size=cfg.cpu_nodes.max_size, ami_type=versions.CPU_AMI_TYPE,
        subnet_ids=network.private_subnet_ids, node_role_arn=node_role.arn, version=node_version,
        security_group_ids=[cluster.node_security_group_id], depends_on=node_prerequisites, tags=tags))
    gpu_pools = [
        GpuPoolGroup(f"gpu-{pool.name}", GpuPoolArgs(
            cluster_name=name, pool=pool, ami_type=versions.gpu_ami_type(pool.instance.architectures),
            vpc_id=network.vpc_id, subnet_id=network.private_subnets[pool.availability_zone].id, version=node_version,
            node_role_arn=node_role.arn, node_security_group_id=cluster.node_security_group_id,
            depends_on=node_prerequisites, tags=tags, auto_repair=cfg.observability.node_auto_repair))
        for pool in cfg.gpu_pools if pool.provisioner == "node-group"
    ]
    karpenter_pools(cfg, network, cluster, node_role, [*node_prerequisites, system_nodes.node_group], tags)  # pools with provisioner: karpenter
    # 3. Platform services in the cluster, on the system nodes
    platform_ready = [system_nodes.node_group, *cluster.addons]
    ClusterAutoscaler("cluster-autoscaler", ClusterAutoscalerArgs(name, cfg.region, cfg.autoscaler, versions.CLUSTER_AUTOSCALER, versions.CLUSTER_AUTOSCALER_IMAGE[
        cfg.kubernetes_version], cluster.provider, platform_ready, tags, unready_limits(cfg.autoscaler, cfg.gpu_pools, cfg.scheduler.queues)))
    DevicePlugins("device-plugins", DevicePluginsArgs(versions.NVIDIA_DEVICE_PLUGIN, versions.EFA_DEVICE_PLUGIN, any(p.efa for p in cfg.gpu_pools), cluster.provider, platform_ready))
    image = TrainingImageRepository("training-image", name, protect=cfg.production, tags=tags)
    gated = [p for p in cfg.gpu_pools if p.health_gate.enabled]  # no job on a GPU node before it passed its checks
    gate = HealthGate("health-gate", HealthGateArgs(name, cfg.region, gated, cfg.observability.health, cfg.fsx.enabled, cfg.health_gate_image or image.source_image,
                                                    cluster.provider, platform_ready, tags, cfg.cuda_version or versions.TRAINING_IMAGE_CUDA, cfg.node_release_version, cfg.training_image)) if gated else None
    # 4. Training: the batch scheduler, then the controller that needs its PodGroup CRD
    sched = cfg.scheduler
    volcano = Volcano("volcano", VolcanoArgs(versions.VOLCANO, sched.queues, sched.priority_classes, cluster.provider, platform_ready))
    TrainingOperator("training-operator", TrainingOperatorArgs(
        versions.METRICS_SERVER, cluster.provider, platform_ready, scheduler=volcano.release))

    # 5. Teams (namespaces, admission, network policies), shared storage
    if cfg.delivery:  # 7. CI: preview/deploy/image roles, their access entries, CodeBuild runners in the VPC
        Delivery("delivery", DeliveryArgs(cfg.stack, cfg.region, cfg.delivery, network.vpc_id, network.private_subnet_ids,
                                          cluster.eks.cluster_security_group_id, cfg.fsx.linked_buckets, retention, logs.arn, [logs.policy], [cluster.eks], tags))
    teams = Teams("teams", TeamsArgs(sched.teams, sched.priority_classes, cfg.kubernetes_version, MONITORING_NAMESPACE, cfg.vpc_cidr, cluster.provider, platform_ready, cfg.gpu_pools, cfg.training_image or image.source_image, cfg.public_load_balancers))
    if cfg.fsx.enabled:
        LustreFileSystem("lustre", LustreArgs(
            cluster_name=name, settings=cfg.fsx, lustre_version=versions.LUSTRE_VERSION, csi_addon=addons["aws-fsx-csi-driver"],
            vpc_id=network.vpc_id, subnet_id=(fsx_subnet := network.private_subnets[cfg.fsx.availability_zone]).id, subnet_cidr=fsx_subnet.cidr_block,
            node_security_group_id=cluster.node_security_group_id, namespaces=teams.namespaces, team_uids=teams.uids,
            provider=cluster.provider, addon_depends_on=platform_ready, protect=cfg.production, tags=tags,
            health_namespace=gate.namespace if gate else None))

    # 6. Observability
    if cfg.observability.enabled:
        Monitoring("monitoring", MonitoringArgs(
            cluster_name=name, settings=cfg.observability, prometheus_stack=versions.KUBE_PROMETHEUS_STACK,
            dcgm_exporter=versions.DCGM_EXPORTER, prometheus_adapter=versions.PROMETHEUS_ADAPTER,
            addons=addons, provider=cluster.provider, depends_on=platform_ready, **log_key, tags=tags, api_server_cidr=cfg.vpc_cidr))
    pulumi.export("clusterName", name)
    pulumi.export("region", cfg.region)
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("trainingImage", {"repositoryUrl": image.repository_url, "repositoryArn": image.repository_arn})
    pulumi.export("gpuNodeGroups", {g.pool_name: g.node_group.node_group_name for g in gpu_pools})


if __name__ == "__main__":
    build(load())
