"""The real training program stopped with SIGTERM and resumed, on this machine's CPUs or GPUs.

    python3 -m tests.gpu.resume_here --nproc 1            # on a GPU box: NCCL and CUDA tensors
    HIGGSFIELD_TORCH_PYTHON=... pytest tests/offline/test_checkpointing.py   # two gloo ranks on CPU

examples/checkpointing.py launches torchrun with examples/train_ddp.py (NCCL on CUDA when PyTorch
sees a GPU, else gloo), with per-rank local shard directories merged on a "shared" directory. Once a
complete checkpoint exists the launcher gets SIGTERM; it must report the final checkpoint published,
and a second run must resume after it. Standard library only besides the examples, so it runs where
the project is not installed; it prints both runs' output and exits non-zero on a broken promise.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
from checkpointing import latest_complete  # noqa: E402


def sigterm_then_resume(python: str, nproc: int, workdir: Path) -> tuple[str, str, int]:
    """(first run's output, second run's output, the final step the first run published)."""
    torchrun = [
        python,
        "-m",
        "torch.distributed.run",
        "--standalone",  # a free rendezvous port: the suite runs other torchruns beside this one
        "--nproc-per-node",
        str(nproc),
        str(ROOT / "examples" / "train_ddp.py"),
    ]
    launcher = [python, str(ROOT / "examples" / "checkpointing.py"), *torchrun]
    env = {
        **os.environ,
        "CHECKPOINT_DIR": str(workdir / "nvme"),
        "CHECKPOINT_SHARED_DIR": str(workdir / "fsx"),
        "CHECKPOINT_EVERY_STEPS": "200",
        "STEPS": "1000000",
        "OMP_NUM_THREADS": "1",
        "CHECKPOINT_FLUSH_SECONDS": "60",
        # progress.py ships next to the script in the job's ConfigMap; here it is the image's
        "PYTHONPATH": str(ROOT / "images" / "training"),
    }
    first = subprocess.Popen(launcher, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while latest_complete(workdir / "fsx") is None and time.monotonic() < deadline:
        time.sleep(0.5)
    first.send_signal(signal.SIGTERM)
    out, _ = first.communicate(timeout=120)
    found = latest_complete(workdir / "fsx")
    final = found[0] if found else -1
    second = subprocess.run(launcher, env={**env, "STEPS": str(final + 5)}, capture_output=True, text=True, timeout=180)
    return out, second.stdout + second.stderr, final


def broken_promises(first: str, second: str, final: int, shared: Path) -> list[str]:
    broken = []
    if not ("SIGTERM: final checkpoint of step" in first and " published" in first):
        broken.append("the first run did not publish a final checkpoint on SIGTERM")
    if f"resumed from {shared}/step-{final:09d} (step {final}), continuing at step {final + 1}" not in second:
        broken.append(f"the second run did not resume after step {final}")
    return broken


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=1, help="ranks on this machine (one per GPU with NCCL)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        first, second, final = sigterm_then_resume(sys.executable, args.nproc, Path(tmp))
        print(f"--- first run\n{first}\n--- second run\n{second}")
        broken = broken_promises(first, second, final, Path(tmp) / "fsx")
    print("\n".join(broken) or f"ok: final checkpoint at step {final} on SIGTERM, resumed at step {final + 1}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
