"""Round 21's attack on the paths beside the CPU-only quota: what keeps a GPU node from being emptied. The team
admission policy's CEL evaluated with cel-expr-python, as tests/security/test_tenancy.py does; the pods the Training
Operator and the Job controller make of a team's objects as tests/security/test_r20_operator_pods.py models them.

The team policy lets no pod without GPUs keep its node from being emptied: no bare pod on a GPU node (a pod a team
creates may name no controller), no do-not-disrupt or safe-to-evict "false" without a GPU (components/tenancy.py
node_share_validations). The Cluster Autoscaler has one more reason to keep a node: a pod whose controller is not a
kind it knows to replicate pods. `_cluster_autoscaler_may_evict` models that part of its scale-down drain rules at the
release the platform runs (kubernetes/autoscaler@cluster-autoscaler-1.35.2): the Default rules in order
(cluster-autoscaler/simulator/drainability/rules/rules.go), where a pod annotated safe-to-evict "true" is drained
(rules/safetoevict), and else a pod is blocked as "not replicated" unless it has a controller and, while
--skip-nodes-with-custom-controller-pods is on, that controller is a ReplicationController, Job, ReplicaSet or
StatefulSet (replicatedKind, rules/replicated/rule.go). The flag is on by default (config/flags/flags.go) and
neither the platform's extraArgs (components/autoscaler.py) nor the chart's values
(cluster-autoscaler/charts/cluster-autoscaler/values.yaml@cluster-autoscaler-chart-9.59.0) set it."""

from __future__ import annotations

from components import tenancy
from infra.core.names import DO_NOT_DISRUPT, LONGEST_POD_DEADLINE, SAFE_TO_EVICT
from tests.conftest import plan_of
from tests.security.test_r20_operator_pods import _as_the_operator_makes_it, _job_file, _rules
from tests.security.test_tenancy import denied_by

STACK = "prod"
CUSTOM_CONTROLLER_FLAG = "skip-nodes-with-custom-controller-pods"
# The controllers the Cluster Autoscaler counts as replicating their pods (replicatedKind, above).
REPLICATED_KINDS = ("ReplicationController", "Job", "ReplicaSet", "StatefulSet")


def _autoscaler_args() -> dict:
    """The Cluster Autoscaler's extraArgs in the prod plan."""
    release = next(
        r for r in plan_of(STACK).of_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "cluster-autoscaler"
    )
    return release.inputs["values"]["extraArgs"]


def _cluster_autoscaler_may_evict(pod: dict, args: dict) -> bool:
    """Whether the Cluster Autoscaler, run with `args`, may drain `pod` to remove its node, as far as the pod's
    owner and annotations decide (module docstring)."""
    meta = pod["metadata"]
    if (meta.get("annotations") or {}).get(SAFE_TO_EVICT) == "true":
        return True
    controller = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    if controller is None:
        return False
    return args.get(CUSTOM_CONTROLLER_FLAG, True) is False or controller["kind"] in REPLICATED_KINDS


def _a_replica_without_gpus(job: dict, replica: str) -> None:
    """Make `replica` of the rendered Kubeflow job `job` a pod without GPUs that runs for ever: a few millicores and
    MiB, the longest deadline (so the CPU-only quota counts it), its GPU toleration kept, no pool named and no pin of
    its own (the policy refuses do-not-disrupt without a GPU)."""
    specs = next(v for k, v in job["spec"].items() if k in tenancy.REPLICA_SPECS)
    template = specs[replica]["template"]
    template["metadata"]["annotations"].pop(DO_NOT_DISRUPT, None)
    spec = template["spec"]
    spec.pop("nodeSelector", None)
    spec["activeDeadlineSeconds"] = LONGEST_POD_DEADLINE
    for container in spec["containers"]:
        container["command"] = ["sleep", "infinity"]
        container["resources"] = {"requests": {"cpu": "10m", "memory": "16Mi"}}


def test_the_cluster_autoscaler_may_evict_a_jobs_pod_without_gpus():
    """The model's control: a batch Job's pod (the CPU-only work the policy's message points to) is replicated."""
    pod = {"kind": "Pod", "metadata": {"ownerReferences": [{"kind": "Job", "name": "prep", "controller": True}]}}
    assert _cluster_autoscaler_may_evict(pod, _autoscaler_args())


def test_the_cluster_autoscaler_may_not_evict_a_pod_without_an_owner():
    pod = {"kind": "Pod", "metadata": {}}
    assert not _cluster_autoscaler_may_evict(pod, _autoscaler_args())


def test_a_kubeflow_jobs_pod_without_gpus_keeps_no_gpu_node_from_the_cluster_autoscalers_scale_down():
    """The attack: a team's XGBoostJob whose Master asks 10m CPU and no GPU and sleeps for ever beside its GPU
    Workers. The job and the Master pod the operator makes of it are admitted; once the Workers finish, their node's
    GPUs are free, but the Cluster Autoscaler never removes the node while the Master runs (68 years at most).
    Closed: the job is refused, since a pod without GPUs runs on the teams' CPU nodes only, never on a GPU node;
    there such a pod keeps a CPU node at worst, within CPU-only work's room."""
    job = _job_file("xgboost")
    _a_replica_without_gpus(job, "Master")
    rules = _rules(job)
    pod = _as_the_operator_makes_it(job, "Master")
    refused = denied_by(job, rules) != [] or denied_by(pod, rules, user=tenancy.OPERATOR_USER) != []
    assert refused or _cluster_autoscaler_may_evict(pod, _autoscaler_args())
