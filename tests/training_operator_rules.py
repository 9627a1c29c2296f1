"""The Kubeflow Training Operator's restart and failure rules, written out so tests can replay node
drains and losses against a rendered job, read at kubeflow/trainer@v1.9.4:

- `pod_restart_policy` (pkg/core/pod.go SetRestartPolicy): a replica's ExitCode becomes the pod's
  restartPolicy Never; OnFailure and Always pass through, so the kubelet restarts the container in
  place and its restartCount grows.
- `reconcile` (pkg/controller.v1/common/pod.go ReconcilePods): a missing pod is created afresh; a
  Failed pod is deleted (to be recreated) under OnFailure, Always, or ExitCode with a retryable
  code - `exit_code >= 128` (pkg/util/train/train_util.go IsRetryableExitCode) - and under ExitCode
  with a code below 128 the job gets the Failed condition.
- `past_backoff_limit` (pkg/core/job.go PastBackoffLimit): the restartCounts of the containers of
  *running* pods of replicas with OnFailure, Always or ExitCode, summed over the job, reaching
  backoffLimit fail the job (a limit of 0: any restart). The other test in ReconcileJobs
  (pkg/controller.v1/common/job.go, `exceedsBackoffLimit`) compares the work queue's requeues + 1
  with the limit; the controllers' queue is util.FakeWorkQueue, whose NumRequeues is always 0
  (pkg/common/util/fake_workqueue.go), so it fails a job only with backoffLimit 0 and a new failure.
- `fails_on_a_failed_pod` (the per-kind UpdateJobStatus): an XGBoostJob whose replica has a Failed
  pod is Failed unless that replica's restartPolicy is ExitCode (pkg/controller.v1/xgboost/
  xgboostjob_controller.go `if failed > 0`); a TFJob or PyTorchJob restarts (the Restarting
  condition that ReconcilePods set when it deleted the pod). MPIJobs are not modelled.
- `node_shuts_down`: the kubelet's graceful node shutdown ends every pod of the node with phase
  Failed, reason Terminated, whatever its restartPolicy (kubernetes/website:content/en/docs/
  concepts/cluster-administration/node-shutdown.md: "marked as shutdown", "Reason: Terminated").
  The EKS AL2023 AMI turns it on from Kubernetes 1.34 with shutdownGracePeriod 2m30s, 30 s of it
  for critical pods (withVersionToggles, awslabs/amazon-eks-ami:nodeadm/internal/kubelet/config.go
  @v20260724): a reboot, a spot reclaim or an instance retirement that no drain came before.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def retryable(exit_code: int) -> bool:
    return exit_code >= 128


def pod_restart_policy(replica_policy: str) -> str:
    return "Never" if replica_policy == "ExitCode" else replica_policy


@dataclass
class Pod:
    replica: str
    index: int
    policy: str  # the replica's restartPolicy
    phase: str = "Running"
    restarts: int = 0
    exit_code: int | None = None


@dataclass
class Job:
    """A job's pods, one per replica index, and whether it has failed."""

    backoff_limit: int | None
    kind: str
    policies: dict[str, str]  # replica type -> its restartPolicy
    expected: set[tuple[str, int]]  # (replica type, index) of every pod the job should have
    pods: dict[tuple[str, int], Pod] = field(default_factory=dict)
    failed: str | None = None  # why the job failed, once it has
    recreated: int = 0

    @classmethod
    def running(cls, job: dict) -> Job:
        """The job with every pod running, as the operator created them."""
        spec, kind = job["spec"], job["kind"]
        replicas = next(v for k, v in spec.items() if k.endswith("ReplicaSpecs"))
        expected = {(name, i) for name, r in replicas.items() for i in range(r.get("replicas", 1))}
        policies = {name: r["restartPolicy"] for name, r in replicas.items()}
        pods = {key: Pod(key[0], key[1], policies[key[0]]) for key in expected}
        return cls(spec["runPolicy"].get("backoffLimit"), kind, policies, expected, pods)

    def container_exits(self, key: tuple[str, int], code: int) -> None:
        """The pod's main container ends with `code`: the kubelet restarts it in place or the pod
        ends (restartPolicy Never; OnFailure also ends on 0)."""
        pod = self.pods[key]
        policy = pod_restart_policy(pod.policy)
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            pod.restarts += 1
        else:
            pod.phase, pod.exit_code = ("Succeeded" if code == 0 else "Failed"), code

    def node_shuts_down(self, key: tuple[str, int], code: int) -> None:
        """The node of pod `key` shuts down with no drain before: the kubelet stops the container
        (SIGTERM; `code` is what it exits with) and marks the pod Failed, whatever its policy."""
        pod = self.pods[key]
        pod.phase, pod.exit_code = "Failed", code

    def fails_on_a_failed_pod(self, pod: Pod) -> bool:
        return self.kind == "XGBoostJob" and pod.policy != "ExitCode"

    def pod_deleted(self, key: tuple[str, int]) -> None:
        """An eviction (a drain) or the pod garbage collector (a lost node) removes the pod."""
        del self.pods[key]

    def reconcile(self) -> None:
        """One pass of the operator over the job."""
        if self.failed:
            return
        for key, pod in list(self.pods.items()):
            if pod.phase != "Failed":
                continue
            if self.fails_on_a_failed_pod(pod):
                self.failed = f"{pod.replica} {pod.index} Failed under restartPolicy {pod.policy}"
                return
            if pod.policy in ("OnFailure", "Always") or (pod.policy == "ExitCode" and retryable(pod.exit_code or 0)):
                del self.pods[key]
            elif pod.policy == "ExitCode":
                self.failed = f"{pod.replica} {pod.index} exited {pod.exit_code}, not retryable"
                return
        if self.past_backoff_limit():
            self.failed = "reached the backoff limit"
            return
        for key in sorted(self.expected - set(self.pods)):
            self.pods[key] = Pod(key[0], key[1], self.policies[key[0]])
            self.recreated += 1

    def past_backoff_limit(self) -> bool:
        if self.backoff_limit is None:
            return False
        counted = sum(
            p.restarts
            for p in self.pods.values()
            if p.phase == "Running" and p.policy in ("OnFailure", "Always", "ExitCode")
        )
        return counted > 0 if self.backoff_limit == 0 else counted >= self.backoff_limit
