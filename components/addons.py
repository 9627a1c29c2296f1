"""EKS managed add-ons, installed one way everywhere, at the version EKS picks for the cluster."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pulumi
import pulumi_aws as aws

from components.cpu_nodes import SYSTEM_TOLERATION
from infra.config import StackConfig
from infra.core import versions
from infra.core.versions import AddonVersion

# Add-ons that must run before a node can become Ready (pod network, Service routing, Pod
# Identity credentials): node groups wait for them, so a Kubernetes upgrade updates them before
# the nodes roll. CoreDNS is not among them: its add-on turns ACTIVE only once its pods run on a
# node (create times out DEGRADED without one: pulumi/pulumi-eks#1819,
# terraform-aws-modules/terraform-aws-eks#3001), so it follows the system node group.
BEFORE_NODES = ("vpc-cni", "kube-proxy", "eks-pod-identity-agent")
CLUSTER_ADDONS = (*BEFORE_NODES, "coredns")
OBSERVABILITY_ADDONS = ("aws-ebs-csi-driver", "amazon-cloudwatch-observability", "eks-node-monitoring-agent")
FSX_ADDONS = ("aws-fsx-csi-driver",)

# The system nodes are tainted (components/cpu_nodes.py), and on a new cluster they are the only
# nodes (GPU pools start at zero and carry their own taint): an add-on Deployment that does not
# tolerate the taint never schedules, and CoreDNS' add-on then never turns ACTIVE. Each add-on
# that runs a Deployment gets the toleration through its configuration values, keeping the
# chart's own tolerations (a list value replaces the default, it does not extend it):
# - coredns: `tolerations` (the EKS CoreDNS configuration schema; aws.amazon.com/blogs/containers/
#   amazon-eks-add-ons-advanced-configuration/; the EKS deployment's own tolerations are
#   CriticalAddonsOnly and node-role.kubernetes.io/control-plane).
# - aws-fsx-csi-driver: `controller.tolerations` (kubernetes-sigs/aws-fsx-csi-driver:charts/
#   aws-fsx-csi-driver/values.yaml@v1.8.0; default CriticalAddonsOnly + NoExecute for 300 s). Its node
#   DaemonSet tolerates every taint (`node.tolerateAllTaints: true`, templates/node-daemonset.yaml).
# - aws-ebs-csi-driver: `controller.tolerations`, same defaults; node `tolerateAllTaints: true`
#   (kubernetes-sigs/aws-ebs-csi-driver:charts/aws-ebs-csi-driver/values.yaml@006340ee).
# - amazon-cloudwatch-observability: `manager.tolerations` for the operator Deployment; its
#   default `[]` *replaces* the chart's root `tolerations: [{operator: Exists}]` that the agent and
#   Fluent Bit DaemonSets keep (aws-observability/helm-charts:charts/amazon-cloudwatch-observability/
#   values.yaml, templates/_helpers.tpl common.tolerations, templates/operator-deployment.yaml@71a298ff).
# That each add-on's configuration schema takes these keys is unverified here: EKS validates the
# values against the schema at create, so a missing key fails the deploy, never silently, and
# `higgsfield preflight` checks them against the schema of the version the deploy installs
# (infra/cli/preflight.py _addon_values, DescribeAddonConfiguration).
# Daemon add-ons (vpc-cni, kube-proxy, eks-pod-identity-agent, eks-node-monitoring-agent) tolerate
# every taint as shipped (ADDON_DAEMONS), so they need nothing.
_CONTROLLER_DEFAULTS = [
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
    {"effect": "NoExecute", "operator": "Exists", "tolerationSeconds": 300},
]
SYSTEM_ADDON_CONFIGURATION: dict[str, dict] = {
    "coredns": {
        "tolerations": [
            {"key": "CriticalAddonsOnly", "operator": "Exists"},
            {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
            SYSTEM_TOLERATION,
        ]
    },
    "aws-fsx-csi-driver": {"controller": {"tolerations": [*_CONTROLLER_DEFAULTS, SYSTEM_TOLERATION]}},
    "aws-ebs-csi-driver": {"controller": {"tolerations": [*_CONTROLLER_DEFAULTS, SYSTEM_TOLERATION]}},
    "amazon-cloudwatch-observability": {"manager": {"tolerations": [SYSTEM_TOLERATION]}},
}
# Add-ons that run only DaemonSets tolerating every taint, with where that was read. Unverified
# entries name the command that confirms it on a cluster.
ADDON_DAEMONS: dict[str, str] = {
    "vpc-cni": "aws-node DaemonSet `tolerations: [{operator: Exists}]` "
    "(aws/eks-charts:stable/aws-vpc-cni/values.yaml@5239609); "
    "check: kubectl -n kube-system get ds aws-node -o jsonpath='{.spec.template.spec.tolerations}'",
    "kube-proxy": "unverified; check: kubectl -n kube-system get ds kube-proxy -o "
    "jsonpath='{.spec.template.spec.tolerations}'",
    "eks-pod-identity-agent": "unverified; check: kubectl -n kube-system get ds eks-pod-identity-agent -o "
    "jsonpath='{.spec.template.spec.tolerations}'",
    "eks-node-monitoring-agent": "unverified; check: kubectl -n kube-system get ds eks-node-monitoring-agent -o "
    "jsonpath='{.spec.template.spec.tolerations}'",
}

# The node monitoring agent runs without the two monitors that fail a node on a kubelet journal entry (the agent's
# README "Configuring Monitors", charts/configuration.schema.json NodeAgent.monitors and charts/.../
# monitor-configmap.yaml, all in aws/eks-node-monitoring-agent@v1.6.4, the floor: ADDON_FLOORS), each with the one
# node condition it sets (cmd/eks-node-monitoring-agent/main.go conditionConfigs). Each turns its condition False on
# one Fatal reason read from any kubelet journal entry matching a pattern, unanchored (pkg/reasons/reasons.yaml; every
# other reason of theirs is a Warning, an event):
# - kernel-monitor, KernelReady: ForkFailedOutOfPIDs, `.*fork/exec.*resource temporarily unavailable` or `failed to
#   create new OS thread.*errno=11` (monitors/kernel/monitor.go forkFailedOutOfPidRegexp, goRuntimeOutOfPidRegexp);
# - runtime, ContainerRuntimeReady: PodStuckTerminating, `"Pod still has one or more containers in the non-exited
#   state and will not be removed from desired state" pod="(.*)"` seen three times (monitors/runtime/monitor.go
#   podStuckTerminating). The kubelet's own such line is V(4) (kubernetes/kubernetes:pkg/kubelet/volumemanager/
#   populator/desired_state_of_world_populator.go), below nodeadm's verbosity 2, so on these nodes only a forged one
#   is ever logged.
# The storage monitor reads the kubelet's journal too, for Warnings alone (EtcHostsMountFailed, KubeletDiskUsageSlow:
# events, which no repair reads: monitors/storage/monitor.go handleKubeletLogs), and stays on.
# The kubelet logs text a team's pod chooses (a command it could not start, an env-expanded argument, what a failed
# exec hook or probe printed, a grpc probe's answer, an image's entrypoint), and writes a value holding a line break
# as it is, line by line, each an entry of the journal of its own (kubernetes/klog:internal/serialize/keyvalues.go
# writeStringValue@2ca1701ced7f): any quoted message is forged whole. Node repair replaces a node whose condition stays
# False (Karpenter: 30 min, aws/karpenter-provider-aws:pkg/cloudprovider/cloudprovider.go RepairPolicies@v1.14.1; EKS
# auto-repair on node groups likewise) with every pod on it: a team could end another team's gang on a shared node.
# A disabled monitor's condition is not set at all (README, "When a monitor is disabled"), so no repair reads the
# kubelet's log. What is lost: those monitors' Warning events (a soft lockup, a kernel BUG, an application crash, a
# systemd unit restarting, probe failure rates), and a node whose PIDs are spent is no condition; the kubelet caps each
# pod's PIDs (components/efa.py POD_PIDS_LIMIT), so one pod cannot spend them. docs/design/tenancy.md, "Node repair on
# a shared node".
KUBELET_LOG_MONITORS: dict[str, str] = {"kernel-monitor": "KernelReady", "runtime": "ContainerRuntimeReady"}
NODE_MONITORING_AGENT_MONITORS: dict[str, dict[str, bool]] = {name: {"enabled": False} for name in KUBELET_LOG_MONITORS}
# The agent reads its monitors' settings once, at start (cmd/eks-node-monitoring-agent/main.go LoadMonitorConfig), from
# the ConfigMap its chart writes, and its DaemonSet's pod template names neither the settings nor a checksum of them
# (charts/eks-node-monitoring-agent/templates/monitor-configmap.yaml, daemonset.yaml, all @v1.6.4): a change of them
# would reach the ConfigMap and leave the running agents as they were. The settings as a pod annotation
# (`nodeAgent.podAnnotations`, charts/configuration.schema.json) change the template with them, so the DaemonSet rolls.
MONITORS_ANNOTATION = "higgsfield.io/monitors"
MONITORS_SETTINGS = json.dumps(NODE_MONITORING_AGENT_MONITORS, sort_keys=True)  # the annotation's value
NODE_MONITORING_AGENT_CONFIGURATION: dict[str, object] = {
    "nodeAgent": {
        "monitors": NODE_MONITORING_AGENT_MONITORS,
        "podAnnotations": {MONITORS_ANNOTATION: MONITORS_SETTINGS},
    }
}


def _merged(base: Mapping[str, object], extra: Mapping[str, object]) -> dict[str, object]:
    """`base` with `extra` merged in, key by key (nested objects merged, other values replaced)."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = (
            _merged(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) else value
        )
    return out


def addon_configuration(addon_name: str, configuration: Mapping[str, object] | None) -> dict[str, object] | None:
    """What `addon_name` is configured with: the caller's values and the system-node tolerations."""
    merged = _merged(SYSTEM_ADDON_CONFIGURATION.get(addon_name, {}), configuration or {})
    return merged or None


def stack_addons(cfg: StackConfig) -> dict[str, AddonVersion]:
    """The managed add-ons `cfg` installs, each with the stack's pin (`higgsfield:addonVersions`)
    or None: EKS's default for `cfg.kubernetes_version`, resolved at deploy."""
    names = [
        *CLUSTER_ADDONS,
        *(FSX_ADDONS if cfg.fsx.enabled else ()),
        *(OBSERVABILITY_ADDONS if cfg.observability.enabled else ()),
    ]
    return versions.addon_versions(cfg.kubernetes_version, dict(cfg.addon_versions), tuple(names))


def addon_version(addon: AddonVersion) -> pulumi.Input[str]:
    """The stack's pin, else the version EKS marks default for the cluster's Kubernetes version
    (DescribeAddonVersions through `aws.eks.get_addon_version`; versions.py says why default), refused below the
    add-on's floor (versions.ADDON_FLOORS): the lookup runs at preview too, so a CI deploy, which runs no
    `higgsfield preflight`, stops before anything changes."""
    if addon.pin:
        return addon.pin
    return aws.eks.get_addon_version_output(
        addon_name=addon.name, kubernetes_version=addon.kubernetes_version, most_recent=versions.ADDON_MOST_RECENT
    ).version.apply(lambda resolved: _at_its_floor(addon, resolved))


def _at_its_floor(addon: AddonVersion, resolved: str) -> str:
    """`resolved`, unless it is an EKS version below the add-on's floor."""
    floor = versions.below_floor(addon.name, resolved)
    if floor:
        raise ValueError(
            f"EKS's default {addon.name} for Kubernetes {addon.kubernetes_version} is {resolved}, below {floor}, the "
            f"oldest this platform runs (infra/core/versions.py ADDON_FLOORS says why): pin a newer one in "
            f"higgsfield:addonVersions.{addon.name}"
        )
    return resolved


def managed_addon(
    name: str,
    cluster_name: str,
    addon: AddonVersion,
    *,
    tags: Mapping[str, str],
    opts: pulumi.ResourceOptions,
    identity: tuple[pulumi.Input[str], str] | None = None,
    configuration: Mapping[str, object] | None = None,
) -> aws.eks.Addon:
    """`addon` at its resolved version. On create it takes over whatever EKS bootstrapped in its
    place (OVERWRITE); on update it keeps settings someone changed in the cluster (PRESERVE).
    `identity` is (role ARN, service account) for a Pod Identity association; `configuration`
    the add-on's configuration values (its schema: `aws eks describe-addon-configuration`), to
    which the system-node tolerations are added (SYSTEM_ADDON_CONFIGURATION)."""
    configuration = addon_configuration(addon.name, configuration)
    return aws.eks.Addon(
        name,
        cluster_name=cluster_name,
        addon_name=addon.name,
        addon_version=addon_version(addon),
        pod_identity_associations=[
            aws.eks.AddonPodIdentityAssociationArgs(role_arn=identity[0], service_account=identity[1])
        ]
        if identity
        else None,
        configuration_values=json.dumps(configuration) if configuration else None,
        resolve_conflicts_on_create="OVERWRITE",
        resolve_conflicts_on_update="PRESERVE",
        tags=dict(tags),
        opts=opts,
    )
