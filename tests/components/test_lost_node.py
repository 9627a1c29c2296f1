"""A node of a running gang is lost (a hardware failure, a spot reclaim no drain came before): what the user
sees, played with the real programs. The ranks left on the other nodes are torn down by NCCL's watchdog and
their pods must end with a retryable code, so the operator recreates them and the job resumes from its
newest complete checkpoint; while no replacement node comes, the nodes of the survivors stand idle, and the
gang deadline gives them back within a bound, and queues the job again, which runs once capacity returns.

The cluster's controllers are played by hand, each step as the pinned upstream does it:
- the lost node's pod: the taint manager deletes it once its `unreachable` toleration (60 s in the rendered
  jobs) runs out, and with no kubelet to confirm it stays Terminating, phase Running, on its node, until
  the Node object goes and the pod garbage collector force-deletes it (gcOrphaned, kubernetes/kubernetes:
  pkg/controller/podgc/gc_controller.go, read through the code search);
- the operator: a Failed pod with a retryable exit code is deleted and a pod is created for every replica
  index that has none (ReconcilePods, kubeflow/trainer:pkg/controller.v1/common/pod.go@v1.9.4); an index
  whose pod is still Terminating has one, so it is not recreated until that pod is gone;
- Volcano: a task being deleted is Releasing, neither scheduled nor ready (getTaskStatus, volcano-sh/
  volcano:pkg/scheduler/api/helpers.go@v1.15.1), so a gang with fewer than minMember scheduled goes
  Pending and `enqueue` makes it Inqueue again as soon as its queue has room for it (getPodGroupPhase,
  pkg/scheduler/framework/session.go; actions/enqueue/enqueue.go, same ref); while some members still
  run, the gang plugin marks it unschedulable each session (OnSessionClose, plugins/gang/gang.go) and its
  phase is Unknown; `allocate` binds the waiting members only together with enough others to make
  minMember (JobReady), so three recreated pods never bind without a fourth node.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "examples"))
import checkpointing

# --- the survivors' exit code ----------------------------------------------------------------------------


def _pod_exit_when_a_worker(tmp_path, worker: str) -> int:
    """The rendered container's exit code (checkpointing.py's launcher in front of torchrun) when one local
    worker (`python checkpointing.py --rank-prefix python -c WORKER`, the rendered worker command) ends
    as `worker` makes it, and torchrun, as it does whenever a worker fails, then exits 1."""
    torchrun = tmp_path / "torchrun.py"
    torchrun.write_text(
        textwrap.dedent(f"""
        import os, subprocess, sys
        worker = [sys.executable, {str(ROOT / "examples" / "checkpointing.py")!r}, "--rank-prefix",
                  sys.executable, "-c", {worker!r}]
        subprocess.run(worker, env={{**os.environ, "LOCAL_RANK": "0", "RANK": "0"}})
        sys.exit(1)
    """)
    )
    return checkpointing.launch([sys.executable, str(torchrun)])


def test_a_survivor_torn_down_by_nccls_watchdog_exits_with_a_code_the_operator_retries(tmp_path):
    """A lost node gives the other ranks no Python exception: their next collective waits on the GPU until
    NCCL's watchdog times it out (300 s, infra/offline/jobs.py COLLECTIVE_TIMEOUT_S) or sees the peer's
    connection fail, and with TORCH_NCCL_ASYNC_ERROR_HANDLING=3 it rethrows in its own thread, which ends the
    process with SIGABRT ("To avoid data inconsistency, we are taking the entire process down", WorkNCCL::
    handleException, and the watchdog thread's rethrow in ncclCommWatchdog: pytorch/pytorch:torch/csrc/
    distributed/c10d/ProcessGroupNCCL.cpp, read through the code search). The pod must exit 128 or more, or
    the operator fails the whole job (ReconcilePods, IsRetryableExitCode, kubeflow/trainer:pkg/util/train/
    train_util.go@v1.9.4) instead of resuming it."""
    code = _pod_exit_when_a_worker(tmp_path, "import os; os.abort()")
    assert code == checkpointing.EXIT_TORN_DOWN >= 128


def test_a_survivors_bug_still_fails_the_job(tmp_path):
    assert _pod_exit_when_a_worker(tmp_path, "raise SystemExit(1)") == 1


def test_a_worker_that_segfaults_still_fails_the_job(tmp_path):
    """Only NCCL's teardown is a retry: a crash of the program itself stays a failure."""
    assert _pod_exit_when_a_worker(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)") == 1


def test_the_worker_wrapper_still_passes_a_signalled_workers_code_on(tmp_path):
    script = [sys.executable, str(ROOT / "examples" / "checkpointing.py"), "--rank-prefix", sys.executable, "-c"]
    done = subprocess.run([*script, "import os; os.abort()"], capture_output=True, env={"LOCAL_RANK": "0"})
    assert done.returncode == 134
