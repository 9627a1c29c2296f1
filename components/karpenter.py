"""Karpenter: a per-pool option for on-demand and spot GPU pools (docs/design/karpenter.md).

Upstream read at aws/karpenter-provider-aws@v1.14.1 (infra/core/versions.py KARPENTER): the v1 CRDs
(pkg/apis/crds/karpenter.sh_nodepools.yaml, karpenter.k8s.aws_ec2nodeclasses.yaml), the chart's
values (charts/karpenter/values.yaml: settings.clusterName, settings.interruptionQueue,
serviceAccount.name, nodeSelector) and the getting-started CloudFormation template
(website/content/en/docs/getting-started/getting-started-with-karpenter/cloudformation.yaml): the
controller's IAM statements, the SQS interruption queue and its EventBridge rules.

A Karpenter pool gets what a node-group pool gets from its launch template (components/gpu_pools.py,
components/efa.py): ENA primary + one efa-only interface per network card (EC2NodeClass
networkInterfaces), a placement group when the pool has one (placementGroupSelector), RAID0 of
the local NVMe (instanceStorePolicy RAID0), IMDSv2 with hop limit 1 (metadataOptions), an
encrypted gp3 root, FastImagePull, and the health gate's startup taint (NodePool startupTaints).
No huge pages: Karpenter launches only for pods whose requests fit an instance type's capacity, and
the capacity it computes for an EC2 type has no `hugepages-*` (computeCapacity, pkg/providers/
instancetype/types.go@v1.14.1), so jobs on a Karpenter pool are rendered without them
(infra/offline/pods.py, docs/karpenter.md says the cost).

Its NodePool never disrupts a running training pod: consolidation only when a node is empty, after boot
+ gang fill; no Underutilized disruption (a budget of 0 nodes); `expireAfter: Never`; and every training
pod carries `karpenter.sh/do-not-disrupt` (infra/offline/jobs.py), which also keeps Drift off its node
while no `terminationGracePeriod` is set (website/content/en/docs/concepts/disruption.md@v1.14.1,
"Pod-Level Controls"). The one exception is node repair, under `nodeAutoRepair` as EKS auto-repair is on
the node-group pools: a node NotReady for 30 min, or whose GPUs the node monitoring agent reports failed
for 10, is replaced whatever runs on it (node_repair_gates). Drift is allowed otherwise, so the nodes
follow the cluster's version: the AMI alias resolves against the control plane's Kubernetes version, an
upgrade drifts every NodeClaim, and each node is replaced once it runs no training pod. The CRDs come
from their own chart (infra/core/versions.py KARPENTER_CRD), so they are upgraded with Karpenter.
Reservation and Capacity Block pools are refused in config (aws/karpenter-provider-aws#8514: one
NodeClass cannot yet span several blocks).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.charts import helm_release
from components.cpu_nodes import SYSTEM_LABELS, SYSTEM_TOLERATION
from components.efa import (
    EfaFabric,
    container_rlimits_node_config,
    efa_interfaces_for,
    kubelet_node_config,
    mime_user_data,
)
from components.gang_deadline import empty_node_s
from components.gpu_pools import ACCELERATOR_LABEL, container_toolkit_script, pool_labels, pool_taints
from components.identity import pod_identity
from components.kubernetes_objects import KubernetesObject
from infra.config import STARTUP_TAINT_KEY, GpuPool
from infra.core import versions
from infra.core.names import DRIVER_MAJOR_LABEL, interruption_queue, interruption_rule
from infra.core.names import KUBE_SYSTEM as NAMESPACE
from infra.core.versions import Chart

SERVICE_ACCOUNT = "karpenter"
# The controller's Deployment: the chart names it after the release (karpenter.fullname: the release name when it holds
# the chart's name, aws/karpenter-provider-aws:charts/karpenter/templates/_helpers.tpl@v1.14.1), and helm_release names
# the release after the chart.
DEPLOYMENT = versions.KARPENTER.name
# The controller's image, the chart's default that the release keeps (controller.image.repository, the tag and digest
# the chart's: aws/karpenter-provider-aws:charts/karpenter/values.yaml@v1.14.1; the Deployment's one container,
# templates/deployment.yaml@v1.14.1).
CONTROLLER_IMAGE = "public.ecr.aws/karpenter/controller"
NODEPOOL_TAG = "karpenter.sh/nodepool"
NODECLASS_TAG = "karpenter.k8s.aws/ec2nodeclass"
# The tag naming the cluster on everything Karpenter launches (v1.EKSClusterNameTagKey, aws/karpenter-provider-aws:
# pkg/apis/v1/labels.go@v1.14.1).
CLUSTER_NAME_TAG = "eks:eks-cluster-name"
# The events Karpenter handles from its queue (the EventBridge rules of cloudformation.yaml@v1.14.1).
INTERRUPTION_EVENTS = {
    "health": ("aws.health", "AWS Health Event"),
    "spot": ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
    "rebalance": ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
    "state": ("aws.ec2", "EC2 Instance State-change Notification"),
    "reservation": ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
}


# What the controller calls on its interruption queue (AllowInterruptionQueueActions of the getting-started
# template, cloudformation.yaml@v1.14.1); the stack boundary allows no more on the queue (components/delivery.py).
INTERRUPTION_QUEUE_READS = ("sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage")


def queue_policy(queue_arn: str, stack: str) -> str:
    """The interruption queue's resource policy: EventBridge may send to it for the stack's own rules alone, and
    nothing reaches it over plain HTTP. The getting-started template lets events.amazonaws.com and
    sqs.amazonaws.com send with no condition (cloudformation.yaml@v1.14.1, KarpenterInterruptionQueuePolicy), so
    any account's rule could target this queue and feed the controller a forged spot interruption or state change,
    on which it drains and deletes the node named. Here only events.amazonaws.com sends, for a rule whose ARN is
    one of interruption_rule's in this region and account, the condition EventBridge's guide gives a target's
    policy (docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-resource-based.html, aws:SourceArn); nothing of
    the stack sends as sqs.amazonaws.com (no queue redrives to this one).

    It is set by CreateQueue: pulumi-aws passes a queue's `policy` among CreateQueue's attributes and calls
    SetQueueAttributes only when an attribute other than the tags changes (resourceQueueCreate, resourceQueueUpdate:
    hashicorp/terraform-provider-aws:internal/service/sqs/queue.go@00a35305), and both ceilings refuse
    SetQueueAttributes (components/delivery.py CROSS_ACCOUNT_OPENINGS; `higgsfield diff` names the administrator's
    command for a change)."""
    region, account = queue_arn.split(":")[3:5]
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": "events.amazonaws.com"},
                    "Action": "sqs:SendMessage",
                    "Resource": queue_arn,
                    "Condition": {
                        "ArnLike": {
                            "aws:SourceArn": f"arn:aws:events:{region}:{account}:rule/{interruption_rule(stack, '*')}"
                        }
                    },
                },
                {
                    "Sid": "DenyHTTP",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "sqs:*",
                    "Resource": queue_arn,
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                },
            ],
        }
    )


def consolidate_after_s(pool: GpuPool) -> int:
    """How long a node stays empty before Karpenter may remove it (components/gang_deadline.py empty_node_s)."""
    return int(empty_node_s(pool))


def karpenter_policy(cluster_name: str, region: str, account: str, node_role_arn: str, queue_arn: str) -> str:
    """The controller's permissions, statement by statement as in cloudformation.yaml@v1.14.1:
    launch only with this cluster's tags, tag and delete only what carries them, pass only the
    node role, manage only instance profiles it tagged, read the interruption queue, read-only
    discovery in this region (zonal shift left out: settings.enableZonalShift stays false)."""
    arn, owned = f"arn:aws:ec2:{region}", {f"aws:ResourceTag/kubernetes.io/cluster/{cluster_name}": "owned"}
    request = {
        f"aws:RequestTag/kubernetes.io/cluster/{cluster_name}": "owned",
        f"aws:RequestTag/{CLUSTER_NAME_TAG}": cluster_name,
    }
    launched = [
        f"{arn}:*:{kind}/*"
        for kind in ("fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request")
    ]
    profile = f"arn:aws:iam::{account}:instance-profile/*"
    statements = [
        {
            "Sid": "AllowScopedEC2InstanceAccessActions",
            "Effect": "Allow",
            "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
            "Resource": [
                f"{arn}::image/*",
                f"{arn}::snapshot/*",
                f"{arn}:*:security-group/*",
                f"{arn}:*:subnet/*",
                f"{arn}:*:capacity-reservation/*",
                f"{arn}:*:placement-group/*",
            ],
        },
        {
            "Sid": "AllowScopedEC2LaunchTemplateAccessActions",
            "Effect": "Allow",
            "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
            "Resource": f"{arn}:*:launch-template/*",
            "Condition": {"StringEquals": owned, "StringLike": {f"aws:ResourceTag/{NODEPOOL_TAG}": "*"}},
        },
        {
            "Sid": "AllowScopedEC2InstanceActionsWithTags",
            "Effect": "Allow",
            "Action": ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
            "Resource": launched,
            "Condition": {"StringEquals": request, "StringLike": {f"aws:RequestTag/{NODEPOOL_TAG}": "*"}},
        },
        {
            "Sid": "AllowScopedResourceCreationTagging",
            "Effect": "Allow",
            "Action": "ec2:CreateTags",
            "Resource": launched,
            "Condition": {
                "StringEquals": {
                    **request,
                    "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"],
                },
                "StringLike": {f"aws:RequestTag/{NODEPOOL_TAG}": "*"},
            },
        },
        {
            "Sid": "AllowScopedResourceTagging",
            "Effect": "Allow",
            "Action": "ec2:CreateTags",
            "Resource": f"{arn}:*:instance/*",
            "Condition": {
                "StringEquals": owned,
                "StringLike": {f"aws:ResourceTag/{NODEPOOL_TAG}": "*"},
                "StringEqualsIfExists": {f"aws:RequestTag/{CLUSTER_NAME_TAG}": cluster_name},
                "ForAllValues:StringEquals": {"aws:TagKeys": [CLUSTER_NAME_TAG, "karpenter.sh/nodeclaim", "Name"]},
            },
        },
        {
            "Sid": "AllowScopedDeletion",
            "Effect": "Allow",
            "Action": ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
            "Resource": [f"{arn}:*:instance/*", f"{arn}:*:launch-template/*"],
            "Condition": {"StringEquals": owned, "StringLike": {f"aws:ResourceTag/{NODEPOOL_TAG}": "*"}},
        },
        {
            "Sid": "AllowRegionalReadActions",
            "Effect": "Allow",
            "Resource": "*",
            "Action": [
                "ec2:DescribeCapacityReservations",
                "ec2:DescribeImages",
                "ec2:DescribeInstances",
                "ec2:DescribeInstanceStatus",
                "ec2:DescribeInstanceTypeOfferings",
                "ec2:DescribeInstanceTypes",
                "ec2:DescribeLaunchTemplates",
                "ec2:DescribePlacementGroups",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeSpotPriceHistory",
                "ec2:DescribeSubnets",
            ],
            "Condition": {"StringEquals": {"aws:RequestedRegion": region}},
        },
        {
            "Sid": "AllowSSMReadActions",
            "Effect": "Allow",
            "Action": "ssm:GetParameter",
            "Resource": f"arn:aws:ssm:{region}::parameter/aws/service/*",
        },
        {"Sid": "AllowPricingReadActions", "Effect": "Allow", "Action": "pricing:GetProducts", "Resource": "*"},
        {
            "Sid": "AllowInterruptionQueueActions",
            "Effect": "Allow",
            "Action": list(INTERRUPTION_QUEUE_READS),
            "Resource": queue_arn,
        },
        {
            "Sid": "AllowPassingInstanceRole",
            "Effect": "Allow",
            "Action": "iam:PassRole",
            "Resource": node_role_arn,
            "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
        },
        {
            "Sid": "AllowScopedInstanceProfileCreationActions",
            "Effect": "Allow",
            "Action": ["iam:CreateInstanceProfile"],
            "Resource": profile,
            "Condition": {
                "StringEquals": {**request, "aws:RequestTag/topology.kubernetes.io/region": region},
                "StringLike": {f"aws:RequestTag/{NODECLASS_TAG}": "*"},
            },
        },
        {
            "Sid": "AllowScopedInstanceProfileTagActions",
            "Effect": "Allow",
            "Action": ["iam:TagInstanceProfile"],
            "Resource": profile,
            "Condition": {
                "StringEquals": {
                    **owned,
                    "aws:ResourceTag/topology.kubernetes.io/region": region,
                    **request,
                    "aws:RequestTag/topology.kubernetes.io/region": region,
                },
                "StringLike": {f"aws:ResourceTag/{NODECLASS_TAG}": "*", f"aws:RequestTag/{NODECLASS_TAG}": "*"},
            },
        },
        {
            "Sid": "AllowScopedInstanceProfileActions",
            "Effect": "Allow",
            "Action": [
                "iam:AddRoleToInstanceProfile",
                "iam:RemoveRoleFromInstanceProfile",
                "iam:DeleteInstanceProfile",
            ],
            "Resource": profile,
            "Condition": {
                "StringEquals": {**owned, "aws:ResourceTag/topology.kubernetes.io/region": region},
                "StringLike": {f"aws:ResourceTag/{NODECLASS_TAG}": "*"},
            },
        },
        {
            "Sid": "AllowUnscopedInstanceProfileListAction",
            "Effect": "Allow",
            "Action": "iam:ListInstanceProfiles",
            "Resource": "*",
        },
        {
            "Sid": "AllowInstanceProfileReadActions",
            "Effect": "Allow",
            "Action": "iam:GetInstanceProfile",
            "Resource": profile,
        },
        {
            "Sid": "AllowAPIServerEndpointDiscovery",
            "Effect": "Allow",
            "Action": "eks:DescribeCluster",
            "Resource": f"arn:aws:eks:{region}:{account}:cluster/{cluster_name}",
        },
    ]
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


def node_class_name(pool: GpuPool) -> str:
    return f"gpu-{pool.name}"


def user_data(pool: GpuPool) -> str:
    """What nodeadm gets beyond Karpenter's own NodeConfig: FastImagePull, the kubelet's per-pod PID cap
    (kubelet_node_config), the containers' locked-memory limit of an EFA pool, and the NVIDIA container
    toolkit's no-envvar settings (components/gpu_pools.py container_toolkit_script); RAID0 comes from
    instanceStorePolicy. No huge pages (the module's
    docstring): no pod on the node may ask for them, and the kubelet caps a pod's hugetlb at what it
    requests. MIME multipart, as Karpenter merges for AL2023 (EC2NodeClass userData)."""
    node_config = "  featureGates:\n    FastImagePull: true\n" + kubelet_node_config()
    node_config += container_rlimits_node_config() if pool.efa else ""
    # The container toolkit ignores NVIDIA_VISIBLE_DEVICES in unprivileged containers, as on the node groups
    return mime_user_data(node_config, [container_toolkit_script()])


def ec2_node_class(
    pool: GpuPool,
    node_role: pulumi.Input[str],
    subnet_id: pulumi.Input[str],
    security_group_ids: Sequence[pulumi.Input[str]],
    placement_group: pulumi.Input[str] | None,
    tags: Mapping[str, str],
) -> dict:
    spec: dict = {
        # AL2023, its NVIDIA variant for GPU types, for the control plane's version: the alias is the
        # SSM path /aws/service/eks/optimized-ami/K8S_VERSION/... (resolvePath, pkg/providers/amifamily/
        # al2023.go@v1.14.1), so an upgrade changes the image and drifts every NodeClaim (isAMIDrifted,
        # pkg/cloudprovider/drift.go@v1.14.1); node_pool's budgets say when a drifted node goes
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "role": node_role,
        "subnetSelectorTerms": [{"id": subnet_id}],
        "securityGroupSelectorTerms": [{"id": sg} for sg in security_group_ids],
        "metadataOptions": {
            "httpEndpoint": "enabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": 1,
            "httpTokens": "required",
        },
        "blockDeviceMappings": [
            {
                "deviceName": "/dev/xvda",
                "ebs": {
                    "volumeSize": f"{pool.root_volume_gib}Gi",
                    "volumeType": "gp3",
                    "encrypted": True,
                    "deleteOnTermination": True,
                },
            }
        ],
        "userData": user_data(pool),
        "tags": {**tags, "higgsfield.io/pool": pool.name},
    }
    if pool.local_nvme == "raid0":
        spec["instanceStorePolicy"] = "RAID0"
    if pool.efa:
        spec["networkInterfaces"] = [
            {
                "networkCardIndex": i.network_card,
                "deviceIndex": i.device_index,
                "interfaceType": "efa-only" if i.efa_only else "interface",
            }
            for i in efa_interfaces_for(pool.instance)
        ]
    if placement_group:
        spec["placementGroupSelector"] = {"name": placement_group}
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": node_class_name(pool)},
        "spec": spec,
    }


def node_pool(pool: GpuPool) -> dict:
    taints = [t for t in pool_taints(pool) if t.key != STARTUP_TAINT_KEY]
    startup = [t for t in pool_taints(pool) if t.key == STARTUP_TAINT_KEY]
    capacity = "spot" if pool.capacity_type == "spot" else "on-demand"
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": f"gpu-{pool.name}"},
        "spec": {
            "template": {
                # the autoscaler's accelerator label is the Cluster Autoscaler's business, not Karpenter's.
                # The driver branch: Karpenter launches a node for a pod only if the NodePool defines every
                # label the pod requires, and a job file's cudaDriver requires this one (infra/offline/
                # team_job.py); GPU feature discovery writes the same value once it runs on the node.
                "metadata": {
                    "labels": {
                        **{k: v for k, v in pool_labels(pool).items() if k != ACCELERATOR_LABEL},
                        DRIVER_MAJOR_LABEL: str(versions.EKS_NVIDIA_DRIVER_BRANCH),
                    }
                },
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": node_class_name(pool),
                    },
                    "requirements": [
                        {
                            "key": "node.kubernetes.io/instance-type",
                            "operator": "In",
                            "values": list(pool.instance_types),
                        },
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity]},
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [pool.availability_zone]},
                    ],
                    "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in taints],
                    "startupTaints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in startup],
                    "expireAfter": "Never",
                },
            },
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": f"{consolidate_after_s(pool)}s",
                # never for underutilisation; empty nodes may go, and drifted ones (a new AMI, a
                # Kubernetes upgrade) once no training pod holds them with do-not-disrupt
                "budgets": [{"nodes": "0", "reasons": ["Underutilized"]}],
            },
            "limits": {"nvidia.com/gpu": str(pool.max_size * pool.gpus_per_node)},
        },
    }


@dataclass(frozen=True, kw_only=True)
class KarpenterArgs:
    stack: str
    cluster_name: str
    region: str
    chart: Chart
    crd_chart: Chart
    pools: Sequence[GpuPool]
    vpc_id: pulumi.Input[str]
    node_role_arn: pulumi.Input[str]
    subnet_ids: Mapping[str, pulumi.Input[str]]  # availability zone -> private subnet id
    security_group_ids: Sequence[pulumi.Input[str]]
    provider: pulumi.ProviderResource
    depends_on: Sequence[pulumi.Resource]
    deployer_arn: pulumi.Input[str]  # deploying_identity(): the queue's account
    tags: Mapping[str, str]
    node_repair: bool  # higgsfield:observability.nodeAutoRepair, as for the node-group pools (node_repair_gates)


def node_repair_gates(node_auto_repair: bool) -> dict[str, bool]:
    """The chart's `settings.featureGates` (only the gate set here; Helm merges the map over the chart's
    defaults, so every other gate keeps its default): Karpenter's node repair follows `nodeAutoRepair`, the
    setting that turns EKS auto-repair on for the node-group pools, and off is written, not left to the chart.

    Read at aws/karpenter-provider-aws@v1.14.1 and the core it vendors, kubernetes-sigs/karpenter@6e7eab7a0f48
    (go.mod: v1.14.1-0.20260819221709-6e7eab7a0f48):
    - the gate: `settings.featureGates.nodeRepair`, ALPHA, false by default (charts/karpenter/values.yaml), passed
      as FEATURE_GATES NodeRepair=... (templates/deployment.yaml); it starts the node health controller
      (pkg/controllers/controllers.go).
    - what it acts on: Ready False or Unknown for 30 min, and the EKS node monitoring agent's conditions False:
      AcceleratedHardwareReady 10 min, StorageReady, NetworkingReady, KernelReady, ContainerRuntimeReady 30 min
      (RepairPolicies, pkg/cloudprovider/cloudprovider.go) - the table EKS auto-repair uses for node groups
      (docs.aws.amazon.com/eks/latest/userguide/node-repair.html), with Replace for every action (no reboot).
      The agent is the observability add-on (components/observability.py), without its kernel and runtime
      monitors, so KernelReady and ContainerRuntimeReady are never set (components/addons.py
      NODE_MONITORING_AGENT_CONFIGURATION); without the agent, Ready alone.
    - what it does (pkg/controllers/node/health/controller.go): stamps the NodeClaim's termination time as now
      and deletes it; the termination controller then deletes the node's pods with 1 s grace, past PDBs and
      `karpenter.sh/do-not-disrupt` (DeleteExpiringPods, pkg/controllers/node/termination/terminator/
      terminator.go), stops waiting for pods whose deletion is a minute overdue, as a dead kubelet's are
      (IsStuckTerminating, pkg/utils/pod/scheduling.go), terminates the instance and removes the Node's
      finalizer (pkg/controllers/node/termination/controller.go). From there it is a `kubectl delete node`:
      the pod garbage collector removes the node's pods and the operator makes their replicas again
      (images/training/gang_deadline.py cites both).
    - its limit: no repair while more than 20% of the NodePool's nodes (rounded up: one of up to five) match a
      policy (isNodePoolHealthy).
    - it reads node conditions only, and the health gate sets none: it holds a node with its startup taint and
      labels, and may not write a node's status, where conditions live (components/healthgate.py
      gate_role_rules: `nodes`, not `nodes/status`). A node the gate is checking stays Ready and is not
      repaired; one that fails has its NodeClaim deleted by the gate.
    - its RBAC (nodes list, nodeclaims patch/delete, pods delete: charts/karpenter/templates/
      clusterrole-core.yaml) and IAM (ec2:DescribeInstances, ec2:TerminateInstances: karpenter_policy) are
      what the controller already has."""
    return {"nodeRepair": node_auto_repair}


class Karpenter(pulumi.ComponentResource):
    """Karpenter on the system nodes and one EC2NodeClass + NodePool per Karpenter pool.

    Creates: the SQS interruption queue (5-minute retention, SSE, TLS only, fed by the stack's rules alone:
    queue_policy) and five EventBridge rules, each named by the stack (interruption_queue,
    interruption_rule), the controller's Pod Identity role (karpenter_policy) and association, the
    Helm releases of the CRD chart and of the controller (without its crds/), and per pool an
    EC2NodeClass (EFA layout, RAID0, IMDSv2 hop 1, gp3 root, FastImagePull) and a NodePool (pool
    labels and taints, the gate's startup taint, never disrupting a running training pod).
    Replaced when: a pool is renamed (its NodeClass and NodePool); the queue and rules of a stack deployed
    before they were named by it, once.
    """

    def __init__(self, name: str, args: KarpenterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:karpenter:Karpenter", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # Named by the stack, so that the deploy role's policy reaches this queue and no other
        # (components/delivery.py deploy_policy); its ARN (the deploying identity's account) is known
        # before it exists, so its policy is CreateQueue's (queue_policy).
        queue_name = interruption_queue(args.stack)
        queue = aws.sqs.Queue(
            f"{name}-interruptions",
            name=queue_name,
            message_retention_seconds=300,
            sqs_managed_sse_enabled=True,
            policy=pulumi.Output.from_input(args.deployer_arn).apply(
                lambda arn: queue_policy(f"arn:aws:sqs:{args.region}:{arn.split(':')[4]}:{queue_name}", args.stack)
            ),
            tags=dict(args.tags),
            opts=child,
        )
        for event, (source, detail) in INTERRUPTION_EVENTS.items():
            rule = aws.cloudwatch.EventRule(
                f"{name}-{event}",
                name=interruption_rule(args.stack, event),
                event_pattern=json.dumps({"source": [source], "detail-type": [detail]}),
                tags=dict(args.tags),
                opts=child,
            )
            aws.cloudwatch.EventTarget(f"{name}-{event}", rule=rule.name, arn=queue.arn, opts=child)
        # the account from the node role's ARN (arn:aws:iam::ACCOUNT:role/NAME): no extra invoke
        policy_json = pulumi.Output.all(args.node_role_arn, queue.arn).apply(
            lambda v: karpenter_policy(args.cluster_name, args.region, v[0].split(":")[4], v[0], v[1])
        )
        _, credentials = pod_identity(
            f"{name}-role",
            f"{name}-identity",
            args.tags,
            self,
            cluster=args.cluster_name,
            namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT,
            inline_policy=policy_json,
            depends_on=args.depends_on,
        )
        # The CRDs' own chart first, so `pulumi up` with a new pin upgrades them; the controller's
        # chart then skips its crds/ (Helm would only ever install them once).
        crds = helm_release(
            f"{name}-crd",
            args.crd_chart,
            NAMESPACE,
            {},
            pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on)),
        )
        self.release = helm_release(
            name,
            args.chart,
            NAMESPACE,
            {
                "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT},
                "nodeSelector": SYSTEM_LABELS,
                # the system nodes are tainted; the chart's own CriticalAddonsOnly kept (a list replaces it:
                # aws/karpenter-provider-aws:charts/karpenter/values.yaml@v1.14.1 `tolerations`)
                "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}, SYSTEM_TOLERATION],
                "settings": {
                    "clusterName": args.cluster_name,
                    "interruptionQueue": queue.name,
                    "featureGates": node_repair_gates(args.node_repair),
                },
            },
            pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=[crds, *credentials, *args.depends_on]
            ),
            skip_crds=True,
        )
        after = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[self.release])
        role_name = pulumi.Output.from_input(args.node_role_arn).apply(lambda arn: arn.rsplit("/", 1)[-1])
        for pool in args.pools:
            groups, placement = list(args.security_group_ids), None
            if pool.efa:  # the same fabric as a node-group pool: self-referencing SG, cluster placement group
                fabric = EfaFabric(f"{name}-{pool.name}-efa", args.vpc_id, pool.placement_group, args.tags, opts=child)
                groups.append(fabric.security_group_id)
                placement = fabric.placement_group_name
            nodeclass = ec2_node_class(
                pool, role_name, args.subnet_ids[pool.availability_zone], groups, placement, args.tags
            )
            # Removing the pool deletes both at once (neither depends on the other), each delete waiting, 10 min at
            # most, for Karpenter to drain the pool's nodes: infra/offline/pool_removal.py says what that does
            KubernetesObject(f"{name}-{pool.name}-nodeclass", nodeclass, opts=after)
            KubernetesObject(f"{name}-{pool.name}-nodepool", node_pool(pool), opts=after)
        self.register_outputs({"queue": queue.name})
