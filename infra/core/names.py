"""Names more than one layer uses, each defined here once: the project's prefix, the stack's
derived names, the labels, taints and annotations the program sets and the jobs and policies read,
and the resource types the offline reports and the policy pack select on. Standard library only:
`python3 -m infra.offline.stacks` runs in a workflow with PyYAML alone."""

from __future__ import annotations

# --- the project and its stacks ---------------------------------------------------------------
NAMESPACE = "higgsfield"  # Pulumi.yaml's project name, the config namespace and every name's prefix
ENVIRONMENTS = ("dev", "staging", "prod")  # in deploy order: dev first, prod last
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,28}[a-z0-9])?$"  # a stack, team, pool or dataset name
DNS_LABEL_RULE = "a lowercase DNS label of at most 30 characters (a-z, 0-9, '-'; starts and ends alphanumeric)"
RUNNER_PURPOSES = ("preview", "deploy")  # one CodeBuild runner project each: a preview's never runs a deploy


def cluster_name(stack: str) -> str:
    """`higgsfield-prod`: the EKS cluster, and the prefix of the stack's AWS names."""
    return f"{NAMESPACE}-{stack}"


def role_name(stack: str, purpose: str) -> str:
    """`higgsfield-prod-deploy`: preview, deploy, image, runner."""
    return f"{cluster_name(stack)}-{purpose}"


def assumed_role_user(account: str, role: str, session: str = "") -> str:
    """The Kubernetes user of a role's requests to a cluster whose access entry for it sets no username: its
    assumed-role ARN, then the session's name (awsdocs/amazon-eks-user-guide:latest/ug/manage-access/k8s-access/
    set-custom-username.adoc@21adee18, "Default username generation"); `session` "": the prefix every session's has."""
    return f"arn:aws:sts::{account}:assumed-role/{role}/{session}"


def pulumi_up(stack: str, *options: str) -> str:
    """`pulumi up` of `stack` as CI's deploy runs it: with the policy pack and the stack's configuration of it
    (.github/workflows/deploy.yml), so a deploy by hand meets the same guards; `options` go before them
    (`--target URN`, `--config-file FILE`)."""
    return " ".join(
        [
            "pulumi up --stack",
            stack,
            *options,
            f"--policy-pack policies --policy-pack-config policies/config/{stack}.json",
        ]
    )


def boundary_name(stack: str) -> str:
    """The IAM managed policy every role of the stack carries as its permissions boundary."""
    return role_name(stack, "boundary")


def deploy_denials_name(stack: str) -> str:
    """The IAM managed policy attached to the deploy role beside its inline policy: the part of its ceiling that
    IAM's cap on a role's inline policies leaves no room for (components/delivery.py deploy_denials_policy)."""
    return role_name(stack, "deploy-denials")


def runner_project(stack: str, purpose: str) -> str:
    """The CodeBuild project (`higgsfield-prod-deploy-runner`) whose webhook runs jobs labelled
    `codebuild-<project>-<run id>-<attempt>`; also the name of its service role."""
    return f"{cluster_name(stack)}-{purpose}-runner"


def interruption_queue(stack: str) -> str:
    """`higgsfield-prod-interruptions`: the SQS queue Karpenter reads EC2 and Health events from."""
    return f"{cluster_name(stack)}-interruptions"


def interruption_rule(stack: str, event: str) -> str:
    """`higgsfield-prod-karpenter-spot`: the EventBridge rule feeding that queue one kind of event (`*`: all of
    them). EventBridge names are at most 64 characters: a 30-character stack and `reservation` make 63."""
    return f"{cluster_name(stack)}-karpenter-{event}"


STACK_TAG = "higgsfield:stack"  # the AWS tag naming the stack of every taggable resource (the boundary reads it)


# --- labels, taints and annotations -------------------------------------------------------------
GPU_RESOURCE = "nvidia.com/gpu"  # the extended resource, and the GPU nodes' taint key
EFA_RESOURCE = "vpc.amazonaws.com/efa"  # the EFA device plugin's extended resource: a node's EFA interfaces
HUGEPAGES_RESOURCE = "hugepages-2Mi"  # the 2 MiB huge pages an EFA node reserves at boot (components/efa.py)
POOL_LABEL = "higgsfield.io/pool"  # the GPU pool a node belongs to
GATED_LABEL = "higgsfield.io/gated"  # on the nodes of a pool with a health gate
HEALTH_LABEL = "higgsfield.io/health"  # the gate's verdict on a node (and the prefix of its details)
WORKLOAD_LABEL = "higgsfield.io/workload"  # on each PriorityClass: the class of work it is for
SYSTEM_TAINT_KEY = "higgsfield.io/system"  # the system nodes' taint
# The teams' CPU nodes: where a team's pods without GPUs run (the MPI launchers among them), labelled and
# tainted so that nothing else lands there and no pod without GPUs lands on a GPU node (docs/design/tenancy.md,
# "Pods without GPUs run on the teams' CPU nodes").
TEAM_CPU_LABEL = "higgsfield.io/team-cpu"
TEAM_CPU_TAINT_KEY = "higgsfield.io/team-cpu"
STARTUP_TAINT_KEY = "startup-taint.cluster-autoscaler.kubernetes.io/higgsfield-gate"  # a gated node's, until it passes
AUTOSCALER_TEMPLATE = "k8s.io/cluster-autoscaler/node-template"  # prefix of the ASG tags the autoscaler reads at zero
# Per-ASG override of --scale-down-unneeded-time (the tag prefix `optionsTagsPrefix` and the key
# `scaledownunneededtime` = config.DefaultScaleDownUnneededTimeKey, read in aws_manager.go and
# config/const.go@cluster-autoscaler-1.35.0; value in the flag's duration format).
SCALE_DOWN_UNNEEDED_TAG = f"{AUTOSCALER_TEMPLATE}/autoscaling-options/scaledownunneededtime"
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"  # a namespace's (and a job's) Volcano queue
# A pod's PodGroup, by name (KubeGroupNameAnnotationKey), and the gang size Volcano's PodGroup
# controller reads off a pod's owner (VolcanoGroupMinMemberAnnotationKey), both in volcano-sh/volcano:
# staging/src/volcano.sh/apis/pkg/apis/scheduling/v1beta1/labels.go@v1.15.1.
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
MIN_MEMBER_ANNOTATION = "scheduling.volcano.sh/group-min-member"
# Pod annotations that keep a node from being emptied: Karpenter never voluntarily disrupts the node
# of a pod with do-not-disrupt "true"; the Cluster Autoscaler never scales down the node of a pod with
# safe-to-evict "false" (PodSafeToEvictKey, kubernetes/autoscaler:cluster-autoscaler/utils/drain/
# drain.go@cluster-autoscaler-1.35.2).
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
# A pod without GPUs on a GPU node runs to a deadline (spec.activeDeadlineSeconds), which puts it in its team's
# CPU-only quota (components/teams.py cpu_only_quota); the platform's MPI launchers take the longest a pod may
# have, 2**31 - 1 seconds, about 68 years (ValidatePodSpec, kubernetes/kubernetes:pkg/apis/core/validation/
# validation.go@000f2605), so they run as long as their job.
LONGEST_POD_DEADLINE = 2**31 - 1
# A pod's terminal phases (PodSucceeded, PodFailed: kubernetes/api:core/v1/types.go@v0.35.0): it runs no more, holds
# no node, and no quota charges it.
ENDED_POD_PHASES = ("Succeeded", "Failed")
# When the gang deadline suspended a job (images/training/gang_deadline.py writes it, and removes it when it
# resumes the job; the team policy keeps it, and the suspension, the deadline's: components/tenancy.py).
GAVE_BACK_ANNOTATION = "higgsfield.io/gave-back-at"
# How long after a give-back the gang deadline resumes the job: the autoscaler's longest node-group backoff
# (maxNodeGroupBackoffDuration 30m: --max-node-group-backoff-duration, kubernetes/autoscaler:
# cluster-autoscaler/config/flags/flags.go@cluster-autoscaler-1.35.2), so EC2 is asked again only after it.
GANG_RETRY_AFTER_S = 30 * 60
WAITING_SINCE_ANNOTATION = "higgsfield.io/waiting-since"  # on a job: the gang deadline's clock of its gang
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"  # the node a service-account token was bound to
# The NVIDIA driver's major branch (580) on a GPU node, published by GPU feature discovery
# (newVersionLabeler in NVIDIA/k8s-device-plugin:internal/lm/nvml.go@v0.19.3, versions.NVIDIA_DEVICE_PLUGIN;
# `nvidia.com/cuda.driver.major` is the deprecated name of the same value there).
DRIVER_MAJOR_LABEL = "nvidia.com/cuda.driver-version.major"
# The node name label the kubelet sets on its own node (kubernetes/kubernetes:staging/src/k8s.io/api/core/v1/
# well_known_labels.go LabelHostname).
HOSTNAME_LABEL = "kubernetes.io/hostname"
# What the Training Operator labels every pod of a job with (kubeflow/trainer:pkg/apis/kubeflow.org/v1/
# common_types.go@v1.9.4 JobNameLabel, ReplicaTypeLabel, ReplicaIndexLabel).
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
# A Kubeflow job's name says its kind. The Training Operator finds a job's PodGroup by namespace and
# name alone, never by kind or owner (SyncPodGroup, kubeflow/trainer:pkg/controller.v1/common/
# scheduling.go@v1.9.4), rewrites its spec and makes the job's pods at once when the group is past
# Pending; Volcano names a plain workload's group `podgroup-<owner UID>` (GeneratePodgroupName,
# volcano-sh/volcano:staging/src/volcano.sh/apis/pkg/apis/helpers/helpers.go@v1.15.1). So every kind
# but the PyTorchJob takes a name starting with its prefix, a PyTorchJob none of them, and no job
# Volcano's: no two running gangs can share a PodGroup (docs/design/tenancy.md).
KUBEFLOW_GROUP = "kubeflow.org"
# A job's controller, when set (spec.runPolicy.managedBy): the operator reconciles only jobs that name it or
# none (KubeflowJobsController, kubeflow/trainer:pkg/apis/kubeflow.org/v1/common_types.go@v1.9.4).
KUBEFLOW_MANAGER = "kubeflow.org/training-operator"
# The Training Operator's job kinds and their resources (kubeflow/trainer:pkg/apis/kubeflow.org/v1@v1.9.4).
KUBEFLOW_JOB_KINDS = {
    "PyTorchJob": "pytorchjobs",
    "TFJob": "tfjobs",
    "MPIJob": "mpijobs",
    "XGBoostJob": "xgboostjobs",
    "JAXJob": "jaxjobs",
    "PaddleJob": "paddlejobs",
}
JOB_NAME_PREFIXES = {
    "MPIJob": "mpi-",
    "TFJob": "tf-",
    "XGBoostJob": "xgboost-",
    "JAXJob": "jax-",
    "PaddleJob": "paddle-",
}
UNPREFIXED_JOB_KIND = "PyTorchJob"
# What the operator deletes once a job has finished: its Running and Pending pods (DeletePodsAndServices,
# kubeflow/trainer:pkg/controller.v1/common/job.go@v1.9.4). Every kind's default is None, which keeps them
# running after it deletes the job's PodGroup (CleanUpResources), outside every queue; "All" deletes the
# finished pods too, and their logs with them.
CLEAN_POD_POLICIES = ("Running", "All")
CLEAN_POD_POLICY = CLEAN_POD_POLICIES[0]
VOLCANO_GROUP_PREFIX = "podgroup-"


def job_name_problem(name: str, kind: str) -> str | None:
    """Why `name` may not name an object of `kind`, in one line; None where it may (any name of a kind
    that is no Kubeflow job: a serving Deployment's group is Volcano's `podgroup-<UID>`, never its name)."""
    if kind not in KUBEFLOW_JOB_KINDS:
        return None
    if name.startswith(VOLCANO_GROUP_PREFIX):
        return f"a Kubeflow job's name may not start with {VOLCANO_GROUP_PREFIX!r} (Volcano's PodGroup names)"
    if kind in JOB_NAME_PREFIXES:
        prefix = JOB_NAME_PREFIXES[kind]
        return None if name.startswith(prefix) else f"a {kind}'s name starts with {prefix!r} (its kind's prefix)"
    taken = next((k for k, prefix in JOB_NAME_PREFIXES.items() if name.startswith(prefix)), None)
    if taken:
        return f"a {kind}'s name may not start with {JOB_NAME_PREFIXES[taken]!r} (the prefix of {taken} names)"
    return None


# On what `higgsfield jobs render -f JOB.yaml` renders: `jobs cancel` deletes a serving job's Service only with it.
JOB_FILE_LABEL = "higgsfield.io/job-file"
# Training progress: each PyTorch job pod serves its ranks' progress on this named container port
# (images/training/progress.py), which Prometheus scrapes; the job's name is the operator's pod label
# (JOB_NAME_LABEL above).
PROGRESS_PORT_NAME = "progress"
PROGRESS_PORT = 9464
RECHECK_REASON = "NodeRecheckRequested"  # the Event (in `default`) that sends a node back to the health gate

# --- namespaces ---------------------------------------------------------------------------------
KUBE_SYSTEM = "kube-system"
HEALTH_NAMESPACE = "higgsfield-health"  # the health gate's

# --- AWS and GitHub -----------------------------------------------------------------------------
CLUSTER_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
GITHUB_OIDC_HOST = "token.actions.githubusercontent.com"

# Environment variables the NVIDIA container runtime reads to pick devices (EnvVarNvidiaVisibleDevices,
# ...DriverCapabilities, ...MigConfigDevices, ...MigMonitorDevices, ...ImexChannels in NVIDIA/
# nvidia-container-toolkit:internal/config/image/envvars.go@v1.20.0). A team container may not set
# them (value or valueFrom). envFrom and the image's own ENV (every CUDA base image sets
# NVIDIA_VISIBLE_DEVICES=all) are out of admission's sight: the GPU nodes' toolkit ignores the
# variable in unprivileged containers (components/gpu_pools.py), which is what closes those.
GPU_DEVICE_ENV = (
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "NVIDIA_MIG_CONFIG_DEVICES",
    "NVIDIA_MIG_MONITOR_DEVICES",
    "NVIDIA_IMEX_CHANNELS",
)

# The pre-flight's switch (images/training/preflight.py): the platform renders `run` in front of a job's
# command, and a team's job file may set `skip` in its env for one job (infra/offline/team_job.py).
PREFLIGHT_SWITCH = "HIGGSFIELD_PREFLIGHT"
PREFLIGHT_SWITCH_VALUES = ("run", "skip")

# --- resource types the reports and the policy pack select on -----------------------------------
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"

# The Kubernetes group of the CI preview role (its EKS access entry names it): what it may read is
# granted to this group (components/delivery.py PREVIEW_READS; ConfigMaps, Services and workloads per namespace,
# components/kubernetes_objects.py preview_reads; the program's own objects of the kinds teams make too, by
# name, preview_gets).
PREVIEW_GROUP = "higgsfield:preview"
