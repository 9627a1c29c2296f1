"""Objects the cluster creates by itself, and who creates them.

The platform never *creates* one of these: pulumi-kubernetes >= 4.29 refuses to create an object
that already exists (docs/design/cluster-created-objects.md), and whichever comes first the other fails. What the
platform wants of such an object it applies with a Server-Side Apply patch
(components/kubernetes_objects.KubernetesPatch): only the fields it sets, under its own field
manager, forced where the creator set the same field first.

Each entry names the code (owner/repo:path@ref) or the AWS page that decides that the object
exists. tests/components/test_cluster_created_objects.py walks every Kubernetes object in every shipped plan
against this table; docs/controllers.md explains each.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClusterCreated:
    """An object (kind, namespace, name; `None` namespace: any namespace, `""`: cluster-scoped)
    that `creator` makes, at `source`."""

    api_version: str
    kind: str
    namespace: str | None
    name: str
    creator: str
    source: str

    def matches(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        return (api_version, kind, name) == (self.api_version, self.kind, self.name) and self.namespace in (
            None,
            namespace,
        )


_K8S = "kubernetes/kubernetes"
CLUSTER_CREATED: tuple[ClusterCreated, ...] = (
    # kube-controller-manager's serviceaccounts controller: "the list of service accounts to ensure
    # exist in every namespace" is `default` (DefaultServiceAccountsControllerOptions); syncNamespace
    # creates it in every active namespace, and again whenever it is deleted (serviceAccountDeleted).
    ClusterCreated(
        "v1",
        "ServiceAccount",
        None,
        "default",
        "kube-controller-manager (serviceaccounts controller)",
        f"{_K8S}:pkg/controller/serviceaccount/serviceaccounts_controller.go@003e8629 "
        "(DefaultServiceAccountsControllerOptions, syncNamespace)",
    ),
    # kube-controller-manager's root-ca-cert-publisher writes the cluster CA into every namespace.
    ClusterCreated(
        "v1",
        "ConfigMap",
        None,
        "kube-root-ca.crt",
        "kube-controller-manager (root-ca-cert-publisher)",
        f"{_K8S}:pkg/controller/certificates/rootcacertpublisher/publisher.go@e0a566e7 (RootCACertConfigMapName)",
    ),
    # kube-apiserver's system namespaces controller creates the system namespaces every minute if missing.
    *(
        ClusterCreated(
            "v1",
            "Namespace",
            "",
            ns,
            "kube-apiserver (system namespaces controller)",
            f"{_K8S}:pkg/controlplane/controller/systemnamespaces/system_namespaces_controller.go@200f1257 "
            "(createNamespaceIfNeeded)",
        )
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease")
    ),
    # kube-apiserver's post-start hook adds the two system PriorityClasses (names reserved: config
    # rejects the system- prefix, infra/config/scheduler.py).
    *(
        ClusterCreated(
            "scheduling.k8s.io/v1",
            "PriorityClass",
            "",
            pc,
            "kube-apiserver (post-start hook scheduling/bootstrap-system-priority-classes)",
            f"{_K8S}:pkg/registry/scheduling/rest/storage_scheduling.go@db484662 (AddSystemPriorityClasses)",
        )
        for pc in ("system-cluster-critical", "system-node-critical")
    ),
    # The `kubernetes` Service in `default`, kept by kube-apiserver.
    ClusterCreated(
        "v1",
        "Service",
        "default",
        "kubernetes",
        "kube-apiserver (kubernetes service controller)",
        f"{_K8S}:pkg/controlplane/controller/kubernetesservice/controller.go@b0d609f0",
    ),
    # Volcano's scheduler creates `root` and the default queue (--default-queue, "default") at start,
    # the default one reclaimable (newDefaultAndRootQueue, called from newSchedulerCache).
    *(
        ClusterCreated(
            "scheduling.volcano.sh/v1beta1",
            "Queue",
            "",
            q,
            "Volcano scheduler (newSchedulerCache at start)",
            "volcano-sh/volcano:pkg/scheduler/cache/cache.go@v1.15.1 (newDefaultAndRootQueue; --default-queue in "
            "cmd/scheduler/app/options/options.go)",
        )
        for q in ("root", "default")
    ),
    # The Cluster Autoscaler writes its status ConfigMap (--status-config-map-name, in --namespace)
    # and takes its lease (leaderElectionConfiguration: ResourceName cluster-autoscaler).
    ClusterCreated(
        "v1",
        "ConfigMap",
        "kube-system",
        "cluster-autoscaler-status",
        "Cluster Autoscaler",
        "kubernetes/autoscaler:cluster-autoscaler/clusterstate/utils/status.go@cluster-autoscaler-1.35.2 "
        "(WriteStatusConfigMap)",
    ),
    ClusterCreated(
        "coordination.k8s.io/v1",
        "Lease",
        "kube-system",
        "cluster-autoscaler",
        "Cluster Autoscaler (leader election)",
        "kubernetes/autoscaler:cluster-autoscaler/main.go@cluster-autoscaler-1.35.2 (leaderElectionConfiguration)",
    ),
    # The Training Operator's lease (controller-runtime's leader election, --leader-election-id).
    ClusterCreated(
        "coordination.k8s.io/v1",
        "Lease",
        "kubeflow",
        "1ca428e5.training-operator.kubeflow.org",
        "Training Operator (leader election)",
        "kubeflow/trainer:cmd/training-operator.v1/main.go@v1.9.4 (--leader-election-id); "
        "kubernetes-sigs/controller-runtime:pkg/leaderelection/leader_election.go@v0.24.1",
    ),
    # EKS: the aws-auth ConfigMap exists only with authentication mode CONFIG_MAP or API_AND_CONFIG_MAP
    # (EKS writes node-role entries into it); this platform uses API (components/cluster.py). EKS has
    # also shipped clusters with a `gp2` StorageClass (pulumi/pulumi-eks#510); whether a new cluster
    # still gets one is unverified here (`kubectl get storageclass gp2`); the platform's is gp3-encrypted.
    ClusterCreated(
        "v1",
        "ConfigMap",
        "kube-system",
        "aws-auth",
        "EKS (managed node groups, CONFIG_MAP authentication modes)",
        "docs.aws.amazon.com/eks/latest/userguide/auth-configmap.html",
    ),
    ClusterCreated(
        "storage.k8s.io/v1",
        "StorageClass",
        "",
        "gp2",
        "EKS (some cluster versions)",
        "pulumi/pulumi-eks#510 (EKS clusters ship gp2); unverified for new clusters: kubectl get storageclass gp2",
    ),
)


def creator_of(api_version: str, kind: str, namespace: str, name: str) -> ClusterCreated | None:
    """Who creates this object, if the cluster does."""
    return next((c for c in CLUSTER_CREATED if c.matches(api_version, kind, namespace, name)), None)
