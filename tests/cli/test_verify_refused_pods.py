"""`kube.refused-pods` reads each team namespace's events for a controller's pod create refused by a team's
ValidatingAdmissionPolicy or a quota: the only trace of a job that waits for ever. The cluster is the fake API server
seeded as a healthy prod cluster (tests/cli/test_verify_checks.py seed); each test writes the Warning events the
controllers record, their messages as the API server's errors read (the formats cited in infra/cli/verify/checks.py
next to REFUSED_POD_REASONS)."""

from __future__ import annotations

from tests.cli.test_verify_checks import (  # noqa: F401 (fixtures)
    cluster,
    ctx,
    one,
    plan,
)

ESCALATION = (
    "every container sets securityContext.allowPrivilegeEscalation: false (setuid binaries can't gain privileges)"
)
EPHEMERAL = (
    "pods on GPU nodes ask for cpu, memory, nvidia.com/gpu, vpc.amazonaws.com/efa, hugepages-2Mi only (what the "
    "team's queue and quota hold in its GPUs' share): no ephemeral-storage, hugepages-1Gi or other resource"
)


def _denied(pod: str, message: str, team: str = "vision") -> str:
    """The API server's error for a pod the team policy refused."""
    policy = f"higgsfield-team-{team}"
    return (
        f"pods \"{pod}\" is forbidden: ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied "
        f"request: {message}"
    )


def _event(name: str, kind: str, owner: str, reason: str, message: str, **fields) -> dict:
    """A core/v1 Event a controller's recorder writes on the object it reconciles (`owner`, of `kind`)."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "vision", "creationTimestamp": "2026-12-05T08:40:00Z"},
        "involvedObject": {"kind": kind, "name": owner, "namespace": "vision"},
        "type": "Warning",
        "reason": reason,
        "message": message,
        "count": 1,
        "firstTimestamp": "2026-12-05T08:40:00Z",
        "lastTimestamp": "2026-12-05T08:40:00Z",
        **fields,
    }


def test_no_refused_pod_in_the_events_passes_saying_how_far_back_they_go(ctx, cluster):
    cluster.put({**_event("a.1", "PyTorchJob", "ddp", "SuccessfulCreatePod", "Created pod: ddp-worker-0"),
                 "type": "Normal"})  # fmt: skip
    outcome = one("kube.refused-pods", ctx)
    assert outcome.status == "PASS", outcome
    assert "in the events of 3 team namespace(s)" in outcome.evidence
    assert "about an hour" in outcome.evidence


def test_a_pytorch_worker_refused_by_the_team_policy_fails_naming_the_job_the_count_and_the_sentence(ctx, cluster):
    """Two workers refused, each its own event: counted together under their job, the later time shown."""
    for index, (count, last) in enumerate([(3, "2026-12-05T08:50:00Z"), (2, "2026-12-05T08:55:00Z")]):
        message = "Error creating: " + _denied(f"ddp-worker-{index}", ESCALATION)
        cluster.put(_event(f"ddp.{index}", "PyTorchJob", "ddp", "FailedCreatePod", message, count=count,
                           lastTimestamp=last))  # fmt: skip
    outcome = one("kube.refused-pods", ctx)
    assert outcome.status == "FAIL", outcome
    assert outcome.evidence == (
        f"vision/PyTorchJob ddp: a pod refused 5 time(s), last at 2026-12-05T08:55:00Z: higgsfield-team-vision: "
        f"{ESCALATION}"
    )
    assert "platform bug" in outcome.fix and "docs/troubleshooting.md" in outcome.fix


def test_an_mpijob_launcher_refused_by_the_team_policy_fails_naming_the_job_and_the_sentence(ctx, cluster):
    message = "launcher pod created failed: " + _denied("mpi-nccl-launcher", EPHEMERAL)
    cluster.put(_event("mpi-nccl.1", "MPIJob", "mpi-nccl", "MPIJobFailed", message, count=7))
    outcome = one("kube.refused-pods", ctx)
    assert outcome.status == "FAIL", outcome
    assert "vision/MPIJob mpi-nccl: a pod refused 7 time(s)" in outcome.evidence
    assert f"higgsfield-team-vision: {EPHEMERAL}" in outcome.evidence


def test_a_job_waiting_for_room_in_the_cpu_only_quota_passes_naming_the_quota_and_its_figures(ctx, cluster):
    """A full quota is the team's to wait out (a launcher waits for CPU-only room, as designed): named, not failed."""
    message = (
        'Error creating: pods "prep-x7k2q" is forbidden: exceeded quota: cpu-only, requested: requests.cpu=2, '
        "used: requests.cpu=15, limited: requests.cpu=16"
    )
    cluster.put(_event("prep.1", "Job", "prep", "FailedCreate", message))
    outcome = one("kube.refused-pods", ctx)
    assert outcome.status == "PASS", outcome
    assert outcome.evidence.endswith(
        "waiting for quota room (a full quota, not a fault): vision/Job prep: a pod refused 1 time(s), last at "
        "2026-12-05T08:40:00Z: exceeded quota cpu-only (requested requests.cpu=2, used requests.cpu=15, limited "
        "requests.cpu=16)"
    )


def test_a_failed_pod_create_not_refused_by_admission_passes(ctx, cluster):
    """The operator retrying a pod its cache had not seen yet: nothing refused it, the job goes on."""
    message = 'Error creating: pods "ddp-worker-0" already exists'
    cluster.put(_event("ddp.1", "PyTorchJob", "ddp", "FailedCreatePod", message))
    assert one("kube.refused-pods", ctx).status == "PASS"
