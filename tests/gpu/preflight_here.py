"""Run the pre-flight gang check over NCCL on the GPUs of the machine this runs on: one rank per GPU
(each rank a "node" with CUDA_VISIBLE_DEVICES set to its GPU), first healthy, then with one rank made
slow, which the bisection must name. What tests/images/test_preflight.py does on gloo CPU ranks.

    python3 -m tests.gpu.preflight_here            # from the checkout, with a PyTorch that has CUDA

Needs two GPUs or more (NCCL runs one rank per GPU). Prints each rank's line; exits 0 when the
healthy gang passed and the slow rank was named, 1 otherwise. The floor is low (0.5 GB/s): this
checks the mechanism over NCCL, not a pool's bandwidth (a pool's floor needs its nodes).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RANK = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    import torch.distributed as dist
    if os.environ["NODE_NAME"] == os.environ.get("SLOW_NODE"):
        Real = dist.ProcessGroupNCCL
        class Slow:
            Options = Real.Options
            def __init__(self, *args):
                self.group = Real(*args)
            def allreduce(self, tensors):
                time.sleep(0.5)
                return self.group.allreduce(tensors)
        dist.ProcessGroupNCCL = Slow
    import preflight
    sys.exit(preflight.main(["--check"]))
    """
)


def gang(gpus: int, slow: str | None, workdir: Path) -> list[tuple[int, str, dict | None]]:
    script = workdir / "rank.py"
    script.write_text(RANK)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    children = []
    for rank in range(gpus):
        log = workdir / f"termination-{slow}-{rank}"
        log.write_text("")
        env = {
            **os.environ,
            "CUDA_VISIBLE_DEVICES": str(rank),
            "PET_NNODES": str(gpus),
            "PET_NODE_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "NODE_NAME": f"gpu-{rank}",
            "SLOW_NODE": slow or "",
            "PREFLIGHT_MESSAGE_MB": "64",
            "PREFLIGHT_MIN_BUS_BANDWIDTH_GBPS": "0.5",
            "PREFLIGHT_TIMEOUT_SECONDS": "180",
            "PREFLIGHT_TERMINATION_LOG": str(log),
        }
        argv = [sys.executable, str(script), str(ROOT / "images" / "training")]
        children.append(
            (subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), log)
        )
    results = []
    for child, log in children:
        out, _ = child.communicate(timeout=400)
        text = log.read_text()
        results.append((child.returncode, out, json.loads(text)["preflight"] if text else None))
    return results


def main() -> int:
    import torch

    gpus = min(torch.cuda.device_count(), 4)
    if gpus < 2:
        print(f"needs two GPUs or more, found {torch.cuda.device_count()}")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        healthy = gang(gpus, None, Path(tmp))
        slow = gang(gpus, "gpu-1", Path(tmp))
    for code, out, _ in healthy + slow:
        print(f"exit {code}: {out.strip().splitlines()[-1] if out.strip() else '(no output)'}")
    passed = all(code == 0 for code, _, _ in healthy)
    named = all(code == 151 and m is not None and list(m["suspects"]) == ["gpu-1"] for code, _, m in slow)
    print(f"healthy gang passed: {passed}; slow rank named: {named}")
    return 0 if passed and named else 1


if __name__ == "__main__":
    sys.exit(main())
