"""FSDP (ZeRO stage 3) benchmark: bytes each rank holds and step time, next to torch's fully_shard (FSDP2).

    python -m scripts.bench.fsdp                          # gloo on CPU, world sizes 1, 2, 4 (about a minute)
    python -m scripts.bench.fsdp --impl student --world-sizes 2         # your implementation
    python -m scripts.bench.fsdp --layers 8 --d-model 1024 --steps 10   # a bigger model
    torchrun --standalone --nproc_per_node=4 -m scripts.bench.fsdp --backend nccl   # one world size, GPUs

For every world size, each rank trains DeepMLP with AdamW (fp32) under each method and measures, after a
step (before zero_grad), the bytes of parameter, gradient and optimizer-state storage it holds:

    unsharded      all-reduce the grads, plain AdamW on every rank (DDP's memory: stage 0)
    fsdp           the implementation's FSDP (Linear weights sharded, biases/norms replicated)
    fsdp_units     the same with each block a unit (§3.4): one all-gather / reduce-scatter per block
    torch_fsdp2    torch.distributed.fsdp.fully_shard on every block and the root, where it runs

The table compares bytes with the accounting formula (zero_memory_per_rank with 4 + 4 + 8 bytes per
parameter: fp32 weights, grads, Adam's m and v) and step time with fully_shard measured in the same
run; the plot shows bytes per rank against world size with the formula's lines. Writes
out/bench_fsdp.{csv,png}. Stages 1 and 2 are -m scripts.bench.sharded_optimizer.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist

from scripts.bench.common import load_impl
from scripts.bench.zero import add_model_args, run

METHODS = {  # method -> (ZeRO stage, the torch counterpart its step time is compared with)
    "unsharded": (0, "torch_fsdp2"),
    "fsdp": (3, "torch_fsdp2"),
    "fsdp_units": (3, "torch_fsdp2"),
    "torch_fsdp2": (3, None),
}


def build(method: str, impl: str, model, lr: float):
    """(module to call, optimizer, whether the caller averages grads) for one method but "unsharded"."""
    if method in ("fsdp", "fsdp_units"):
        units = list(model)[:-1] if method == "fsdp_units" else None  # DeepMLP's blocks (its head stays a layer)
        wrapped = load_impl(impl, "fsdp").FSDP(model, units=units)
        return wrapped, torch.optim.AdamW(wrapped.parameters(), lr=lr), False
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(next(model.parameters()).device.type, (dist.get_world_size(),))
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=lr), False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(parser)
    run(parser.parse_args(), "bench_fsdp", METHODS, build)


if __name__ == "__main__":
    main()
