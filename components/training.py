"""The training controller and the batch scheduler: gang, elastic and differential scheduling.

Gang: the Training Operator creates a Volcano PodGroup per job (minMember = all replicas, or
master + minReplicas for elastic jobs) and Volcano's `gang` plugin binds all of them or none.
Differential: no `reclaim` action and queues not reclaimable (nothing crosses a queue), drf and
proportion neither preemptable nor reclaimable, every training and evaluation PriorityClass
`preemptionPolicy: Never` and the platform's default class too (pods naming none) - so a training
job never evicts anything, while `priority` orders the jobs still waiting. The one exception is the
serving class (docs/workload-classes.md): `preempt` lets a serving pod take, within its queue, what
the `gang` plugin offers - only pods of a job above its minAvailable - and evaluation pods, lowest
priority first. `higgsfield check` proves it from this configuration (infra/offline/preemption.py).
Demand only from work that can run (components/demand.py, docs/design/autoscaler-demand.md):
the `enqueue` action keeps a gang's PodGroup Pending - so the operator creates none of its pods
and the Cluster Autoscaler sees nothing - until its queue can hold the whole gang; each queue
guarantees its capability, so that holds with the pools at zero (volcano-sh/volcano#3910), and
`allocate` then binds the gang all-or-nothing once the nodes are up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.charts import helm_release
from components.cpu_nodes import SYSTEM_LABELS, SYSTEM_TOLERATION
from components.demand import queue_spec
from components.kubernetes_objects import KubernetesObject, KubernetesPatch, preview_reads
from infra.config import CPU_SERVICE_PRIORITY_CLASS, DEFAULT_PRIORITY_CLASS, GpuPool, PriorityClassSpec, Queue
from infra.core import versions
from infra.core.names import HOSTNAME_LABEL, WORKLOAD_LABEL
from infra.core.versions import Chart

VOLCANO_NAMESPACE = "volcano-system"
# Volcano's scheduler creates the queue `default` at start, reclaimable, and jobs that name no queue
# land there (components/cluster_created.py cites the code). The platform takes it over with a
# Server-Side Apply patch (never a create: the scheduler may have made it first), forcing the
# scheduler's fields: never reclaimable, and no GPUs, so nothing runs outside a team's queue. Config
# may not use the name.
DEFAULT_QUEUE = "default"
# Volcano's admission webhooks, as the chart's `custom.enabled_admissions` lists them: the chart's
# default (values.yaml@v1.15.1) plus `/podgroups/mutate`, which moves a PodGroup created in queue
# `default` to the queue its namespace's `scheduling.volcano.sh/queue-name` annotation names
# (createPodGroupPatch, pkg/webhooks/admission/podgroups/mutate/mutate_podgroup.go@v1.15.1). With the
# path listed the chart renders the MutatingWebhookConfiguration `volcano-admission-service-podgroups-
# mutate` (templates/webhooks.yaml) and grants the admission service `get` on namespaces
# (templates/admission.yaml), both keyed on `regexMatch "/podgroups/mutate"`. PodGroups reach it with
# queue `default` whenever their creator names none: the operator sets "default" itself
# (kubeflow/trainer:pkg/controller.v1/common/job.go@v1.9.4), the PodGroup CRD defaults spec.queue to
# "default" (crd/bases/scheduling.volcano.sh_podgroups.yaml@v1.15.1) for those Volcano's controller
# makes for plain pods.
VOLCANO_CHART_ADMISSIONS = (
    "/jobs/mutate",
    "/jobs/validate",
    "/podgroups/validate",
    "/queues/mutate",
    "/queues/validate",
    "/hypernodes/validate",
    "/cronjobs/validate",
)
VOLCANO_ADMISSIONS = (*VOLCANO_CHART_ADMISSIONS, "/podgroups/mutate")
KUSTOMIZATION = Path(__file__).parent / "kustomize" / "training-operator"

# Gangs placed by network topology. EKS labels each node with its place in the AWS network, layer 1
# the top (broadest) to layer 3 the bottom for most instance types, nodes sharing a layer-3 value
# being physically closest; types with four layers add layer 4 below it (docs.aws.amazon.com/eks/
# latest/userguide/ml-workload-topology.html, "The network topology labels"). Volcano's controller
# turns node labels into HyperNodes from a list written top-down and ending with the node's own
# label, `kubernetes.io/hostname`: it drops that last entry and reverses the rest, so the label just
# above the hostname is tier 1 (its members the nodes) and each label above it a tier higher (its
# members the tier below); a node without a label stops there (parseCfg and generateHyperNodeInfo,
# volcano-sh/volcano:pkg/controllers/hypernode/discovery/label/label.go@v1.15.1; the user guide's
# "the bottommost label is kubernetes.io/hostname", docs/user-guide/
# how_to_use_hypernode_auto_discovery.md, same ref). Layers 1 to 3 cover every labelled type
# (layer 4, on some types only, would leave the others out). The chart writes
# `custom.controller_config_override` into the controller's ConfigMap with toYaml
# (installer/helm/chart/volcano/templates/controllers.yaml@v1.15.1): a mapping, not a string.
EKS_TOPOLOGY_LABELS = (*(f"topology.k8s.aws/network-node-layer-{n}" for n in (1, 2, 3)), HOSTNAME_LABEL)
HYPERNODE_DISCOVERY = {
    "networkTopologyDiscovery": [
        {
            "source": "label",
            "enabled": True,
            "config": {"networkTopologyTypes": {"eks": [{"nodeLabel": label} for label in EKS_TOPOLOGY_LABELS]}},
        }
    ]
}
# The scheduler's network-topology-aware plugin scores nodes for pods of jobs with no network topology
# of their own by how full their HyperNodes are, tier by tier (batchNodeOrderFnForNormalPods,
# pkg/scheduler/plugins/network-topology-aware/network_topology_aware.go@v1.15.1; on by default,
# `hypernode.binpack.normal-pod.enable`, tiers fading by 0.8): a gang's pods gather in the
# HyperNode its first pods filled, so an EFA gang lands on the nearest nodes the fabric offers - on
# reservations and Capacity Blocks too, which run without a placement group. Only this soft form
# reaches a PyTorchJob: the Training Operator writes the PodGroup's spec whole, with no
# networkTopology (kubeflow/trainer:pkg/controller.v1/common/job.go@v1.9.4, lines 292-297), and
# Volcano reads the volcano.sh/network-topology-* pod annotations only for pods without a PodGroup
# (parseNetworkTopologyFromPod, pkg/controllers/podgroup/pg_controller_handler.go@v1.15.1), so a
# hard tier limit is for Volcano Jobs. The GPUs weigh in the packing; CPU and memory as by default.
NETWORK_TOPOLOGY_PLUGIN = {
    "name": "network-topology-aware",
    "arguments": {
        "hypernode.binpack.normal-pod.enable": True,
        "hypernode.binpack.normal-pod.fading": 0.8,
        "hypernode.binpack.resources": "nvidia.com/gpu",
        "hypernode.binpack.resources.nvidia.com/gpu": 10,
    },
}

# The actions and plugins of the Volcano scheduler, see the module docstring.
# `preempt` runs after `allocate` (actions run in the order listed: volcano-sh/volcano:pkg/scheduler/
# scheduler.go@v1.15.1 runOnce) and only for a pod whose preemptionPolicy is not Never (actions/preempt/
# preempt.go taskEligibleToPreempt) - the serving class alone - and only against pods of its own queue
# (preempt.go Execute: `job.Queue == preemptorJob.Queue`). Victims are what the plugins of the first
# tier that decides agree on (framework/session_plugins.go Preemptable): `gang` offers only pods of a
# job whose ready pods exceed its minAvailable (plugins/gang/gang.go preemptableFn), so it stays the
# last preemptable plugin of the only tier that has any (infra/offline/preemption.py says why).
SCHEDULER_CONFIG = {
    # enqueue first: PodGroups stay Pending until proportion's queue check admits the
    # whole gang (volcano-sh/volcano:pkg/scheduler/actions/enqueue/enqueue.go@v1.15.1); preempt after
    # allocate, for the serving class only (above)
    "actions": "enqueue, allocate, preempt, backfill",
    "tiers": [
        {
            "plugins": [
                {"name": "priority"},
                {"name": "conformance"},
                {"name": "gang", "enablePreemptable": True, "enableReclaimable": False},
            ]
        },
        {
            "plugins": [
                {"name": "drf", "enablePreemptable": False},
                {"name": "predicates"},
                {"name": "proportion", "enableReclaimable": False},
                {"name": "nodeorder"},
                {"name": "binpack"},
                NETWORK_TOPOLOGY_PLUGIN,
            ]
        },
    ],
}


def scheduler_config_yaml() -> str:
    return yaml.safe_dump(SCHEDULER_CONFIG, sort_keys=False)


_DESCRIPTIONS = {
    "training": "Higgsfield training priority {value}: orders queued jobs, never preempts; only what lies above a "
    "gang's minimum may be taken back, by serving",
    "serving": "Higgsfield serving priority {value}: may preempt, in its queue, evaluation pods and what lies above "
    "a training gang's minimum",
    "evaluation": "Higgsfield evaluation (scavenger) priority {value}: runs on idle capacity, never preempts, first "
    "to give it back",
}


def priority_classes(classes: Sequence[PriorityClassSpec]) -> list[dict]:
    """The stack's PriorityClasses, the platform's default for pods that name none, and its class of the teams'
    services without GPUs (infra/config/scheduler.py CPU_SERVICE_PRIORITY_CLASS).

    Only a serving class preempts (`PreemptLowerPriority`). The default class exists because the
    Priority admission plugin gives a pod without priorityClassName the globalDefault class's name,
    value and preemptionPolicy, or else preemptionPolicy PreemptLowerPriority (kubernetes/kubernetes:
    plugin/pkg/admission/priority/admission.go admitPod, getDefaultPriority) - and the Training
    Operator never puts a class on the pods (kubeflow/trainer:pkg/controller.v1/common/job.go@v1.9.4
    puts schedulingPolicy.priorityClass on the PodGroup only), so without it every training pod
    could preempt in Volcano (volcano-sh/volcano:pkg/scheduler/actions/preempt/preempt.go@v1.15.1
    taskEligibleToPreempt checks only the pod's preemptionPolicy)."""
    manifests = [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": DEFAULT_PRIORITY_CLASS, "labels": {WORKLOAD_LABEL: "default"}},
            "value": 0,
            "preemptionPolicy": "Never",
            "globalDefault": True,
            "description": "Higgsfield default for pods that name no class: priority 0 (Kubernetes' own default), "
            "never preempts",
        },
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": CPU_SERVICE_PRIORITY_CLASS, "labels": {WORKLOAD_LABEL: "cpu-service"}},
            "value": 0,
            "preemptionPolicy": "Never",
            "globalDefault": False,
            "description": "Higgsfield services without GPUs: a Deployment's pods on the teams' CPU nodes, in their "
            "team's cpu-services quota; priority 0, never preempts",
        },
    ]
    for cls in classes:
        manifests.append(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": cls.name, "labels": {WORKLOAD_LABEL: cls.workload}},
                "value": cls.value,
                "preemptionPolicy": "PreemptLowerPriority" if cls.workload == "serving" else "Never",
                "globalDefault": False,
                "description": _DESCRIPTIONS[cls.workload].format(value=cls.value),
            }
        )
    return manifests


@dataclass(frozen=True, kw_only=True)
class VolcanoArgs:
    chart: Chart
    queues: Sequence[Queue]
    priority_classes: Sequence[PriorityClassSpec]
    provider: pulumi.ProviderResource
    depends_on: Sequence[pulumi.Resource]
    pools: Sequence[GpuPool] = ()  # the queues' host dimensions are their GPUs' share of these nodes


class Volcano(pulumi.ComponentResource):
    """Volcano from its official chart on the system nodes, its scheduler configured for
    differential scheduling (only serving preempts, only above a gang's minimum), the queues (never
    reclaimable; each holds its GPUs' share of the pools' nodes in every dimension) and the PriorityClasses
    of the stack.

    Creates: the Helm release (with the PodGroup mutating webhook that applies a namespace's queue
    annotation), one Queue per configured queue, a Server-Side Apply patch of Volcano's own
    `default` queue (not reclaimable, no GPUs), one PriorityClass per class (labelled with its class
    of work; only serving preempts) and the platform's default class for pods that name none.
    Replaced when: a queue or class is renamed (a queue with jobs in it cannot be deleted).
    """

    def __init__(self, name: str, args: VolcanoArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:training:Volcano", name, None, opts)
        self.release = helm_release(
            name,
            args.chart,
            VOLCANO_NAMESPACE,
            {
                # Every Volcano image at the chart's own tag, explicit (values.yaml@v1.15.1 basic.image_tag_version),
                # from ghcr.io and pulled only when missing (infra/core/versions.py VOLCANO_IMAGE_REGISTRY).
                "basic": {
                    "image_tag_version": versions.VOLCANO_IMAGE_TAG,
                    "image_registry": versions.VOLCANO_IMAGE_REGISTRY,
                    **versions.VOLCANO_IMAGE_NAMES,
                    "image_pull_policy": versions.VOLCANO_IMAGE_PULL_POLICY,
                },
                "custom": {
                    "scheduler_config_override": scheduler_config_yaml(),
                    "controller_config_override": HYPERNODE_DISCOVERY,  # HyperNodes from EKS's topology labels
                    "default_ns": SYSTEM_LABELS,
                    "leader_elect_enable": True,
                    # scheduler, controllers, admission and its init Job take `custom.default_tolerations` unless a
                    # per-component key is set (templates/{scheduler,controllers,admission,admission-init}.yaml@v1.15.1)
                    "default_tolerations": [SYSTEM_TOLERATION],
                    # --enable-metrics on both, what the monitoring scrape jobs read (values.yaml@v1.15.1 has them on;
                    # kept explicit)
                    "scheduler_metrics_enable": True,
                    "controller_metrics_enable": True,
                    # The chart's own Prometheus/Grafana stay off: they run grafana/grafana:latest and an
                    # untagged prom/prometheus (templates/grafana.yaml, prometheus.yaml@v1.15.1).
                    "metrics_enable": False,
                    "enabled_admissions": ",".join(VOLCANO_ADMISSIONS),
                },
            },
            pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on)),
            create_namespace=True,
        )
        after_crds = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[self.release])

        def queue(queue_name: str, weight: int, gpus: int) -> dict:
            return {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": queue_name},
                "spec": queue_spec(
                    weight, gpus, args.pools
                ),  # capability = deserved = guarantee (components/demand.py)
            }

        KubernetesPatch(f"{name}-queue-{DEFAULT_QUEUE}", queue(DEFAULT_QUEUE, 1, 0), force=True, opts=after_crds)
        for q in args.queues:
            KubernetesObject(f"{name}-queue-{q.name}", queue(q.name, q.weight, q.gpu_capability), opts=after_crds)
        for manifest in priority_classes(args.priority_classes):
            KubernetesObject(
                f"{name}-priority-{manifest['metadata']['name']}",
                manifest,
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider),
            )
        self.register_outputs({"release": self.release.name})


@dataclass(frozen=True, kw_only=True)
class TrainingOperatorArgs:
    metrics_server: Chart
    provider: pulumi.ProviderResource
    depends_on: Sequence[pulumi.Resource]
    scheduler: pulumi.Resource  # the Volcano release: the operator checks its PodGroup CRD at start


class TrainingOperator(pulumi.ComponentResource):
    """The Kubeflow Training Operator v1 (PyTorchJob, TFJob, MPIJob, XGBoostJob, JAXJob,
    PaddleJob) from the upstream standalone overlay at a pinned ref, through our kustomization
    (components/kustomize/training-operator: gang scheduler volcano, leader election and the Role
    on its Lease that the upstream ClusterRole lacks, the init/delivery images it puts into team
    pods pinned, system nodes), and metrics-server for the HPA of elastic PyTorchJobs.

    Creates: the kustomize directory (fetched and built at deploy time, so nothing upstream is
    copied here), the CI preview's read of its Deployment, Service and RBAC (preview_reads), the
    metrics-server Helm release. Replaced when: never; upgrades are in place.
    """

    def __init__(self, name: str, args: TrainingOperatorArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:training:TrainingOperator", name, None, opts)
        in_cluster = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on))
        after_scheduler = pulumi.ResourceOptions(
            parent=self, provider=args.provider, depends_on=[*args.depends_on, args.scheduler]
        )
        # An absolute path: the provider resolves it whatever its working directory. `higgsfield
        # diff` ignores where the checkout lives when it compares two plans.
        self.manifests = k8s.kustomize.v2.Directory(f"{name}", directory=str(KUSTOMIZATION), opts=after_scheduler)
        # The overlay's Deployment, Service and ServiceAccount, in the namespace it creates (kubeflow/trainer:
        # manifests/base/deployment.yaml, service.yaml and rbac/service-account.yaml, overlays/standalone/
        # kustomization.yaml `namespace:`@v1.9.4), and our leader election's Role and RoleBinding there
        # (components/kustomize/training-operator): the kustomize Directory's own objects, which are no
        # KubernetesObject, so by kind (no team makes anything in this namespace).
        preview_reads(
            name,
            versions.TRAINING_OPERATOR_NAMESPACE,
            {
                "": ["serviceaccounts", "services"],
                "apps": ["deployments"],
                "rbac.authorization.k8s.io": ["rolebindings", "roles"],
            },
            pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[self.manifests]),
        )
        helm_release(
            f"{name}-metrics-server",
            args.metrics_server,
            "kube-system",
            {"nodeSelector": SYSTEM_LABELS, "tolerations": [SYSTEM_TOLERATION]},
            in_cluster,
        )  # values.yaml `tolerations`@metrics-server-helm-chart-3.13.0
        self.register_outputs({})
