"""A small data-parallel training loop (MNIST-sized synthetic data) that resumes where it stopped.

The Training Operator injects MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK (or, for elastic
jobs, the PET_* rendezvous settings that torchrun reads); `higgsfield jobs render` sets the
checkpoint settings (examples/checkpointing.py `settings`):

- on start every rank loads the newest *complete* checkpoint from CHECKPOINT_SHARED_DIR (FSx;
  under the S3-exported dataset directory with higgsfield:checkpoints.exportToS3) and goes on
  from the step after it; without one it starts from step 0;
- every CHECKPOINT_EVERY_STEPS steps each rank writes its shard with torch.distributed.checkpoint
  to CHECKPOINT_DIR (an emptyDir on the node's NVMe) and a background thread publishes it to
  FSx with the COMPLETE marker, keeping CHECKPOINT_KEEP_LAST;
- on SIGTERM (drain, Capacity Block end, preemption) the ranks agree to stop, save once more,
  wait up to CHECKPOINT_FLUSH_SECONDS for the copy, and exit 143 so the job restarts and resumes;
- a collective that fails because a peer went away (a lost node) exits 150, also a restart; on GPUs
  NCCL's watchdog usually takes the rank down first (SIGABRT), which checkpointing.py passes on as 134;
  both reach the pod's exit code through checkpointing.py's launcher (restartPolicy ExitCode);
- on a Capacity Block pool, CHECKPOINT_NOTICE_AT asks for a checkpoint ahead of the drain;
- CHECKPOINT_EVERY_STEPS=0 turns checkpoints off (no save, no resume): what `jobs render` sets for
  a multi-node job on a stack without shared storage, where no checkpoint could ever be complete.
"""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # checkpointing.py ships next to this file
from checkpointing import (  # noqa: E402
    EXIT_AFTER_SIGTERM,
    EXIT_PEER_LOST,
    BackgroundPublisher,
    CheckpointStore,
    StopRequest,
    report_exit,
    settings,
)
from progress import from_env as rank_progress  # noqa: E402 - ships next to this file too


def main() -> int:
    cfg = settings(dict(os.environ))
    stop = StopRequest(cfg["notice_at"]).install()  # before anything slow: a SIGTERM from now on is honoured
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    # the collective timeout `jobs render` sets (infra/offline/jobs.py COLLECTIVE_TIMEOUT_S), else PyTorch's
    timeout = os.environ.get("HIGGSFIELD_COLLECTIVE_TIMEOUT_SECONDS")
    dist.init_process_group(backend=backend, **({"timeout": timedelta(seconds=float(timeout))} if timeout else {}))
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)

    model = DistributedDataParallel(
        nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 512), nn.ReLU(), nn.Linear(512, 10)).to(device),
        device_ids=[local_rank] if device.type == "cuda" else None,
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    store = CheckpointStore(cfg["local"], cfg["shared"], rank, world, cfg["keep_last"])
    publisher = BackgroundPublisher(store)

    def snapshot(step: int) -> dict:
        model_state, optim_state = get_state_dict(model, optimizer)
        return {"model": model_state, "optim": optim_state, "step": torch.tensor(step)}

    saved = [-1]

    def save(step: int) -> None:
        if saved[0] == step:
            return
        dcp.save(snapshot(step), storage_writer=dcp.FileSystemWriter(str(store.local_dir(step))))
        publisher.submit(step)  # training goes on while the shard is copied to FSx
        saved[0] = step

    start = 0
    checkpointing = (
        cfg["every"] > 0
    )  # CHECKPOINT_EVERY_STEPS=0: no checkpoints, no resume (a stack without shared storage)
    found = store.resume_from() if checkpointing else None
    if found is not None:
        state = snapshot(0)
        dcp.load(state, storage_reader=dcp.FileSystemReader(str(found[1])))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        start = int(state["step"]) + 1
        saved[0] = int(state["step"])
        if rank == 0:
            print(f"resumed from {found[1]} (step {found[0]}), continuing at step {start}", flush=True)
    elif rank == 0:
        print(
            f"no complete checkpoint in {cfg['shared']}: starting at step 0"
            if checkpointing
            else "checkpoints off: starting at step 0",
            flush=True,
        )

    def agreed(flag: int) -> int:
        value = torch.tensor([flag], device=device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return int(value.item())

    steps = int(os.environ.get("STEPS", "500"))
    progress = rank_progress(rank)  # what the watchdog and the alerts read (progress.py)
    for step in range(start, steps):
        began_step = time.monotonic()
        generator = torch.Generator().manual_seed(1234 + 100003 * step + rank)  # the same data after a resume
        images = torch.rand(64, 1, 28, 28, generator=generator).to(device)
        labels = torch.randint(0, 10, (64,), generator=generator).to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(images), labels)
        computed = time.monotonic() - began_step  # the forward pass: no collective in it
        loss.backward()
        optimizer.step()
        progress.record(step, time.monotonic() - began_step, computed)
        request = stop.agree(agreed)
        if request == "stop" and not checkpointing:
            dist.destroy_process_group()
            return EXIT_AFTER_SIGTERM
        if request == "stop":
            began = stop.since or time.monotonic()
            save(step)

            def left() -> float:
                return max(1.0, cfg["flush_s"] - (time.monotonic() - began))  # noqa: B023 - called right here

            flushed = publisher.wait(left()) and store.wait_complete(step, left())  # every rank leaves together
            if rank == 0:
                print(
                    f"SIGTERM: final checkpoint of step {step} "
                    f"{'published' if flushed else 'NOT published in time (the previous one stays the newest)'}",
                    flush=True,
                )
            dist.destroy_process_group()
            return EXIT_AFTER_SIGTERM
        if checkpointing and (request == "notice" or (step + 1) % cfg["every"] == 0):
            blocked = time.monotonic()
            save(step)  # training waits for the local shard, not for its copy to FSx
            note = progress.blocked_on_checkpoint(time.monotonic() - blocked)  # goodput's checkpoint phase
            if rank == 0:
                print(
                    f"step {step} loss {loss.item():.4f} world {world} "
                    f"checkpoint{' (Capacity Block notice)' if request == 'notice' else ''} {note}",
                    flush=True,
                )
    if start < steps and checkpointing:
        save(steps - 1)
    publisher.wait()
    dist.barrier()
    if rank == 0:
        print(f"done in {time.process_time():.1f}s CPU", flush=True)
    dist.destroy_process_group()
    return 0


def run() -> int:
    """`main`, with a lost peer (a collective that fails: torch.distributed.DistError) as a retry:
    the job starts again (from its newest complete checkpoint, if any) instead of failing."""
    try:
        return report_exit(main())
    except dist.DistError as error:
        print(
            f"a peer was lost ({type(error).__name__}: {error}); exiting {EXIT_PEER_LOST} so the job restarts",
            flush=True,
        )
        return report_exit(EXIT_PEER_LOST)


if __name__ == "__main__":
    sys.exit(run())
