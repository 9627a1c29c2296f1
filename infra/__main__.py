"""The Higgsfield platform, wired from components in reading order (`higgsfield plan` runs `build()`
under mocks). Each section is one step of the platform; each component takes its typed arguments by
keyword, and everything a section computes from the settings lives in the components or the config."""

import dataclasses
from typing import Any

import pulumi

from components.addons import stack_addons
from components.autoscaler import ClusterAutoscaler, ClusterAutoscalerArgs, unready_limits
from components.cluster import Cluster, ClusterArgs
from components.cpu_nodes import (
    TEAM_CPU_LABELS,
    TEAM_CPU_ROOT_VOLUME_GIB,
    TEAM_CPU_TAINT,
    CpuNodes,
    CpuNodesArgs,
    team_cpu_autoscaler_tags,
)
from components.delivery import Delivery, DeliveryArgs, bound_every_role, refuse_oversized_policies
from components.device_plugins import DevicePlugins, DevicePluginsArgs
from components.gpu_pools import GpuPoolArgs, GpuPoolGroup
from components.healthgate import HealthGate, HealthGateArgs
from components.job_watchdog import JobWatchdog, JobWatchdogArgs, alert_rules
from components.karpenter import Karpenter, KarpenterArgs
from components.logs import LogKey, LogKeyArgs, deploying_identity
from components.network import Network, NetworkArgs
from components.nodes import NodeRole, NodeVersion
from components.observability import NAMESPACE as MONITORING_NAMESPACE
from components.observability import PROMETHEUS_URL, Monitoring, MonitoringArgs
from components.registry import TrainingImageRepository
from components.storage import LustreArgs, LustreFileSystem
from components.teams import Teams, TeamsArgs
from components.training import TrainingOperator, TrainingOperatorArgs, Volcano, VolcanoArgs
from infra.config import StackConfig, load
from infra.core import versions


def build(cfg: StackConfig) -> None:
    refuse_oversized_policies(cfg)  # before anything is created: IAM would refuse the ceilings mid-deploy
    tags, addons, name, region, protect = cfg.resource_tags, stack_addons(cfg), cfg.name, cfg.region, cfg.production
    bound_every_role(cfg.delivery, cfg.stack)  # with CI: every role under the deploy identity's ceiling

    # 1. Network and control plane, their logs encrypted with a key of ours
    deployer = deploying_identity()  # its account and partition, in each key's and the queue's policy
    logs = LogKey(
        "logs", LogKeyArgs(cluster_name=name, region=region, deployer_arn=deployer, protect=protect, tags=tags)
    )
    retention = cfg.observability.log_retention_days
    log_key: dict[str, Any] = dict(log_key_arn=logs.arn, log_key_ready=[logs.key])
    network = Network(
        "network",
        NetworkArgs(
            cluster_name=name,
            region=region,
            cidr=cfg.vpc_cidr,
            availability_zones=cfg.availability_zones,
            nat_per_zone=protect,
            interface_endpoints=protect,
            public_load_balancers=cfg.public_load_balancers,
            account_id=cfg.delivery.account_id if cfg.delivery else None,
            log_retention_days=retention,
            **log_key,
            tags=tags,
        ),
    )
    cluster = Cluster(
        "cluster",
        ClusterArgs(
            cluster_name=name,
            kubernetes_version=cfg.kubernetes_version,
            vpc_id=network.vpc_id,
            private_subnet_ids=network.private_subnet_ids,
            public_access_cidrs=cfg.endpoint.public_access_cidrs,
            admins=cfg.admins,
            addons=addons,
            protect=protect,
            log_retention_days=retention,
            **log_key,
            deployer_arn=deployer,
            tags=tags,
        ),
    )

    # 2. Nodes: system pods on CPU nodes, training on GPU pools that scale from zero
    node_role = NodeRole("node-role", tags)
    node_version = NodeVersion(cfg.kubernetes_version, cfg.node_release_version)
    node_prerequisites = [*cluster.node_prerequisites, *node_role.ready]
    system_args = CpuNodesArgs(
        cluster_name=name,
        instance_types=cfg.cpu_nodes.instance_types,
        min_size=cfg.cpu_nodes.min_size,
        desired_size=cfg.cpu_nodes.desired_size,
        max_size=cfg.cpu_nodes.max_size,
        ami_type=versions.CPU_AMI_TYPE,
        subnet_ids=network.private_subnet_ids,
        node_role_arn=node_role.arn,
        version=node_version,
        security_group_ids=[cluster.node_security_group_id],
        depends_on=node_prerequisites,
        tags=tags,
    )
    system_nodes = CpuNodes("system-nodes", system_args)
    # the teams' pods without GPUs (an MPI job's launcher): never on a GPU node (components/tenancy.py)
    CpuNodes(
        "team-cpu-nodes",
        dataclasses.replace(
            system_args,
            instance_types=cfg.team_cpu_nodes.instance_types,
            min_size=0,
            desired_size=0,
            max_size=cfg.team_cpu_nodes.max_size,
            root_volume_gib=TEAM_CPU_ROOT_VOLUME_GIB,
            role="team-cpu",
            labels=TEAM_CPU_LABELS,
            taint=TEAM_CPU_TAINT,
            autoscaler_tags=team_cpu_autoscaler_tags(cfg.team_cpu_nodes.scale_down_unneeded_time),
        ),
    )
    gpu_pools = [
        GpuPoolGroup(
            f"gpu-{pool.name}",
            GpuPoolArgs(
                cluster_name=name,
                pool=pool,
                ami_type=versions.gpu_ami_type(pool.instance.architectures),
                vpc_id=network.vpc_id,
                subnet_id=network.private_subnets[pool.availability_zone].id,
                version=node_version,
                node_role_arn=node_role.arn,
                node_security_group_id=cluster.node_security_group_id,
                depends_on=node_prerequisites,
                tags=tags,
                auto_repair=cfg.observability.node_auto_repair,
            ),
        )
        for pool in cfg.node_group_pools
    ]
    if cfg.karpenter_pools:
        Karpenter(
            "karpenter",
            KarpenterArgs(
                stack=cfg.stack,
                cluster_name=name,
                region=region,
                chart=versions.KARPENTER,
                crd_chart=versions.KARPENTER_CRD,
                pools=cfg.karpenter_pools,
                vpc_id=network.vpc_id,
                node_role_arn=node_role.arn,
                subnet_ids={zone: subnet.id for zone, subnet in network.private_subnets.items()},
                security_group_ids=[cluster.node_security_group_id],
                provider=cluster.provider,
                depends_on=[*node_prerequisites, system_nodes.node_group],
                deployer_arn=deployer,
                tags=tags,
                node_repair=cfg.observability.node_auto_repair,
            ),
        )

    # 3. Platform services in the cluster, on the system nodes
    platform: dict[str, Any] = dict(provider=cluster.provider, depends_on=[system_nodes.node_group, *cluster.addons])
    ClusterAutoscaler(
        "cluster-autoscaler",
        ClusterAutoscalerArgs(
            cluster_name=name,
            region=region,
            settings=cfg.autoscaler,
            chart=versions.CLUSTER_AUTOSCALER,
            image_tag=versions.CLUSTER_AUTOSCALER_IMAGE[cfg.kubernetes_version],
            **platform,
            tags=tags,
            limits=unready_limits(cfg.autoscaler, cfg.gpu_pools, cfg.scheduler.queues),
        ),
    )
    DevicePlugins(
        "device-plugins",
        DevicePluginsArgs(
            nvidia=versions.NVIDIA_DEVICE_PLUGIN, efa=versions.EFA_DEVICE_PLUGIN, efa_pools=cfg.efa_pools, **platform
        ),
    )
    image = TrainingImageRepository("training-image", name, protect=protect, tags=tags)
    training_image = cfg.training_image or image.source_image
    gate = None
    if cfg.gated_pools:  # no job on a GPU node before it passed its checks
        gate = HealthGate(
            "health-gate",
            HealthGateArgs(
                cluster_name=name,
                region=region,
                pools=cfg.gated_pools,
                thresholds=cfg.observability.health,
                lustre=cfg.fsx.enabled,
                image=cfg.health_gate_image or image.source_image,
                **platform,
                tags=tags,
                cuda=cfg.cuda_version or versions.TRAINING_IMAGE_CUDA,
                node_release=cfg.node_release_version,
                prepull_image=cfg.training_image,
            ),
        )

    # 4. Training: the batch scheduler, then the controller that needs its PodGroup CRD
    sched = cfg.scheduler
    volcano = Volcano(
        "volcano",
        VolcanoArgs(
            chart=versions.VOLCANO,
            queues=sched.queues,
            priority_classes=sched.priority_classes,
            pools=cfg.gpu_pools,
            **platform,
        ),
    )
    TrainingOperator(
        "training-operator",
        TrainingOperatorArgs(metrics_server=versions.METRICS_SERVER, **platform, scheduler=volcano.release),
    )

    # 5. Teams (namespaces, admission, network policies), shared storage
    teams = Teams(
        "teams",
        TeamsArgs(
            teams=sched.teams,
            priority_classes=sched.priority_classes,
            kubernetes_version=cfg.kubernetes_version,
            monitoring_namespace=MONITORING_NAMESPACE,
            api_server_cidr=cfg.vpc_cidr,
            **platform,
            pools=cfg.gpu_pools,
            image=training_image,
            public_load_balancers=cfg.public_load_balancers,
            grace_seconds=cfg.checkpoints.grace_seconds,
            api_service_ip=cfg.api_service_ip,
        ),
    )
    if cfg.fsx.enabled:
        fsx_subnet = network.private_subnets[cfg.fsx.availability_zone]
        LustreFileSystem(
            "lustre",
            LustreArgs(
                cluster_name=name,
                settings=cfg.fsx,
                lustre_version=versions.LUSTRE_VERSION,
                csi_addon=addons["aws-fsx-csi-driver"],
                vpc_id=network.vpc_id,
                subnet_id=fsx_subnet.id,
                subnet_cidr=fsx_subnet.cidr_block,
                node_security_group_id=cluster.node_security_group_id,
                namespaces=teams.namespaces,
                team_uids=sched.team_uids,
                provider=cluster.provider,
                addon_depends_on=platform["depends_on"],
                protect=protect,
                deployer_arn=deployer,
                tags=tags,
                health_namespace=gate.namespace if gate else None,
            ),
        )

    # 6. Observability
    if cfg.observability.enabled:
        Monitoring(
            "monitoring",
            MonitoringArgs(
                cluster_name=name,
                settings=cfg.observability,
                prometheus_stack=versions.KUBE_PROMETHEUS_STACK,
                dcgm_exporter=versions.DCGM_EXPORTER,
                prometheus_adapter=versions.PROMETHEUS_ADAPTER,
                addons=addons,
                **platform,
                **log_key,
                tags=tags,
                api_server_cidr=cfg.vpc_cidr,
                efa_exporter_image=cfg.health_gate_image or image.source_image,
                alert_rules=alert_rules(cfg.gpu_pools),
                teams=[t.name for t in sched.teams],
            ),
        )
        if cfg.gpu_pools and sched.teams:
            # hung gangs restarted, stragglers and pre-flight suspects sent back to the gate
            JobWatchdog(
                "job-watchdog",
                JobWatchdogArgs(
                    namespaces=list(teams.namespaces),
                    # the platform's image (the gate's), which ships job_watchdog.py: never a team's own
                    image=cfg.health_gate_image or image.source_image,
                    prometheus_url=PROMETHEUS_URL,
                    provider=platform["provider"],
                    depends_on=[*platform["depends_on"], *teams.namespaces.values()],
                ),
            )

    # 7. Delivery: CI's preview/deploy/image roles, their access entries, CodeBuild runners in the VPC; last,
    # as the preview's gets name the objects every component above made (components/kubernetes_objects.py)
    if cfg.delivery:
        Delivery(
            "delivery",
            DeliveryArgs(
                stack=cfg.stack,
                region=region,
                settings=cfg.delivery,
                vpc_id=network.vpc_id,
                private_subnet_ids=network.private_subnet_ids,
                cluster_security_group_id=cluster.eks.cluster_security_group_id,
                data_buckets=cfg.fsx.linked_buckets,
                log_retention_days=retention,
                **log_key,
                cluster_ready=[cluster.eks],
                kubernetes=cluster.provider,
                tags=tags,
                admins=cfg.admins,
                public_endpoint=cfg.endpoint.public,
                production=cfg.production,
                public_load_balancers=cfg.public_load_balancers,
            ),
        )

    # Outputs
    pulumi.export("clusterName", name)
    pulumi.export("region", region)
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("trainingImage", {"repositoryUrl": image.repository_url, "repositoryArn": image.repository_arn})
    pulumi.export("gpuNodeGroups", {g.pool_name: g.node_group.node_group_name for g in gpu_pools})


if __name__ == "__main__":
    build(load())
