"""Locked memory for EFA in non-root job pods: every container of an EFA node gets a locked-memory
limit NCCL can register its buffers under (containerd's base runtime spec, through nodeadm), and
the jobs' launcher refuses to start NCCL below it.

nodeadm's merge of NodeConfig `containerd.baseRuntimeSpec` over the AMI's default is replayed
here from what awslabs/amazon-eks-ami@v20260724 does (components/efa.py cites the files): the
spec goes through Go's encoding/json into interface{} values, so every number becomes a float64
and is written back in Go's shortest form; lists are replaced, not merged.
"""

from __future__ import annotations

import base64
import os
import resource
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from components import efa, healthgate, karpenter
from infra.offline import jobs
from tests.conftest import ROOT, STACKS, config_of, plan_of

sys.path.insert(0, str(ROOT / "examples"))
import checkpointing
import node_check

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
UINT64_MAX = 2**64 - 1
CHECKPOINTING = ROOT / "examples" / "checkpointing.py"
# The AMI's default container rlimits (nodeadm/internal/containerd/base-runtime-spec.json@v20260724).
AMI_DEFAULT_RLIMITS = [{"type": "RLIMIT_NOFILE", "soft": 65536, "hard": 1048576}]


def _node_config(user_data: str) -> dict:
    part = user_data.split("Content-Type: application/node.eks.aws\n\n", 1)[1].split("\n--//", 1)[0]
    return yaml.safe_load(part)


def _go_float_roundtrip(value: int) -> int:
    """What nodeadm writes for `value` after its encoding/json merge: float64, then the shortest
    decimal that reads back as that float64, printed without an exponent below 1e21."""
    return int(Decimal(repr(float(value))))


def _container_rlimits(node_config: dict) -> dict[str, dict]:
    """The rlimits containerd gets: nodeadm's default list replaced by ours, each number as nodeadm writes it."""
    ours = node_config["spec"]["containerd"]["baseRuntimeSpec"]["process"]["rlimits"]
    merged = ours or AMI_DEFAULT_RLIMITS
    return {r["type"]: {"soft": _go_float_roundtrip(r["soft"]), "hard": _go_float_roundtrip(r["hard"])} for r in merged}


def _efa_templates():
    for stack in STACKS:
        efa_pools = {f"gpu-{p.name}-lt" for p in config_of(stack).gpu_pools if p.efa and p.provisioner == "node-group"}
        for template in plan_of(stack).of_type(LAUNCH_TEMPLATE):
            if template.name in efa_pools:
                yield stack, template


def test_every_container_on_an_efa_node_gets_the_locked_memory_limit():
    templates = list(_efa_templates())
    assert templates
    for stack, template in templates:
        limits = _container_rlimits(_node_config(base64.b64decode(template.inputs["userData"]).decode()))
        memlock = limits["RLIMIT_MEMLOCK"]
        assert memlock["soft"] == memlock["hard"] == efa.EFA_LOCKED_MEMORY_BYTES, (stack, template.name)


def test_the_amis_open_files_limit_is_kept_beside_it():
    """nodeadm replaces the default rlimits list with ours: RLIMIT_NOFILE must be restated."""
    for stack, template in _efa_templates():
        limits = _container_rlimits(_node_config(base64.b64decode(template.inputs["userData"]).decode()))
        assert limits["RLIMIT_NOFILE"] == {"soft": 65536, "hard": 1048576}, (stack, template.name)


def test_every_rlimit_reaches_containerd_as_written_and_fits_the_oci_specs_uint64():
    config = _node_config(
        "Content-Type: application/node.eks.aws\n\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n"
        + efa.container_rlimits_node_config()
    )
    for limit in config["spec"]["containerd"]["baseRuntimeSpec"]["process"]["rlimits"]:
        for key in ("soft", "hard"):
            assert _go_float_roundtrip(limit[key]) == limit[key] <= UINT64_MAX, limit


def test_unlimited_would_not_survive_nodeadms_merge():
    """Why the limit is 10^18 and not RLIM_INFINITY: containerd would refuse the spec."""
    assert _go_float_roundtrip(UINT64_MAX) > UINT64_MAX


def test_pools_without_efa_keep_the_amis_container_limits():
    for stack in STACKS:
        plain = {f"gpu-{p.name}-lt" for p in config_of(stack).gpu_pools if not p.efa and p.provisioner == "node-group"}
        for template in plan_of(stack).of_type(LAUNCH_TEMPLATE):
            if template.name in plain and template.inputs.get("userData"):
                assert "RLIMIT_MEMLOCK" not in base64.b64decode(template.inputs["userData"]).decode(), (
                    stack,
                    template.name,
                )


def test_karpenter_efa_nodes_get_the_same_limit():
    pool = next(p for p in config_of("staging").gpu_pools if p.efa)
    limits = _container_rlimits(_node_config(karpenter.user_data(pool)))
    assert limits["RLIMIT_MEMLOCK"]["soft"] == efa.EFA_LOCKED_MEMORY_BYTES


EFA_JOB = {"MIN_LOCKED_MEMORY_BYTES": str(efa.EFA_LOCKED_MEMORY_BYTES)}


@pytest.mark.parametrize("example", ["pytorch-ddp", "pytorch-elastic"])
def test_jobs_on_efa_pools_ask_for_the_locked_memory_the_nodes_give(example):
    cfg = config_of("prod")
    pool = next(p for p in cfg.gpu_pools if p.efa)
    for template in jobs.pod_templates(jobs.render(example, cfg, pool=pool.name)[-1]):
        main = template["spec"]["containers"][0]
        if "nvidia.com/gpu" in main.get("resources", {}).get("limits", {}):
            assert {e["name"]: e.get("value") for e in main["env"]}["MIN_LOCKED_MEMORY_BYTES"] == str(
                efa.EFA_LOCKED_MEMORY_BYTES
            )


def test_the_health_gate_fails_an_efa_node_whose_containers_lack_it():
    pool = next(p for p in config_of("prod").gpu_pools if p.efa)
    expected = node_check.Expectations.from_env(
        healthgate.expectations(pool, config_of("prod").observability.health, lustre=False)
    )
    report = node_check.evaluate("n", [], expected, locked_memory=8 * 2**20)
    assert [r.check for r in report.results if not r.ok and r.check == "locked memory"] == ["locked memory"]
    assert all(
        r.ok
        for r in node_check.evaluate("n", [], expected, locked_memory=efa.EFA_LOCKED_MEMORY_BYTES).results
        if r.check == "locked memory"
    )


@pytest.mark.parametrize(
    ("environ", "limit", "refused"),
    [
        (EFA_JOB, (64 * 1024, 64 * 1024), True),  # the kernel's default before 5.16
        (EFA_JOB, (8 * 2**20, 8 * 2**20), True),  # ... and since
        (EFA_JOB, (efa.EFA_LOCKED_MEMORY_BYTES,) * 2, False),  # what our nodes give
        (EFA_JOB, (resource.RLIM_INFINITY,) * 2, False),
        ({}, (64 * 1024, 64 * 1024), False),  # no EFA: NCCL's sockets or NVLink
    ],
)
def test_locked_memory_problem(environ, limit, refused):
    assert (checkpointing.locked_memory_problem(environ, limit) is not None) is refused


def _run_launcher(tmp_path: Path, environ: dict[str, str], memlock: int) -> tuple[subprocess.CompletedProcess, Path]:
    """Run `python checkpointing.py <a stand-in for torchrun>` under a locked-memory limit of `memlock`."""
    started = tmp_path / "torchrun-started"
    env = {k: v for k, v in os.environ.items() if k != "MIN_LOCKED_MEMORY_BYTES"} | environ

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (memlock, memlock))

    done = subprocess.run(
        [sys.executable, str(CHECKPOINTING), sys.executable, "-c", f"open({str(started)!r}, 'w').close()"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        preexec_fn=lower,
        check=False,
    )
    return done, started


def test_the_launcher_refuses_to_start_nccl_over_efa_under_a_low_limit(tmp_path):
    done, started = _run_launcher(tmp_path, EFA_JOB, 64 * 1024)
    assert done.returncode == 3 and not started.exists()
    (line,) = done.stderr.strip().splitlines()
    assert "RLIMIT_MEMLOCK" in line and "65536 bytes" in line and "TCP" in line


def test_the_launcher_starts_off_efa_whatever_the_limit(tmp_path):
    done, started = _run_launcher(tmp_path, {}, 64 * 1024)
    assert done.returncode == 0 and started.exists(), done.stderr


def _mpi_rank_command() -> list[str]:
    cfg = config_of("prod")
    job = jobs.render("mpi-nccl-tests", cfg, pool=next(p for p in cfg.gpu_pools if p.efa).name)[-1]
    command = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    return command[command.index("sh") :]  # what mpirun starts as each rank, in a worker container


def _run_rank(environ: dict[str, str], memlock: int) -> subprocess.CompletedProcess:
    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (memlock, memlock))

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")} | environ
    return subprocess.run(
        _mpi_rank_command(), env=env, capture_output=True, text=True, timeout=30, preexec_fn=lower, check=False
    )


def test_each_mpi_rank_refuses_a_low_limit_before_nccl_starts():
    done = _run_rank(EFA_JOB, 64 * 1024)
    (line,) = done.stderr.strip().splitlines()
    assert done.returncode == 3 and "RLIMIT_MEMLOCK" in line and "65536 bytes" in line


def test_an_mpi_rank_under_the_nodes_limit_goes_on_to_the_benchmark():
    done = _run_rank({"MIN_LOCKED_MEMORY_BYTES": str(64 * 1024)}, 64 * 1024)  # here: no nccl-tests, so exec fails
    assert done.returncode == 127 and "all_reduce_perf" in done.stderr and "RLIMIT_MEMLOCK" not in done.stderr
