"""The ranks of a launch: one plain process is rank 0 of 1; under `torchrun` every process joins
torch.distributed (gloo on CPU, NCCL when CUDA is present, each rank on the GPU of its LOCAL_RANK).

Owns joining and leaving the process group and the collectives the benchmark and the evaluation
need (a broadcast from rank 0, a gather to rank 0, a barrier). It knows nothing of what the ranks compute.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch

# a rank that finished its shard waits for the slowest one; sweeps on real checkpoints take hours
TIMEOUT = timedelta(hours=12)


@dataclass(frozen=True)
class Ranks:
    rank: int = 0          # this process, 0 .. world - 1
    world: int = 1         # processes in the launch (all nodes)
    local_rank: int = 0    # this process on its node (its GPU)

    @property
    def main(self) -> bool:
        return self.rank == 0


def join() -> Ranks:
    """Join the process group torchrun set up in the environment; a plain process is Ranks()."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Ranks()
    import torch.distributed as dist
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        torch.cuda.set_device(local)  # "cuda" (MULO_DEVICE) now names this rank's GPU
        backend = "nccl"
    else:
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=TIMEOUT)
    return Ranks(dist.get_rank(), dist.get_world_size(), local)


def shard(n: int, ranks: Ranks) -> list[int]:
    """The items of 0 .. n - 1 this rank takes: every world-th one, the same split on every launch."""
    return list(range(ranks.rank, n, ranks.world))


def broadcast(obj, ranks: Ranks):
    """Rank 0's `obj` on every rank."""
    if ranks.world == 1:
        return obj
    import torch.distributed as dist
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather(obj, ranks: Ranks) -> list | None:
    """[obj of rank 0, obj of rank 1, ...] on rank 0; None on the others."""
    if ranks.world == 1:
        return [obj]
    import torch.distributed as dist
    out = [None] * ranks.world if ranks.main else None
    dist.gather_object(obj, out, dst=0)
    return out


def barrier(ranks: Ranks) -> None:
    if ranks.world > 1:
        import torch.distributed as dist
        dist.barrier()


def leave(ranks: Ranks) -> None:
    if ranks.world > 1:
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()
