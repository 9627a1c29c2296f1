"""GPU node groups that cost nothing while idle and appear when a job is pending."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import pulumi
import pulumi_aws as aws

from components.efa import EFA_HUGEPAGES_2MI, EfaFabric, efa_interfaces_for, efa_resources, node_user_data
from components.nodes import (
    MAX_UNAVAILABLE_NODES,
    NodeVersion,
    autoscaling_group_name,
    launch_template,
    node_template_tags,
    tag_autoscaling_group,
)
from infra.config import GPU_TAINT_KEY, STARTUP_TAINT_KEY, GpuPool, Taint
from infra.config import gpu_pools as pool_settings  # now(): the one clock windows are read against
from infra.core import versions
from infra.core.names import (
    AUTOSCALER_TEMPLATE,
    DRIVER_MAJOR_LABEL,
    GATED_LABEL,
    HEALTH_LABEL,
    POOL_LABEL,
    SCALE_DOWN_UNNEEDED_TAG,
)

CAPACITY_TYPES = {
    "on-demand": "ON_DEMAND",
    "spot": "SPOT",
    "reservation": "ON_DEMAND",
    "capacity-block": "CAPACITY_BLOCK",
}
TAINT_EFFECTS = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE", "PreferNoSchedule": "PREFER_NO_SCHEDULE"}
# The health gate's verdict on a node (images/training/health_gate.py sets it with the taint's
# removal). The gate's DaemonSet runs only where it is not `healthy` (components/healthgate.py).
# The Cluster Autoscaler's AWS provider treats a node with this label as a GPU node and waits for
# its device plugin instead of scaling out again while it initialises (GPULabel in kubernetes/
# autoscaler:cluster-autoscaler/cloudprovider/aws/aws_cloud_provider.go@cluster-autoscaler-1.35.0;
# value `<gpu-type>` such as `nvidia-tesla-k80`, cloudprovider/aws/README.md, same ref).
ACCELERATOR_LABEL = "k8s.amazonaws.com/accelerator"
# The NVIDIA Container Toolkit on every GPU node: a container sees only the GPUs the device plugin
# allocated to it, never the ones NVIDIA_VISIBLE_DEVICES names. The EKS AL2023 NVIDIA
# AMI installs nvidia-container-toolkit from NVIDIA's repository and keeps its defaults
# (awslabs/amazon-eks-ami:templates/al2023/provisioners/install-nvidia-driver.sh@v20260724), and
# nodeadm makes /usr/bin/nvidia-container-runtime containerd's runtime for every container
# (nodeadm/internal/containerd/runtime_config_nvidia.go, same ref). The toolkit's defaults are
# accept-nvidia-visible-devices-envvar-when-unprivileged = true and
# accept-nvidia-visible-devices-as-volume-mounts = false (GetDefault and the toml keys of Config in
# NVIDIA/nvidia-container-toolkit:api/config/v1/config.go@v1.20.0; the file is
# /etc/nvidia-container-runtime/config.toml, RelativeFilePath there); with the settings below an
# unprivileged container's variable is ignored (CUDA.VisibleDevices in
# internal/config/image/cuda_image.go, same ref; both the runtime, internal/runtime/runtime_factory.go,
# and its legacy-mode hook, cmd/nvidia-container-runtime-hook/container_config.go, pass both
# settings to it) - the variable set in the pod, through envFrom, or
# in the image (CUDA base images set NVIDIA_VISIBLE_DEVICES=all) alike - and the device list comes
# from the device plugin's volume mounts (components/device_plugins.py DEVICE_LIST_STRATEGY).
# `nvidia-ctk config --in-place --set key=value` writes them (cmd/nvidia-ctk/config/config.go, same
# ref). User-data scripts run in cloud-final, and nodeadm-run (containerd, kubelet) starts after it
# (templates/al2023/runtime/rootfs/etc/systemd/system/nodeadm-run.service@v20260724:
# After=nodeadm-config.service cloud-final.service), so no container starts before the settings.
# If they cannot be verified the instance powers off: a GPU node that would honour the variable
# must not join (its Auto Scaling group replaces it; the pool's nodes never become Ready).
CONTAINER_TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
CONTAINER_TOOLKIT_SETTINGS = {
    "accept-nvidia-visible-devices-envvar-when-unprivileged": "false",
    "accept-nvidia-visible-devices-as-volume-mounts": "true",
}


def container_toolkit_script() -> str:
    """The user-data script (after the shebang) that sets and checks CONTAINER_TOOLKIT_SETTINGS."""
    sets = " ".join(f"--set {key}={value}" for key, value in CONTAINER_TOOLKIT_SETTINGS.items())
    checks = "\n".join(
        f"grep -Eq '^[[:space:]]*{key}[[:space:]]*=[[:space:]]*{value}[[:space:]]*$' {CONTAINER_TOOLKIT_CONFIG} || "
        f"refuse {key}"
        for key, value in CONTAINER_TOOLKIT_SETTINGS.items()
    )
    return (
        'refuse() { echo "higgsfield: NVIDIA container toolkit setting $1 not in place; powering off" >&2; systemctl '
        "poweroff; exit 1; }\n"
        f"nvidia-ctk config --in-place --config {CONTAINER_TOOLKIT_CONFIG} {sets} || refuse nvidia-ctk\n"
        f"{checks}\n"
    )


@dataclass(frozen=True, kw_only=True)
class GpuPoolArgs:
    cluster_name: str
    pool: GpuPool
    ami_type: str
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    node_role_arn: pulumi.Input[str]
    node_security_group_id: pulumi.Input[str]
    depends_on: Sequence[pulumi.Resource]
    tags: Mapping[str, str]
    version: NodeVersion
    auto_repair: bool = True


def accelerator(pool: GpuPool) -> str:
    """`nvidia-h100`: the autoscaler's `<gpu-type>` format, from the catalog's GPU name."""
    return f"nvidia-{(pool.instance.gpu_model or 'gpu').lower().replace(' ', '-')}"


def pool_labels(pool: GpuPool) -> dict[str, str]:
    """The labels every node of the pool carries (a job selects its pool with POOL_LABEL)."""
    labels = {
        "nvidia.com/gpu.present": "true",
        ACCELERATOR_LABEL: accelerator(pool),
        POOL_LABEL: pool.name,
        **pool.labels,
    }
    if pool.efa:
        labels["vpc.amazonaws.com/efa.present"] = "true"
    if pool.health_gate.enabled:
        labels[GATED_LABEL] = "true"  # the health gate's DaemonSet runs here
    return labels


def pool_taints(pool: GpuPool) -> list[Taint]:
    """The GPU taint, the pool's own, and the health gate's startup taint unless the gate is off.
    The startup taint is also in the autoscaler's node-template tags: they describe the node as
    it joins, and the autoscaler drops startup taints from a template itself (healthgate.py)."""
    gate = [Taint(key=STARTUP_TAINT_KEY, value="pending", effect="NoSchedule")] if pool.health_gate.enabled else []
    return [Taint(key=GPU_TAINT_KEY, value="true", effect="NoSchedule"), *pool.taints, *gate]


@dataclass(frozen=True)
class WindowAction:
    """A scheduled action on a Capacity Block pool's Auto Scaling group."""

    name: str
    min_size: int
    max_size: int
    desired: int
    start_time: str | None = None
    end_time: str | None = None
    recurrence: str | None = None


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def held_warm(pool: GpuPool, now: datetime) -> bool:
    """Whether the pool is held at its reserved count now (docs/design/reserved-capacity.md): a warm ODCR
    pool always, a warm Capacity Block pool between its start and its drain."""
    if not pool.capacity.warm:
        return False
    if pool.capacity_type == "reservation":
        return True
    window, drain = pool.capacity.window, pool.capacity.drain_at
    return window is not None and drain is not None and window[0] <= now < drain


def scaling(pool: GpuPool, now: datetime) -> tuple[int, int, int]:
    """(minSize, desiredSize, maxSize) of the pool's node group. A warm reservation pool holds
    its reserved count, taken as maxSize (`higgsfield preflight` compares it with the
    reservation's TotalInstanceCount): min = desired = max, so the Cluster Autoscaler, which never
    scales a group below its minimum, cannot remove a node EC2 bills for anyway. The nodes join
    with the startup taint and pass the health gate at once, before any job arrives."""
    if held_warm(pool, now):
        return pool.max_size, pool.max_size, pool.max_size
    return pool.min_size, pool.min_size, pool.max_size


# How a managed node group replaces its nodes in an update (a Kubernetes upgrade, a new AMI
# release). EKS's DEFAULT strategy launches the replacement before it drains the old node; MINIMAL
# drains and terminates the old node first, "so that total capacity never increases beyond your
# configured quantity" (NodegroupUpdateConfig.updateStrategy, docs.aws.amazon.com/eks/latest/
# APIReference/API_NodegroupUpdateConfig.html; the upgrade phase in awsdocs/amazon-eks-user-guide:
# latest/ug/nodes/managed-node-update-behavior.adoc@0bfeeaf233f2f2df7e207aefc96bea476babe113).
# A reservation held at its count and a Capacity Block have no room for a surge instance.
# pulumi-aws 7 takes it as NodeGroupUpdateConfigArgs(update_strategy=...), `updateStrategy`.
UPDATE_STRATEGY_NO_SURGE = "MINIMAL"


def update_strategy(pool: GpuPool) -> str | None:
    """MINIMAL for pools on reserved capacity (ODCR or Capacity Block), else EKS's DEFAULT (unset)."""
    return UPDATE_STRATEGY_NO_SURGE if pool.capacity.reserved else None


def window_actions(pool: GpuPool, now: datetime) -> list[WindowAction]:
    """What keeps a Capacity Block pool inside its window, from `now` on: before the start, a
    recurring action holds the group at zero (the autoscaler would otherwise keep launching into
    a block that is not active yet and back off); at the start it opens to the pool's sizes; at
    end - drainBefore it scales to zero, so the managed node group drains the nodes (SIGTERM,
    the jobs' final checkpoint) well before EC2 terminates them at the end. Moments already past
    are left out (AWS refuses scheduled actions in the past)."""
    window, drain = pool.capacity.window, pool.capacity.drain_at
    if window is None or drain is None:
        return []
    start, _ = window
    actions = []
    if now < start:
        actions.append(WindowAction("closed-until-start", 0, 0, 0, end_time=_iso(start), recurrence="*/15 * * * *"))
        opened = pool.max_size if pool.capacity.warm else pool.min_size  # warm: the whole block runs from its start
        actions.append(WindowAction("open", opened, pool.max_size, opened, start_time=_iso(start)))
    if now < drain:
        actions.append(WindowAction("drain", 0, 0, 0, start_time=_iso(drain)))
    return actions


def pool_resources(pool: GpuPool) -> dict[str, str]:
    """Extended resources a node of the pool offers, for the autoscaler's node template."""
    resources = {"nvidia.com/gpu": str(pool.gpus_per_node)}
    if pool.efa:
        resources.update({name: str(amount) for name, amount in efa_resources(pool.instance).items()})
    return resources


def autoscaler_template_tags(pool: GpuPool) -> dict[str, str]:
    """Tags that let the Cluster Autoscaler plan a node of this pool while it has none
    (scale from zero): its labels (the accelerator label included), taints and extended
    resources, and the pool's own scale-down-unneeded time. Managed node group tags do not
    reach the Auto Scaling group, so they are written onto the ASG itself."""
    tags = node_template_tags(pool_labels(pool), ((t.key, t.value, t.effect) for t in pool_taints(pool)))
    tags.update({f"{AUTOSCALER_TEMPLATE}/resources/{k}": v for k, v in pool_resources(pool).items()})
    if pool.health_gate.enabled:
        # The node as jobs will find it: passed, so without the gate's pod, which requests every
        # GPU of the node while it checks. The autoscaler puts a pending DaemonSet's pod on its
        # template node when the DaemonSet should run there (NodeShouldRunDaemonPod: node affinity
        # and taints; GetDaemonSetPodsForNode in utils/daemonset/daemonset.go, called from
        # podsExpectedOnFreshNode in simulator/node_info_utils.go@cluster-autoscaler-1.35.0, for a
        # system-node-critical pod); the label keeps the gate off it, so a job still fits a new node.
        tags[f"{AUTOSCALER_TEMPLATE}/label/{HEALTH_LABEL}"] = "healthy"
    # The driver branch GPU feature discovery will label the node with once it runs: a job that
    # requires a driver (the job file's cudaDriver, infra/offline/team_job.py) must still fit the
    # template node, or the autoscaler never scales the pool up from zero for it.
    tags[f"{AUTOSCALER_TEMPLATE}/label/{DRIVER_MAJOR_LABEL}"] = str(versions.EKS_NVIDIA_DRIVER_BRANCH)
    tags[SCALE_DOWN_UNNEEDED_TAG] = pool.scale_down_unneeded_time  # higgsfield:gpuPools[i].scaleDownUnneededTime
    return tags


class GpuPoolGroup(pulumi.ComponentResource):
    """A GPU managed node group that scales to zero, in one AZ.

    Creates: for EFA pools an EfaFabric (self-referencing security group, cluster placement
    group unless the capacity is reserved) and a launch template with an ENA primary plus one
    EFA-only interface per network card; otherwise a launch template with the node security
    group. Both: IMDSv2 hop limit 1, encrypted gp3 root, RAID0 local NVMe, huge pages and the
    NVIDIA container toolkit's no-envvar settings via nodeadm user data, capacity reservation targeting for reservations
    and Capacity Blocks.
    Then the node group (AL2023 NVIDIA AMI, GPU taint, pool labels, minSize as configured,
    desiredSize ignored after creation, EKS node auto-repair when asked) and the autoscaler
    node-template tags on its ASG (the accelerator label among them) and its scale-down-unneeded time.
    The node group runs the cluster's Kubernetes version (and the stack's AMI release, if pinned):
    an upgrade updates it in place, MAX_UNAVAILABLE_NODES at a time, each node drained first; on
    reserved capacity with the MINIMAL strategy (the old node goes before its replacement comes).
    Capacity Block pools: scheduled actions on the ASG that hold it at zero outside the block's
    window, open it at the start (at maxSize when warm) and drain it drainBefore ahead of the end
    (window_actions). Warm reservation pools (capacity.warm, the default) are held at their
    reserved count: min = desired = max (scaling).
    Replaced when: instance types, AMI type, capacity type or the subnet (AZ) change.
    """

    def __init__(self, name: str, args: GpuPoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:gpu_pools:GpuPool", name, None, opts)
        pool = args.pool
        self.pool_name = pool.name
        tags = {**args.tags, POOL_LABEL: pool.name}
        child = pulumi.ResourceOptions(parent=self)

        extra: dict = {}
        if pool.efa:
            fabric = EfaFabric(f"{name}-efa", args.vpc_id, pool.placement_group, tags, opts=child)
            groups = [args.node_security_group_id, fabric.security_group_id]
            extra["network_interfaces"] = [
                aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                    network_card_index=i.network_card,
                    device_index=i.device_index,
                    interface_type="efa-only" if i.efa_only else None,
                    security_groups=groups,
                    delete_on_termination="true",
                )
                for i in efa_interfaces_for(pool.instance)
            ]
            if fabric.placement_group_name is not None:
                extra["placement"] = aws.ec2.LaunchTemplatePlacementArgs(group_name=fabric.placement_group_name)
        else:
            extra["security_group_ids"] = [args.node_security_group_id]
        if pool.reservation_id:
            extra["capacity_reservation_specification"] = aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                    capacity_reservation_id=pool.reservation_id
                )
            )
        if pool.capacity_type == "capacity-block":
            extra["instance_market_options"] = aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(
                market_type="capacity-block"
            )

        template = launch_template(
            f"{name}-lt",
            root_volume_gib=pool.root_volume_gib,
            # FastImagePull: every new node pulls the multi-GB training image before its gate passes
            user_data=node_user_data(
                raid0=pool.local_nvme == "raid0",
                hugepages=EFA_HUGEPAGES_2MI if pool.efa else 0,
                fast_image_pull=True,
                scripts=[container_toolkit_script()],
                locked_memory=pool.efa,
            ),
            tags={**tags, "Name": f"{args.cluster_name}-{pool.name}"},
            parent=self,
            **extra,
        )
        low, desired, high = scaling(pool, pool_settings.now())
        fixed = pool.capacity_type == "reservation" and low == high
        self.node_group = aws.eks.NodeGroup(
            name,
            cluster_name=args.cluster_name,
            node_role_arn=args.node_role_arn,
            subnet_ids=[args.subnet_id],
            instance_types=list(pool.instance_types),
            ami_type=args.ami_type,
            capacity_type=CAPACITY_TYPES[pool.capacity_type],
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(min_size=low, desired_size=desired, max_size=high),
            update_config=aws.eks.NodeGroupUpdateConfigArgs(
                max_unavailable=MAX_UNAVAILABLE_NODES, update_strategy=update_strategy(pool)
            ),
            **args.version.node_group_args(),
            node_repair_config=aws.eks.NodeGroupNodeRepairConfigArgs(enabled=args.auto_repair),
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=template.id, version=template.latest_version.apply(str)
            ),
            labels=pool_labels(pool),
            taints=[
                aws.eks.NodeGroupTaintArgs(key=t.key, value=t.value, effect=TAINT_EFFECTS[t.effect])
                for t in pool_taints(pool)
            ],
            tags=tags,
            # desiredSize is the autoscaler's, except on a pool held warm at min = desired = max: there
            # it is ours, and EKS refuses a minSize above the desiredSize it has (UpdateNodegroupConfig)
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=list(args.depends_on),
                ignore_changes=[] if fixed else ["scalingConfig.desiredSize"],
            ),
        )
        asg_name = autoscaling_group_name(self.node_group)
        # the pool on its ASG too: the health gate may mark instances Unhealthy only in groups of replacing pools
        aws.autoscaling.Tag(
            f"{name}-asg-pool",
            autoscaling_group_name=asg_name,
            tag=aws.autoscaling.TagTagArgs(key=POOL_LABEL, value=pool.name, propagate_at_launch=False),
            opts=child,
        )
        for action in window_actions(pool, pool_settings.now()):
            aws.autoscaling.Schedule(
                f"{name}-{action.name}",
                scheduled_action_name=f"higgsfield-{action.name}",
                autoscaling_group_name=asg_name,
                min_size=action.min_size,
                max_size=action.max_size,
                desired_capacity=action.desired,
                start_time=action.start_time,
                end_time=action.end_time,
                recurrence=action.recurrence,
                opts=child,
            )
        tag_autoscaling_group(name, asg_name, autoscaler_template_tags(pool), child)
        self.register_outputs({"node_group_name": self.node_group.node_group_name})
