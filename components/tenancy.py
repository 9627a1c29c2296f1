"""What a team namespace enforces, as plain manifests: the admission policy, the namespace's
Pod Security and Volcano labels, and the NetworkPolicies. Pure functions, so tests evaluate the
CEL on sample objects and validate every object against the Kubernetes schema.

Upstream contracts (read at the pinned refs):
- kubeflow.org/v1 jobs: `spec.runPolicy.schedulingPolicy.{queue,priorityClass}` and
  `spec.<kind>ReplicaSpecs.<type>.template` (kubeflow/trainer:manifests/base/crds/
  kubeflow.org_{pytorch,tf,mpi,xgboost,jax,paddle}jobs.yaml@v1.9.4). The operator copies queue and
  priorityClass onto the Volcano PodGroup only, never onto the pods (kubeflow/trainer:
  pkg/controller.v1/common/job.go@v1.9.4), which is why the PriorityClass-scoped quotas alone
  never stopped a job: the policy checks the job, the PodGroup and the pods.
- Volcano PodGroup `spec.queue`, `spec.priorityClassName` (volcano-sh/volcano:installer/helm/chart/
  volcano/crd/bases/scheduling.volcano.sh_podgroups.yaml@v1.15.1); pods name a queue with the
  annotation `scheduling.volcano.sh/queue-name` or `volcano.sh/queue-name` (label or annotation)
  (volcano-sh/apis:pkg/apis/scheduling/v1beta1/labels.go); a PodGroup created in queue `default`
  is moved to the queue its namespace's `scheduling.volcano.sh/queue-name` annotation names
  (volcano-sh/volcano:pkg/webhooks/admission/podgroups/mutate/mutate_podgroup.go@v1.15.1).
- ValidatingAdmissionPolicy/Binding, admissionregistration.k8s.io/v1 (GA in Kubernetes 1.30).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

TEAM_LABEL = "higgsfield.io/team"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server, immutable
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
QUEUE_KEY = "volcano.sh/queue-name"
SCHEDULER = "volcano"
# Pod Security Admission: `baseline` is enforced, `restricted` warned and audited. GPU and EFA
# jobs need no privilege (the device plugins hand /dev/nvidia* and /dev/infiniband/uverbs* to the
# container; no hostPath, no capability: AWS's EFA samples run with no securityContext at all,
# aws-samples/awsome-distributed-training:micro-benchmarks/nccl-tests/kubernetes/nccl-tests.yaml
# and 3.test_cases/pytorch/FSDP/kubernetes/llama3_1_8b-fsdp.yaml@7217859f, whose hostPath
# /dev/shm is an emptyDir of medium Memory here), so our own pods meet `restricted`. It is not enforced
# because the Training Operator injects a `kubectl-delivery` init container into every MPIJob
# launcher without allowPrivilegeEscalation/capabilities settings (kubeflow/trainer:pkg/
# controller.v1/mpi/mpijob_controller.go@v1.9.4), which `restricted` rejects. The admission policy
# adds what matters across teams on top of `baseline`: the team's UID/GID, no added capabilities,
# no volume types beyond the safe ones.
PSA_ENFORCE, PSA_WARN = "baseline", "restricted"
JOB_KINDS = {
    "PyTorchJob": "pytorchjobs", "TFJob": "tfjobs", "MPIJob": "mpijobs",
    "XGBoostJob": "xgboostjobs", "JAXJob": "jaxjobs", "PaddleJob": "paddlejobs",
}
REPLICA_SPECS = ("pytorchReplicaSpecs", "tfReplicaSpecs", "mpiReplicaSpecs", "xgbReplicaSpecs", "jaxReplicaSpecs", "paddleReplicaSpecs")
# Volume types a team pod may use: none reaches the node or mounts storage the platform did not
# bind to the namespace (no hostPath, no inline csi: a csi volume could name the file system root).
SAFE_VOLUMES = ("configMap", "secret", "emptyDir", "persistentVolumeClaim", "projected", "downwardAPI")
DNS = {"namespace": "kube-system", "pod": {"k8s-app": "kube-dns"}}
# Training Operator v1 labels the MPIJob launcher (it reaches the API server: kubectl exec).
LAUNCHER = {"training.kubeflow.org/replica-type": "launcher"}


@dataclass(frozen=True)
class TeamRules:
    """What one team may use."""

    name: str
    queue: str
    priority_classes: tuple[str, ...]  # every class the team may name, the platform's default included
    uid: int
    serving_classes: tuple[str, ...] = ()  # those of them that preempt (docs/workload-classes.md)

    @property
    def gid(self) -> int:
        return self.uid


def _list(values: Sequence[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _field(obj: str, *path: str) -> str:
    """`has()` guards for a nested optional field: `has(a.b) && has(a.b.c)`."""
    return "(" + " && ".join(f"has({obj}.{'.'.join(path[:i + 1])})" for i in range(len(path))) + ")"


def policy_name(team: str) -> str:
    return f"higgsfield-team-{team}"


def cel_variables() -> list[dict]:
    """The pod templates of whatever is admitted: the pod itself, or every replica of a job."""
    replicas = " + ".join(
        f"(has(object.spec.{key}) ? object.spec.{key}.map(r, object.spec.{key}[r].template) : [])" for key in REPLICA_SPECS
    )
    return [
        {"name": "templates", "expression": f"object.kind == 'Pod' ? [object] : (object.kind == 'PodGroup' ? [] : {replicas})"},
        {"name": "specs", "expression": "variables.templates.filter(t, has(t.spec)).map(t, t.spec)"},
        {"name": "metas", "expression": "variables.templates.filter(t, has(t.metadata)).map(t, t.metadata)"},
        {"name": "containers", "expression": "variables.specs.map(s, (has(s.containers) ? s.containers : []) + (has(s.initContainers) ? s.initContainers : []) + (has(s.ephemeralContainers) ? s.ephemeralContainers : []))"},
    ]


def cel_validations(team: TeamRules) -> list[dict]:
    """Each rule: a CEL expression that is true for an allowed object, and the message shown."""
    queues, classes, uid, gid = _list([team.queue]), _list(team.priority_classes), team.uid, team.gid
    serving = _list(team.serving_classes)
    sched = "object.spec.runPolicy.schedulingPolicy"
    is_job = f"object.kind in {_list(list(JOB_KINDS))}"
    no_container_runs_as_other = (
        "variables.containers.all(cs, cs.all(c, !has(c.securityContext) || ("
        f"(!has(c.securityContext.runAsUser) || c.securityContext.runAsUser == {uid}) && "
        f"(!has(c.securityContext.runAsGroup) || c.securityContext.runAsGroup == {gid}))))"
    )
    return [
        {
            "expression": f"!({is_job}) || ({_field('object', 'spec', 'runPolicy', 'schedulingPolicy', 'queue')} && {sched}.queue in {queues})",
            "message": f"team {team.name} submits to queue {team.queue}: set spec.runPolicy.schedulingPolicy.queue: {team.queue}",
            "reason": "Forbidden",
        },
        {
            "expression": f"!({is_job}) || !{_field('object', 'spec', 'runPolicy', 'schedulingPolicy', 'priorityClass')} || {sched}.priorityClass in {classes}",
            "message": f"team {team.name} may use priority classes {', '.join(team.priority_classes)} (spec.runPolicy.schedulingPolicy.priorityClass)",
            "reason": "Forbidden",
        },
        {
            "expression": f"object.kind != 'PodGroup' || (has(object.spec.queue) && object.spec.queue in {queues})",
            "message": f"team {team.name}'s PodGroups go to queue {team.queue}",
            "reason": "Forbidden",
        },
        {
            "expression": f"object.kind != 'PodGroup' || !has(object.spec.priorityClassName) || object.spec.priorityClassName in {classes}",
            "message": f"team {team.name}'s PodGroups may use priority classes {', '.join(team.priority_classes)}",
            "reason": "Forbidden",
        },
        {
            "expression": f"variables.specs.all(s, !has(s.priorityClassName) || s.priorityClassName in {classes})",
            "message": f"team {team.name}'s pods may use priority classes {', '.join(team.priority_classes)}",
            "reason": "Forbidden",
        },
        {
            "expression": (
                f"variables.metas.all(m, (!has(m.annotations) || ((!('{QUEUE_ANNOTATION}' in m.annotations) || m.annotations['{QUEUE_ANNOTATION}'] in {queues}) && "
                f"(!('{QUEUE_KEY}' in m.annotations) || m.annotations['{QUEUE_KEY}'] in {queues}))) && "
                f"(!has(m.labels) || !('{QUEUE_KEY}' in m.labels) || m.labels['{QUEUE_KEY}'] in {queues}))"
            ),
            "message": f"team {team.name}'s pods may name only queue {team.queue}",
            "reason": "Forbidden",
        },
        {
            "expression": (
                "variables.specs.all(s, has(s.securityContext) && "
                f"has(s.securityContext.runAsUser) && s.securityContext.runAsUser == {uid} && "
                f"has(s.securityContext.runAsGroup) && s.securityContext.runAsGroup == {gid} && "
                f"has(s.securityContext.fsGroup) && s.securityContext.fsGroup == {gid} && "
                f"(!has(s.securityContext.supplementalGroups) || s.securityContext.supplementalGroups.all(g, g == {gid})))"
            ),
            "message": f"team {team.name}'s pods run as UID {uid} and GID {gid}: set securityContext runAsUser: {uid}, runAsGroup: {gid}, fsGroup: {gid} (no other supplementalGroups)",
            "reason": "Forbidden",
        },
        {
            "expression": no_container_runs_as_other,
            "message": f"team {team.name}'s containers run as UID {uid} and GID {gid} (remove the container's runAsUser/runAsGroup, or set them to {uid})",
            "reason": "Forbidden",
        },
        {
            "expression": (
                "variables.containers.all(cs, cs.all(c, !has(c.securityContext) || ("
                "(!has(c.securityContext.privileged) || c.securityContext.privileged == false) && "
                "(!has(c.securityContext.capabilities) || !has(c.securityContext.capabilities.add) || size(c.securityContext.capabilities.add) == 0))))"
            ),
            "message": "no privileged containers and no added capabilities: GPUs and EFA come from the device plugins (resources nvidia.com/gpu, vpc.amazonaws.com/efa)",
            "reason": "Forbidden",
        },
        {
            "expression": "variables.specs.all(s, (!has(s.hostNetwork) || s.hostNetwork == false) && (!has(s.hostPID) || s.hostPID == false) && (!has(s.hostIPC) || s.hostIPC == false))",
            "message": "no host network, PID or IPC namespace",
            "reason": "Forbidden",
        },
        {
            "expression": f"variables.specs.all(s, !has(s.volumes) || s.volumes.all(v, {' || '.join(f'has(v.{t})' for t in SAFE_VOLUMES)}))",
            "message": f"volumes may be {', '.join(SAFE_VOLUMES)}: no hostPath, no inline csi (storage comes from the namespace's claims)",
            "reason": "Forbidden",
        },
        {
            # A serving class preempts. Volcano lets it take only what a gang can spare (infra/preemption.py);
            # kube-scheduler would take any lower-priority pod, gangs' minimums included.
            "expression": (
                f"object.kind != 'Pod' || variables.specs.all(s, !has(s.priorityClassName) || !(s.priorityClassName in {serving}) || "
                f"(has(s.schedulerName) && s.schedulerName == '{SCHEDULER}'))"
            ),
            "message": f"pods of a serving class ({', '.join(team.serving_classes) or 'none'}) are scheduled by {SCHEDULER}: set schedulerName: {SCHEDULER}",
            "reason": "Forbidden",
        },
        {
            # Training never preempts: a job's pods and PodGroup may not carry a class that does.
            "expression": (
                f"!({is_job}) || ((!{_field('object', 'spec', 'runPolicy', 'schedulingPolicy', 'priorityClass')} || !({sched}.priorityClass in {serving})) && "
                f"variables.specs.all(s, !has(s.priorityClassName) || !(s.priorityClassName in {serving})))"
            ),
            "message": f"training jobs never preempt: a Kubeflow job may not use a serving class ({', '.join(team.serving_classes) or 'none'}); serve from a Deployment",
            "reason": "Forbidden",
        },
        {
            "expression": (
                "object.kind != 'Pod' || variables.specs.all(s, (has(s.schedulerName) && s.schedulerName == '" + SCHEDULER + "') || "
                "(has(s.containers) ? s.containers : []).all(c, !has(c.resources) || "
                "((!has(c.resources.limits) || !('nvidia.com/gpu' in c.resources.limits)) && (!has(c.resources.requests) || !('nvidia.com/gpu' in c.resources.requests)))))"
            ),
            "message": f"GPU pods are scheduled by {SCHEDULER} (its queues and gangs): set schedulerName: {SCHEDULER}, or submit a Kubeflow job (the operator sets it)",
            "reason": "Forbidden",
        },
    ]


def admission_policy(team: TeamRules) -> dict:
    """The ValidatingAdmissionPolicy of one team: its queue, classes and identity, on the
    Kubeflow jobs, Volcano PodGroups and pods of its namespace (the binding selects it)."""
    rules = [
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE", "UPDATE"]},
        {"apiGroups": ["kubeflow.org"], "apiVersions": ["v1"], "resources": sorted(JOB_KINDS.values()), "operations": ["CREATE", "UPDATE"]},
        {"apiGroups": ["scheduling.volcano.sh"], "apiVersions": ["v1beta1"], "resources": ["podgroups"], "operations": ["CREATE", "UPDATE"]},
    ]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy_name(team.name), "labels": {TEAM_LABEL: team.name}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": rules},
            "variables": cel_variables(),
            "validations": cel_validations(team),
        },
    }


def admission_binding(team: TeamRules) -> dict:
    """Binds the team's policy to its namespace only (by the label the API server sets)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy_name(team.name), "labels": {TEAM_LABEL: team.name}},
        "spec": {
            "policyName": policy_name(team.name),
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: team.name}}},
        },
    }


def namespace(team: TeamRules, kubernetes_version: str) -> dict:
    """The team's namespace: Pod Security levels pinned to the cluster's minor, and the queue
    Volcano moves the team's PodGroups to when they name none."""
    version = f"v{kubernetes_version}"
    labels = {TEAM_LABEL: team.name}
    for mode, level in (("enforce", PSA_ENFORCE), ("warn", PSA_WARN), ("audit", PSA_WARN)):
        labels[f"pod-security.kubernetes.io/{mode}"] = level
        labels[f"pod-security.kubernetes.io/{mode}-version"] = version
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team.name, "labels": labels, "annotations": {QUEUE_ANNOTATION: team.queue}}}


def default_service_account(team: str) -> dict:
    """Pods that name no service account get no API token (the MPIJob launcher has its own)."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": team}, "automountServiceAccountToken": False}


def _netpol(team: str, name: str, spec: dict) -> dict:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": name, "namespace": team, "labels": {TEAM_LABEL: team}}, "spec": spec}


def network_policies(team: str, *, monitoring_namespace: str, api_server_cidr: str) -> list[dict]:
    """Default deny in and out, then what jobs need: their own namespace (NCCL bootstrap, c10d
    rendezvous, MPI), DNS, the metrics scrape from the monitoring namespace, and the API server
    for MPIJob launchers (kubectl exec into the workers). Lustre is not here: the file system is
    mounted by the node's kernel (the CSI node plugin runs on the host network), so pod policies
    never see its traffic; EFA traffic bypasses the kernel and is limited by the EFA security group."""
    own = {"podSelector": {}}
    ns = lambda name: {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: name}}}  # noqa: E731
    dns = {**ns(DNS["namespace"]), "podSelector": {"matchLabels": DNS["pod"]}}
    return [
        _netpol(team, "default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        _netpol(team, "allow-own-namespace", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [{"from": [own]}], "egress": [{"to": [own]}]}),
        _netpol(team, "allow-dns", {
            "podSelector": {}, "policyTypes": ["Egress"],
            "egress": [{"to": [dns], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}],
        }),
        _netpol(team, "allow-metrics-scrape", {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [ns(monitoring_namespace)]}]}),
        _netpol(team, "allow-launcher-to-api-server", {
            "podSelector": {"matchLabels": LAUNCHER}, "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": api_server_cidr}}], "ports": [{"protocol": "TCP", "port": 443}]}],
        }),
    ]
