"""The pre-flight gang check (images/training/preflight.py): the bisection that names a bad node, the
verdict's exit codes, the node checks, and the real program on gloo CPU ranks with an injected slow
rank (PyTorch from HIGGSFIELD_TORCH_PYTHON, as tests/offline/test_checkpointing.py finds it; on a
GPU box, NCCL: `python3 -m tests.gpu.preflight_here`)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import preflight
import pytest
from preflight import EXIT_CONFIG, EXIT_RETRY, Isolation, isolate, verdict

from tests.conftest import ROOT, needs_torch, torch_python

PROGRAM = ROOT / "images" / "training" / "preflight.py"


def _probe_with_bad(bad: set[int], log: list | None = None):
    """A fake collective: a group fails when it holds a bad rank (a slow or dead node drags its group)."""

    def probe(groups):
        assert all(len(g) >= 2 for g in groups), groups  # a single rank is never 'probed'
        flat = [r for g in groups for r in g]
        assert len(flat) == len(set(flat)), groups  # the groups of one round are disjoint
        if log is not None:
            log.append(groups)
        return [not (set(g) & bad) for g in groups]

    return probe


@pytest.mark.parametrize("nodes", [3, 4, 5, 8, 16, 33])
def test_bisection_names_the_one_bad_node_of_a_gang(nodes):
    for bad in range(nodes):
        found = isolate(tuple(range(nodes)), _probe_with_bad({bad}))
        assert (found.suspects, found.ambiguous) == ([bad], False), (nodes, bad)


def test_bisection_names_two_bad_nodes_in_different_halves():
    assert isolate(tuple(range(16)), _probe_with_bad({3, 12})).suspects == [3, 12]


def test_bisection_takes_logarithmic_rounds_not_one_per_node():
    rounds: list = []
    found = isolate(tuple(range(64)), _probe_with_bad({41}, rounds))
    assert found.suspects == [41] and found.rounds == len(rounds) <= 6


def test_a_gang_of_two_with_a_bad_pair_names_both_for_a_recheck():
    found = isolate((0, 1), _probe_with_bad({1}))
    assert found.suspects == [0, 1] and found.ambiguous


def test_a_fault_only_between_the_halves_blames_nobody():
    found = isolate(tuple(range(8)), lambda groups: [True] * len(groups))
    assert found.suspects == [] and not found.ambiguous


NODES = ["n0", "n1", "n2", "n3"]
OK = [{"name": "memlock", "value": "unlimited", "expected": "", "ok": True}]
FAST = {"ok": True, "busbw_gb_s": 90.0, "network": "efa", "error": ""}


def test_a_named_node_is_a_retry_and_the_verdict_names_it():
    found = verdict(NODES, dict.fromkeys(range(4), OK), [FAST] * 4, Isolation(suspects=[2], good={0, 1, 3}), set())
    assert found["code"] == EXIT_RETRY >= 128 and list(found["suspects"]) == ["n2"]


def test_the_same_local_failure_on_every_node_fails_the_job_instead_of_retrying():
    low = [{"name": "memlock", "value": "65536 B", "expected": ">= 1 B", "ok": False}]
    found = verdict(NODES, dict.fromkeys(range(4), low), None, None, set())
    assert found["code"] == EXIT_CONFIG < 128 and "memlock" in found["problem"]


def test_nccl_off_efa_on_every_node_of_an_efa_pool_fails_the_job():
    tcp = {**FAST, "network": "Socket"}
    found = verdict(NODES, dict.fromkeys(range(4), OK), [tcp] * 4, None, set(), network="efa")
    assert found["code"] == EXIT_CONFIG and "not EFA" in found["problem"]


def test_a_whole_gang_too_slow_with_no_node_to_blame_fails_the_job():
    found = verdict(
        NODES, dict.fromkeys(range(4), OK), [FAST] * 4, Isolation(suspects=[0, 1, 2, 3], ambiguous=True), set()
    )
    assert found["code"] == EXIT_CONFIG


def test_a_rank_that_never_answers_its_probe_is_named():
    found = verdict(NODES, dict.fromkeys(range(4), OK), [None, FAST, FAST, FAST], Isolation(), {0})
    assert found["code"] == EXIT_RETRY and "n0" in found["suspects"]


def test_a_locked_memory_limit_below_efas_fails_the_node_check():
    assert not preflight.locked_memory(1 << 30, (64 << 10, 64 << 10)).ok
    assert preflight.locked_memory(1 << 30, (preflight.resource.RLIM_INFINITY,) * 2).ok


def test_the_checkpoint_write_writes_the_jobs_size_and_leaves_nothing(tmp_path):
    check = preflight.checkpoint_write(str(tmp_path / "ckpt"), 3 << 20, deadline=1e12, rank=1)
    assert check.ok and "3 MiB" in check.value and list((tmp_path / "ckpt").iterdir()) == []


def test_an_unwritable_checkpoint_directory_fails_the_node_check(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    check = preflight.checkpoint_write(str(blocker / "ckpt"), 1 << 20, deadline=1e12, rank=0)
    assert not check.ok and "expected" in str(check)


def test_skipping_runs_the_command_without_pytorch(tmp_path):
    done = subprocess.run(
        [sys.executable, str(PROGRAM), "--", sys.executable, "-c", "print('training')"],
        env={**os.environ, "HIGGSFIELD_PREFLIGHT": "skip"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "training"


# --- for real: gloo ranks on CPU --------------------------------------------------------------------


# A slow node, for real: every all-reduce of this rank's process groups waits before it starts, so
# every group it is in is slow (as a node with a throttled NIC or a failing GPU is).
RANK = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    import torch.distributed as dist
    if os.environ["NODE_NAME"] == os.environ.get("SLOW_NODE"):
        Real = dist.ProcessGroupGloo
        class Slow:
            def __init__(self, *args):
                self.group = Real(*args)
            def allreduce(self, tensors):
                time.sleep(0.4)
                return self.group.allreduce(tensors)
        dist.ProcessGroupGloo = Slow
    if os.environ["NODE_NAME"] == os.environ.get("FAILING_NODE"):
        Real = dist.ProcessGroupGloo
        class Failing:  # it joins, then its collectives fail, as on a node whose NIC or GPU errors
            def __init__(self, *args):
                self.group = Real(*args)
            def allreduce(self, tensors):
                raise RuntimeError("injected: the collective failed on this node")
        dist.ProcessGroupGloo = Failing
    import preflight
    sys.exit(preflight.main(sys.argv[2:]))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gang(
    tmp_path: Path, nodes: int, slow: str | None, args: list[str], failing: str = ""
) -> list[tuple[int, str, dict | None]]:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    port = _free_port()
    ranks = []
    for rank in range(nodes):
        log = tmp_path / f"termination-{rank}"
        log.write_text("")
        env = {
            **os.environ,
            "PET_NNODES": str(nodes),
            "PET_NODE_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "NODE_NAME": f"node-{rank}",
            "SLOW_NODE": slow or "",
            "FAILING_NODE": failing,
            "PREFLIGHT_PROBE_TIMEOUT_SECONDS": "5",
            "PREFLIGHT_MESSAGE_MB": "1",
            "PREFLIGHT_MIN_BUS_BANDWIDTH_GBPS": "0.01",
            "PREFLIGHT_TIMEOUT_SECONDS": "90",
            "PREFLIGHT_TERMINATION_LOG": str(log),
            "CHECKPOINT_SHARED_DIR": str(tmp_path / "fsx" / "job"),
            "PREFLIGHT_CHECKPOINT_BYTES": str(1 << 20),
        }
        argv = [torch_python(), str(script), str(ROOT / "images" / "training"), *args]
        ranks.append(
            (subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), log)
        )
    results = []
    for child, log in ranks:
        out, _ = child.communicate(timeout=240)
        text = log.read_text()
        results.append((child.returncode, out, json.loads(text)["preflight"] if text else None))
    return results


@needs_torch
def test_a_slow_rank_among_four_gloo_ranks_is_named_and_every_rank_exits_for_a_retry(tmp_path):
    # the check itself in this process (`--check`), where the slow all-reduce is injected
    results = _gang(tmp_path, 4, "node-2", ["--check"])
    for code, out, message in results:
        assert code == EXIT_RETRY, out
        assert message is not None and list(message["suspects"]) == ["node-2"], out
        lines = [line for line in out.splitlines() if line.startswith("preflight rank")]
        assert len(lines) == 1, out  # one line per rank
    assert "BAD NODE" in results[2][1] and "gang: bad nodes node-2" in results[0][1]


@needs_torch
def test_a_rank_whose_collectives_fail_is_named_within_the_time_box(tmp_path):
    results = _gang(tmp_path, 4, None, ["--check"], failing="node-1")
    for code, out, message in results:
        assert code == EXIT_RETRY and message is not None and list(message["suspects"]) == ["node-1"], out


@needs_torch
def test_a_healthy_gloo_gang_passes_and_each_rank_becomes_the_training_command_on_the_freed_port(tmp_path):
    # the training command serves MASTER_PORT again on the master, as torchrun's store does
    train = (
        "import os, datetime, torch.distributed as d; master = os.environ['PET_NODE_RANK'] == '0'; "
        "master and d.TCPStore('127.0.0.1', int(os.environ['MASTER_PORT']), 1, True, "
        "timeout=datetime.timedelta(seconds=5)); print('training')"
    )
    results = _gang(tmp_path, 3, None, ["--", torch_python(), "-c", train])
    for code, out, message in results:
        assert code == 0 and message is None, out
        assert out.splitlines()[-1] == "training" and " ok in " in out, out
    assert "checkpoint write 1 MiB" in results[0][1]


def _smi(text: str):
    return lambda argv: text


def test_the_node_preflight_without_pytorch_names_its_node_when_another_process_holds_gpu_memory(
    tmp_path, capsys, monkeypatch
):
    """`preflight.py --node` (TFJob, XGBoostJob): nvidia-smi's free/total MiB per GPU; one GPU half
    used by a leftover process fails the node, exit 151, in the line goodput reads."""
    from infra.offline.goodput import PREFLIGHT_LINE

    log = tmp_path / "termination-log"
    log.write_text("")
    monkeypatch.setenv("PREFLIGHT_TERMINATION_LOG", str(log))  # the kubelet's file, as in the pod
    env = {"NODE_NAME": "ip-10-0-0-7"}
    code = preflight.run_node_check(env, run=_smi("81000, 81559\n40000, 81559\n"))
    out = capsys.readouterr().out.strip()
    assert code == preflight.EXIT_RETRY == 151
    assert out.startswith("preflight rank 0/1 node ip-10-0-0-7: BAD NODE (gpu free) in ") and PREFLIGHT_LINE.match(out)
    assert "ip-10-0-0-7" in json.loads(log.read_text())["preflight"]["suspects"]


def test_the_node_preflight_passes_a_clean_node_and_then_runs_the_command(tmp_path):
    """The real program: no nvidia-smi on PATH here (no GPU: nothing to check), then the command."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "images" / "training" / "preflight.py"), "--node", "--", "echo", "trained"],
        env={"PATH": "/usr/bin:/bin", "NODE_NAME": "n1", "PYTHONPATH": str(ROOT / "images" / "training")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[0].startswith("preflight rank 0/1 node n1: ok in ") and lines[1] == "trained"


def test_the_node_preflight_serves_its_failing_node_for_a_recheck_before_it_exits(tmp_path):
    """The real program on a node whose GPU another process half fills (a fake nvidia-smi): while it
    lingers, its progress port serves the node as the pre-flight's suspect - what the watchdog turns
    into the health gate's re-check request - then it exits 151 without running the command."""
    from tests.images.test_progress import _free_port, _scrape

    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho '81000, 81559'\necho '40000, 81559'\n")
    smi.chmod(0o755)
    log, port = tmp_path / "termination-log", _free_port()
    log.write_text("")
    env = {
        "PATH": f"{smi.parent}:/usr/bin:/bin",
        "NODE_NAME": "ip-10-0-0-9",
        "PYTHONPATH": str(ROOT / "images" / "training"),
        "PREFLIGHT_TERMINATION_LOG": str(log),
        "HIGGSFIELD_PROGRESS_PORT": str(port),
        "PREFLIGHT_LINGER_SECONDS": "1.5",
    }
    check = subprocess.Popen(
        [sys.executable, str(PROGRAM), "--node", "--", "echo", "trained"], env=env, stdout=subprocess.PIPE, text=True
    )
    served = _scrape(port, "higgsfield_preflight_suspect", 10)
    out, _ = check.communicate(timeout=30)
    assert 'higgsfield_preflight_suspect{node="ip-10-0-0-9"} 1' in served
    assert check.returncode == EXIT_RETRY and "trained" not in out
