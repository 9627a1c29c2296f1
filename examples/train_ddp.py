"""A small data-parallel training loop (MNIST-sized synthetic data) for the example PyTorchJobs.

The Training Operator injects MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK (or, for elastic
jobs, the PET_* rendezvous settings that torchrun reads). Checkpoints go to fast local storage
first (CHECKPOINT_DIR, an emptyDir on the node's RAID0 NVMe); the job's sidecar copies them to
Lustre (CHECKPOINT_SYNC_DIR) while training goes on.
"""

import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)

    model = DistributedDataParallel(
        nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 512), nn.ReLU(), nn.Linear(512, 10)).to(device),
        device_ids=[local_rank] if device.type == "cuda" else None,
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(1234 + rank)  # each rank its own shard
    checkpoint_dir = os.environ.get("CHECKPOINT_DIR", "/tmp/checkpoints")
    os.makedirs(checkpoint_dir, exist_ok=True)

    steps = int(os.environ.get("STEPS", "500"))
    for step in range(steps):
        images = torch.rand(64, 1, 28, 28, generator=generator).to(device)
        labels = torch.randint(0, 10, (64,), generator=generator).to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        if step % 100 == 0 and rank == 0:
            path = os.path.join(checkpoint_dir, f"step-{step:06d}.pt")
            torch.save({"step": step, "model": model.module.state_dict()}, path + ".tmp")
            os.replace(path + ".tmp", path)  # the sidecar never copies a half-written file
            print(f"step {step} loss {loss.item():.4f} world {world} checkpoint {path}", flush=True)
    dist.barrier()
    if rank == 0:
        print(f"done in {time.process_time():.1f}s CPU", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
