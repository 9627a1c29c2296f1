"""An MPIJob's pre-flight (images/training/preflight.py --mpi): the launcher runs every worker's node
check through mpirun before its own mpirun, names a bad or silent worker's node, serves it for the
watchdog (re-check, then the worker recreated elsewhere) and exits 151. mpirun is a fake here that
runs the rank's command locally as the host the test names, with that host's nvidia-smi; the real
one runs it in the worker's container (kubexec.sh)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import preflight
from preflight import EXIT_CONFIG, EXIT_RETRY, HostResult, mpi_verdict

from tests.conftest import ROOT
from tests.images.test_progress import _free_port, _scrape

PROGRAM = ROOT / "images" / "training" / "preflight.py"
CLEAN, HALF_USED = "81000, 81559\n", "81000, 81559\n40000, 81559\n"


def _launcher(tmp_path, hosts: dict[str, dict], port: int | None = None):
    """A launcher's environment: the hostfile of `hosts`, a fake mpirun that plays each host (its
    node, its GPUs' memory, or no answer at all) and a fake kubectl that knows each pod's node."""
    (tmp_path / "hosts.json").write_text(json.dumps(hosts))
    (tmp_path / "hostfile").write_text("".join(f"{h} slots=8\n" for h in hosts))
    mpirun = tmp_path / "mpirun"
    mpirun.write_text(
        textwrap.dedent(f"""\
        #!{sys.executable}
        import json, os, subprocess, sys, time
        argv = sys.argv[1:]
        host = argv[argv.index("--host") + 1]
        rank = argv[argv.index("--host") + 2:]
        me = json.load(open({str(tmp_path / "hosts.json")!r}))[host]
        if me.get("silent"):
            time.sleep(60)
        bin_dir = {str(tmp_path)!r} + "/smi-" + host
        os.makedirs(bin_dir, exist_ok=True)
        with open(bin_dir + "/nvidia-smi", "w") as smi:
            smi.write("#!/bin/sh\\nprintf '%s'\\n" % me["smi"].replace("\\n", "\\\\n"))
        os.chmod(bin_dir + "/nvidia-smi", 0o755)
        rank = [sys.executable if a == "python" else a.replace("/code/", {str(PROGRAM.parent) + "/"!r}) for a in rank]
        env = {{"PATH": bin_dir + ":/usr/bin:/bin", "NODE_NAME": me["node"]}}
        sys.exit(subprocess.run(rank, env=env).returncode)
        """)
    )
    kubectl = tmp_path / "kubectl"
    nodes = {h: v["node"] for h, v in hosts.items()}
    pending = [h for h, v in hosts.items() if v.get("pending")]
    kubectl.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"if sys.argv[1] == 'wait': sys.exit(sys.argv[3].split('/')[1] in {pending!r})\n"
        f"print({nodes!r}[sys.argv[3]])\n"
    )
    for fake in (mpirun, kubectl):
        fake.chmod(0o755)
    (tmp_path / "termination-log").write_text("")
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(PROGRAM.parent),
        "PREFLIGHT_HOSTFILE": str(tmp_path / "hostfile"),
        "PREFLIGHT_MPIRUN": str(mpirun),
        "PREFLIGHT_KUBECTL": str(kubectl),
        # a silent host is given up after 3 s; otherwise far above a loaded machine's process starts (a node
        # check of a few Python processes took over 3 s beside a busy suite and was blamed)
        "PREFLIGHT_TIMEOUT_SECONDS": "3" if any(v.get("silent") for v in hosts.values()) else "60",
        "PREFLIGHT_TERMINATION_LOG": str(tmp_path / "termination-log"),
        "PREFLIGHT_LINGER_SECONDS": "1.5",
    }
    if port:
        env["HIGGSFIELD_PROGRESS_PORT"] = str(port)
    return env


def _run(env):
    done = subprocess.run(
        [sys.executable, str(PROGRAM), "--mpi", "--", "echo", "trained"], env=env, capture_output=True, text=True
    )
    return done.returncode, done.stdout


def _message(tmp_path) -> dict:
    return json.loads((tmp_path / "termination-log").read_text())["preflight"]


def test_a_worker_whose_gpu_another_process_holds_is_named_and_the_launcher_exits_for_a_retry(tmp_path):
    port = _free_port()
    env = _launcher(
        tmp_path,
        {
            "job-worker-0": {"node": "node-a", "smi": CLEAN},
            "job-worker-1": {"node": "node-b", "smi": HALF_USED},
            "job-worker-2": {"node": "node-c", "smi": CLEAN},
        },
        port,
    )
    launcher = subprocess.Popen(
        [sys.executable, str(PROGRAM), "--mpi", "--", "echo", "trained"], env=env, stdout=subprocess.PIPE, text=True
    )
    served = _scrape(port, "higgsfield_preflight_suspect", 20)
    out, _ = launcher.communicate(timeout=60)
    assert launcher.returncode == EXIT_RETRY and "trained" not in out, out
    assert list(_message(tmp_path)["suspects"]) == ["node-b"]
    lines = [line for line in out.splitlines() if line.startswith("preflight rank ")]
    assert len(lines) == 3 and lines[1].startswith("preflight rank 1/3 node node-b: BAD NODE in "), out
    assert "worker job-worker-1: BAD NODE (gpu free)" in lines[1]
    # served for the watchdog: re-check the node, then delete the job's pods there (recreated elsewhere)
    assert 'higgsfield_preflight_suspect{node="node-b",recreate="true"} 1' in served


def test_a_worker_that_never_answers_is_named_by_its_pods_node_within_the_time_box(tmp_path):
    env = _launcher(
        tmp_path,
        {"job-worker-0": {"node": "node-a", "smi": CLEAN}, "job-worker-1": {"node": "node-b", "silent": True}},
    )
    code, out = _run(env)
    assert code == EXIT_RETRY, out
    suspects = _message(tmp_path)["suspects"]
    assert list(suspects) == ["node-b"] and "no answer within 3s" in suspects["node-b"]


def test_healthy_workers_pass_and_the_launcher_becomes_its_mpirun(tmp_path):
    env = _launcher(
        tmp_path,
        {"job-worker-0": {"node": "node-a", "smi": CLEAN}, "job-worker-1": {"node": "node-b", "smi": CLEAN}},
    )
    code, out = _run(env)
    lines = out.splitlines()
    assert code == 0 and lines[-1] == "trained", out
    assert [line.split(":")[0] for line in lines[:2]] == [
        "preflight rank 0/2 node node-a",
        "preflight rank 1/2 node node-b",
    ]


def test_every_worker_failing_the_same_way_is_a_setting_not_a_node():
    said = "BAD NODE (checkpoint write); checkpoint write PermissionError"
    results = [HostResult(f"w-{i}", f"n{i}", False, said) for i in range(3)]
    assert mpi_verdict(results)["code"] == EXIT_CONFIG
    assert mpi_verdict([*results[:2], HostResult("w-2", "n2", True, "ok")])["code"] == EXIT_RETRY


def test_the_workers_are_read_from_the_operators_hostfile(tmp_path):
    (tmp_path / "hostfile").write_text("pi-worker-0 slots=8\npi-worker-1 slots=8\n")
    assert preflight.mpi_hosts({"OMPI_MCA_orte_default_hostfile": str(tmp_path / "hostfile")}) == [
        "pi-worker-0",
        "pi-worker-1",
    ]


def test_a_worker_whose_pod_is_not_ready_yet_is_retried_without_blaming_its_node(tmp_path):
    """The operator starts the launcher without waiting for its workers: one still pulling its image
    is waited for (here: never Ready), then the launcher exits for a retry naming no node."""
    env = _launcher(
        tmp_path,
        {"job-worker-0": {"node": "node-a", "smi": CLEAN}, "job-worker-1": {"node": "node-b", "pending": True}},
    )
    code, out = _run({**env, "PREFLIGHT_READY_SECONDS": "1"})
    message = _message(tmp_path)
    assert code == EXIT_RETRY and message["suspects"] == {} and "not ready: job-worker-1" in message["problem"], out
