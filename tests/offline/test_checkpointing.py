"""Checkpoint and resume (examples/checkpointing.py) on CPU with real files: the completion
marker, newest-complete selection, retention, the background publisher, the SIGTERM flush of a
real process and its resume, and the settings that govern them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import ROOT, assert_plan_rejects, needs_torch, set_key, torch_python

sys.path.insert(0, str(ROOT / "examples"))
import checkpointing  # noqa: E402
from checkpointing import (  # noqa: E402
    COMPLETE,
    BackgroundPublisher,
    CheckpointStore,
    IncompleteCheckpoint,
    StopRequest,
    latest_complete,
    step_dir,
)


def _store(tmp_path: Path, rank: int = 0, world: int = 1, keep: int = 3, wait: float = 5.0) -> CheckpointStore:
    return CheckpointStore(
        tmp_path / f"node-{rank}", tmp_path / "fsx", rank, world, keep, wait_for_ranks_s=wait, poll_s=0.01
    )


def _save(store: CheckpointStore, step: int, payload: bytes = b"weights") -> None:
    (store.local_dir(step) / f"__{store.rank}_0.distcp").write_bytes(payload)
    if store.rank == 0:
        (store.local_dir(step) / ".metadata").write_bytes(b"meta")
    store.publish(step)


def test_a_published_checkpoint_is_complete_and_holds_every_file(tmp_path):
    store = _store(tmp_path)
    _save(store, 100)
    shared = step_dir(tmp_path / "fsx", 100)
    assert (
        (shared / COMPLETE).is_file()
        and (shared / "__0_0.distcp").read_bytes() == b"weights"
        and (shared / ".metadata").is_file()
    )
    assert not [p for p in shared.iterdir() if ".tmp-" in p.name]  # every file was renamed into place


def test_a_checkpoint_without_its_marker_is_never_loaded(tmp_path):
    store = _store(tmp_path)
    _save(store, 100)
    partial = step_dir(tmp_path / "fsx", 200)
    partial.mkdir()
    (partial / "__0_0.distcp").write_bytes(b"half")
    assert latest_complete(tmp_path / "fsx") == (100, step_dir(tmp_path / "fsx", 100))


def test_the_newest_complete_checkpoint_is_the_one_every_rank_resumes_from(tmp_path):
    store = _store(tmp_path)
    for step in (100, 300, 200):
        _save(store, step)
    assert store.resume_from()[0] == 300


def test_nothing_to_resume_from_means_starting_at_step_zero(tmp_path):
    assert _store(tmp_path).resume_from() is None


def test_the_marker_is_written_only_after_every_rank_published(tmp_path):
    rank0, rank1 = _store(tmp_path, 0, 2), _store(tmp_path, 1, 2)
    done = threading.Event()
    thread = threading.Thread(target=lambda: (_save(rank0, 100), done.set()))
    thread.start()
    time.sleep(0.2)
    assert not done.is_set() and not (step_dir(tmp_path / "fsx", 100) / COMPLETE).exists()
    _save(rank1, 100, b"rank one")
    thread.join(5)
    shared = step_dir(tmp_path / "fsx", 100)
    assert (shared / COMPLETE).is_file() and (shared / "__1_0.distcp").read_bytes() == b"rank one"


def test_a_rank_that_never_publishes_leaves_the_checkpoint_incomplete(tmp_path):
    rank0 = _store(tmp_path, 0, 2, wait=0.1)
    with pytest.raises(IncompleteCheckpoint, match=r"ranks \[1\]"):
        _save(rank0, 100)
    assert latest_complete(tmp_path / "fsx") is None


def test_only_the_last_n_complete_checkpoints_are_kept(tmp_path):
    store = _store(tmp_path, keep=2)
    for step in (100, 200, 300, 400):
        _save(store, step)
    assert [p.name for p in sorted((tmp_path / "fsx").iterdir())] == ["step-000000300", "step-000000400"]


def test_a_save_cut_short_is_removed_once_a_newer_checkpoint_completes(tmp_path):
    store = _store(tmp_path)
    _save(store, 100)
    step_dir(tmp_path / "fsx", 200).mkdir()  # a rank died while copying step 200
    _save(store, 300)
    assert not step_dir(tmp_path / "fsx", 200).exists() and step_dir(tmp_path / "fsx", 100).exists()


def test_local_nvme_keeps_only_the_newest_shard(tmp_path):
    store = _store(tmp_path)
    _save(store, 100)
    _save(store, 200)
    assert [p.name for p in (tmp_path / "node-0").iterdir()] == ["step-000000200"]


def test_a_retention_of_zero_is_refused(tmp_path):
    with pytest.raises(ValueError, match="keep_last must be at least 1"):
        _store(tmp_path, keep=0)


def test_the_background_publisher_reports_a_failed_copy(tmp_path):
    store = _store(tmp_path, 0, 2, wait=0.05)
    publisher = BackgroundPublisher(store)
    (store.local_dir(100) / "__0_0.distcp").write_bytes(b"x")
    publisher.submit(100)
    with pytest.raises(IncompleteCheckpoint):
        publisher.wait(5)


def test_sigterm_on_one_rank_stops_every_rank_at_the_same_step():
    stop = StopRequest()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        stop.install()
        assert stop.agree() is None
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert stop.agree() == "stop"
        assert StopRequest().agree(reduce=lambda flag: max(flag, 2)) == "stop"  # another rank was signalled
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_capacity_block_notice_asks_for_one_checkpoint():
    now = datetime(2027, 1, 18, 10, 0, tzinfo=UTC)
    stop = StopRequest(notice_at=now - timedelta(minutes=1), now=lambda: now)
    assert [stop.agree(), stop.agree()] == ["notice", None]
    assert StopRequest(notice_at=now + timedelta(minutes=1), now=lambda: now).agree() is None


# A training loop without torch, using the module as train_ddp.py does: a checkpoint every 5
# steps, SIGTERM -> a final save, the flush, exit 143; on start the newest complete checkpoint.
LOOP = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    from checkpointing import EXIT_AFTER_SIGTERM, BackgroundPublisher, CheckpointStore, StopRequest, settings
    cfg = settings(dict(os.environ))
    stop = StopRequest().install()
    store = CheckpointStore(cfg["local"], cfg["shared"], 0, 1, cfg["keep_last"])
    publisher = BackgroundPublisher(store)
    found = store.resume_from()
    step = int((found[1] / "state").read_text()) + 1 if found else 0
    print("start", step, flush=True)
    def save(step):
        (store.local_dir(step) / "state").write_text(str(step))
        publisher.submit(step)
    while step < 10_000:
        time.sleep(0.01)
        if stop.agree() == "stop":
            save(step)
            publisher.wait(cfg["flush_s"])
            print("final", step, flush=True)
            sys.exit(EXIT_AFTER_SIGTERM)
        if (step + 1) % cfg["every"] == 0:
            save(step)
        step += 1
""")


def _run_loop(tmp_path: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "CHECKPOINT_DIR": str(tmp_path / "nvme"),
        "CHECKPOINT_SHARED_DIR": str(tmp_path / "fsx"),
        "CHECKPOINT_KEEP_LAST": "2",
        "CHECKPOINT_EVERY_STEPS": "5",
        "CHECKPOINT_FLUSH_SECONDS": "30",
    }
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    return subprocess.Popen(
        [sys.executable, str(script), str(ROOT / "examples")], env=env, stdout=subprocess.PIPE, text=True
    )


def test_sigterm_flushes_a_final_checkpoint_and_the_next_start_resumes_after_it(tmp_path):
    first = _run_loop(tmp_path)
    assert first.stdout.readline().split() == ["start", "0"]
    time.sleep(0.5)
    first.send_signal(signal.SIGTERM)
    out, _ = first.communicate(timeout=30)
    assert first.returncode == 143
    final = int(out.split()[-1])
    assert latest_complete(tmp_path / "fsx")[0] == final and len(list((tmp_path / "fsx").iterdir())) == 2  # keepLast 2
    second = _run_loop(tmp_path)
    assert second.stdout.readline().split() == ["start", str(final + 1)]
    second.kill()
    second.communicate(timeout=30)


# --- the settings ---------------------------------------------------------------------------------

C = "higgsfield:checkpoints"


@pytest.mark.parametrize(
    "change, key, detail",
    [
        (set_key(C, {"keepLast": 0}), f"{C}.keepLast", "must be at least 1"),
        (
            set_key(C, {"flushTime": "15m", "terminationGracePeriod": "10m"}),
            f"{C}.terminationGracePeriod",
            "shorter than flushTime 15m",
        ),
        (set_key(C, {"exportToS3": True}), f"{C}.exportToS3", "needs higgsfield:fsx with an s3 link"),
    ],
    ids=["retention_zero", "grace_shorter_than_flush", "s3_export_without_link"],
)
def test_bad_checkpoint_settings_exit_2_and_name_the_key(project_copy, capsys, change, key, detail):
    assert_plan_rejects(project_copy, capsys, "dev", change, key, detail)


def test_the_grace_period_defaults_to_the_flush_time_plus_two_minutes():
    from infra.config import Checkpoints

    assert Checkpoints(flush_time="10m").grace_seconds == 720
    assert checkpointing.EXIT_AFTER_SIGTERM == 143


# --- the rendered jobs ------------------------------------------------------------------------------

from infra.offline import jobs  # noqa: E402
from tests.conftest import STACKS, plan_of  # noqa: E402

PYTORCH = ("pytorch-ddp", "pytorch-elastic")


def _pods(objects):
    (job,) = [o for o in objects if o["kind"] == "PyTorchJob"]
    return job, [t["spec"] for t in jobs.pod_templates(job)]


def _env(spec) -> dict:
    return {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}


@pytest.mark.parametrize("stack", STACKS)
def test_every_training_pod_has_the_grace_period_its_final_checkpoint_needs(stack):
    cfg = plan_of(stack).config
    for example in (e for e in jobs.examples_for(cfg) if e in PYTORCH):
        for pool in cfg.gpu_pools:
            _, specs = _pods(jobs.render(example, cfg, pool=pool.name))
            for spec in specs:
                assert (
                    spec["terminationGracePeriodSeconds"]
                    == cfg.checkpoints.grace_seconds
                    >= cfg.checkpoints.flush_seconds
                )
                assert _env(spec)["CHECKPOINT_FLUSH_SECONDS"] == str(cfg.checkpoints.flush_seconds)


@pytest.mark.parametrize("example", PYTORCH)
def test_a_node_failure_restarts_the_gang_instead_of_failing_the_job(example):
    """ExitCode: 143 (a drain) and 150 (a lost peer) recreate the pods, a bug's 1 fails the job;
    tests/components/test_rolling_update_jobs.py replays a whole rolling update against the operator's rules."""
    cfg = plan_of("prod").config
    job, _ = _pods(jobs.render(example, cfg, pool="h100", workers=3))
    assert {r["restartPolicy"] for r in job["spec"]["pytorchReplicaSpecs"].values()} == {"ExitCode"}


def test_checkpoints_are_published_to_the_teams_fsx_directory():
    cfg = plan_of("prod").config
    _, specs = _pods(jobs.render("pytorch-ddp", cfg, pool="h100", team="llm"))
    env = _env(specs[0])
    assert (env["CHECKPOINT_DIR"], env["CHECKPOINT_SHARED_DIR"], env["CHECKPOINT_KEEP_LAST"]) == (
        "/local/checkpoints",
        "/fsx/checkpoints/pytorch-ddp-h100",
        "3",
    )
    assert not specs[0].get("initContainers")  # the program publishes itself; no copying sidecar


def test_with_s3_export_checkpoints_go_under_the_directory_the_data_repository_association_exports():
    cfg = plan_of("prod").config
    cfg = cfg.model_copy(update={"checkpoints": cfg.checkpoints.model_copy(update={"export_to_s3": True})})
    _, specs = _pods(jobs.render("pytorch-ddp", cfg, pool="h100", team="foundation"))
    assert _env(specs[0])["CHECKPOINT_SHARED_DIR"] == "/datasets/train/checkpoints/foundation/pytorch-ddp-h100"
    assert {"name": "dataset-train", "mountPath": "/datasets/train", "readOnly": False} in specs[0]["containers"][0][
        "volumeMounts"
    ]


def test_exported_checkpoints_live_in_a_directory_the_datasets_reader_teams_cannot_enter():
    """The dataset is world-readable for its readers (2755); its checkpoints directory is the
    owner's UID alone (2700), so no reader team's UID, whatever groups its image gives it, reads the
    owner's weights (issue 34; tests/security/test_r15_attack.py)."""
    from components.storage import layout_script

    cfg = plan_of("prod").config
    cfg = cfg.model_copy(update={"checkpoints": cfg.checkpoints.model_copy(update={"export_to_s3": True})})
    _, specs = _pods(jobs.render("pytorch-ddp", cfg, pool="h100", team="foundation"))
    shared = _env(specs[0])["CHECKPOINT_SHARED_DIR"]
    (dataset,) = [d for d in cfg.fsx.datasets if shared.startswith(f"/datasets/{d.name}/")]
    assert dataset.readers  # someone else mounts this dataset
    owner = next(t.uid for t in cfg.scheduler.teams if t.name == dataset.owner)
    script = layout_script({t.name: t.uid for t in cfg.scheduler.teams}, [(dataset.name, owner)])
    private = f"/datasets/{dataset.name}/checkpoints"
    assert shared.startswith(private + "/")
    assert f"chown {owner}:{owner} /fsx{private} && chmod 2700 /fsx{private}" in script


def test_s3_export_for_a_team_that_cannot_write_the_exported_dataset_names_the_team():
    from infra.config import ConfigError

    cfg = plan_of("prod").config
    cfg = cfg.model_copy(update={"checkpoints": cfg.checkpoints.model_copy(update={"export_to_s3": True})})
    with pytest.raises(ConfigError, match="team llm cannot write dataset train"):
        jobs.render("pytorch-ddp", cfg, pool="h100", team="llm")


def test_jobs_on_a_capacity_block_get_a_checkpoint_notice_ahead_of_the_drain():
    cfg = plan_of("prod").config
    _, specs = _pods(jobs.render("pytorch-ddp", cfg, pool="h200-block"))
    # drain at end - 1h = 10:30; the notice leaves the flush time (10m) and 5 minutes before it
    assert _env(specs[0])["CHECKPOINT_NOTICE_AT"] == "2027-01-18T10:15:00Z"
    _, others = _pods(jobs.render("pytorch-ddp", cfg, pool="h100"))
    assert "CHECKPOINT_NOTICE_AT" not in _env(others[0])


def test_the_job_ships_the_checkpoint_module_next_to_the_script():
    (code,) = [o for o in jobs.render("pytorch-ddp", plan_of("prod").config, pool="h100") if o["kind"] == "ConfigMap"]
    assert set(code["data"]) == {"train_ddp.py", "checkpointing.py", "preflight.py", "node_check.py", "progress.py"}
    assert code["data"]["checkpointing.py"] == (ROOT / "examples" / "checkpointing.py").read_text()


# --- SIGTERM reaches the workers, not only torchrun -------------------------------------------------

# Behaves as torchrun does on SIGTERM: signal the workers, SIGKILL them after a fixed timeout (30 s
# in torch/distributed/elastic/multiprocessing/api.py PContext.close; 0.2 s here), exit with theirs.
LAUNCHER = textwrap.dedent("""
    import signal, subprocess, sys, time
    worker = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
    def stop(signum, frame):
        worker.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        worker.kill()
    signal.signal(signal.SIGTERM, stop)
    sys.exit(worker.wait() and 1)
""")
# A worker whose final checkpoint takes 1 s after SIGTERM: five times the launcher's timeout.
WORKER = textwrap.dedent("""
    import signal, sys, time
    from pathlib import Path
    def flush(signum, frame):
        time.sleep(1)
        Path(sys.argv[1]).write_text("flushed")
        sys.exit(143)
    signal.signal(signal.SIGTERM, flush)
    print("ready", flush=True)
    time.sleep(60)
""")


def _start(tmp_path: Path, wrapped: bool) -> subprocess.Popen:
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    argv = [sys.executable, str(tmp_path / "launcher.py"), WORKER, str(tmp_path / "flushed")]
    if wrapped:
        argv = [sys.executable, str(ROOT / "examples" / "checkpointing.py"), *argv]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_a_launcher_alone_kills_a_worker_whose_final_checkpoint_takes_longer_than_its_timeout(tmp_path):
    proc = _start(tmp_path, wrapped=False)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert not (tmp_path / "flushed").exists()


def test_the_jobs_command_lets_the_workers_finish_their_final_checkpoint(tmp_path):
    proc = _start(tmp_path, wrapped=True)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) != 0  # the job restarts (OnFailure) and resumes
    assert (tmp_path / "flushed").read_text() == "flushed"


def test_every_training_job_starts_through_the_checkpoint_launcher_after_the_preflight():
    for example in PYTORCH:
        _, specs = _pods(jobs.render(example, plan_of("prod").config, pool="h100"))
        assert {tuple(s["containers"][0]["command"][:6]) for s in specs} == {
            ("python", "/code/preflight.py", "--", "python", "/code/checkpointing.py", "torchrun")
        }


@needs_torch
def test_train_ddp_on_two_cpu_ranks_flushes_on_sigterm_and_resumes_after_it(tmp_path):
    """The real program with torch.distributed.checkpoint on gloo: two ranks, per-rank local shard
    directories merged on 'FSx', the marker, SIGTERM through the launcher, the resume (on a GPU box:
    `python3 -m tests.gpu.resume_here`, NCCL on CUDA)."""
    from tests.gpu.resume_here import broken_promises, sigterm_then_resume

    first, second, final = sigterm_then_resume(torch_python(), 2, tmp_path)
    assert broken_promises(first, second, final, tmp_path / "fsx") == [], (first[-3000:], second[-3000:])


@pytest.mark.parametrize("stack", STACKS)
def test_no_rendered_job_tolerates_the_health_gates_taint(stack):
    from infra.config import STARTUP_TAINT_KEY

    cfg = plan_of(stack).config
    for example in jobs.examples_for(cfg):
        for pool in cfg.gpu_pools:
            if example == "mpi-nccl-tests" and not pool.efa:
                continue
            for template in jobs.pod_templates(
                next(o for o in jobs.render(example, cfg, pool=pool.name) if o["kind"] != "ConfigMap")
            ):
                for toleration in template["spec"].get("tolerations", []):
                    assert toleration.get("key") not in (STARTUP_TAINT_KEY, None), (example, pool.name, toleration)


def test_a_lost_nodes_training_pods_are_evicted_within_a_minute():
    _, specs = _pods(jobs.render("pytorch-ddp", plan_of("prod").config, pool="h100"))
    for spec in specs:
        seconds = {t["key"]: t.get("tolerationSeconds") for t in spec["tolerations"] if t.get("effect") == "NoExecute"}
        assert seconds == {"node.kubernetes.io/unreachable": 60, "node.kubernetes.io/not-ready": 60}
