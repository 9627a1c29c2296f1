"""One shard of an evaluation sweep on the scavenger class: an Indexed Job's pod evaluates the
newest complete checkpoint of a training job (MODEL_DIR) on shard JOB_COMPLETION_INDEX of a
synthetic test set, and writes RESULTS_DIR/shard-INDEX.json.

A scavenger borrows idle GPUs and is the first to give them back (docs/workload-classes.md): on
SIGTERM - Volcano taking the GPU for a serving pod, a drain - it stops at once (no state worth a
checkpoint: a shard is seconds of work) and exits 143; the Job's podFailurePolicy does not count a
pod the scheduler disrupted, and the Job controller recreates it, to run when the GPUs are idle
again. A shard whose result exists is not run twice.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

EXIT_AFTER_SIGTERM = 128 + signal.SIGTERM


def shard_result(results: Path, index: int) -> Path:
    return results / f"shard-{index:04d}.json"


def main() -> int:
    index = int(os.environ.get("JOB_COMPLETION_INDEX", "0"))
    results = Path(os.environ.get("RESULTS_DIR", "/tmp/eval"))
    out = shard_result(results, index)
    if out.is_file():
        print(f"shard {index}: done before ({out})", flush=True)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(EXIT_AFTER_SIGTERM))  # give the GPU back now

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    from serve import load_model  # the same classifier and checkpoint loading as the serving example

    classify = load_model(os.environ.get("MODEL_DIR"))
    generator = torch.Generator().manual_seed(10_000 + index)
    rows = torch.randn(int(os.environ.get("SHARD_ROWS", "4096")), 28 * 28, generator=generator)
    labels = torch.randint(0, 10, (rows.shape[0],), generator=generator)
    predicted = torch.tensor(classify(rows.tolist()))
    accuracy = float((predicted == labels).float().mean())
    results.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".tmp")
    partial.write_text(json.dumps({"shard": index, "rows": rows.shape[0], "accuracy": accuracy}))
    partial.rename(out)  # whole or absent
    print(f"shard {index}: accuracy {accuracy:.4f} -> {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
