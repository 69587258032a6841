"""ZeRO stages 1 and 2 benchmark: bytes each rank holds and step time, next to torch's ZeroRedundancyOptimizer.

    python -m scripts.bench.sharded_optimizer               # gloo on CPU, world sizes 1, 2, 4 (about a minute)
    python -m scripts.bench.sharded_optimizer --impl student --world-sizes 2        # your implementation
    python -m scripts.bench.sharded_optimizer --layers 8 --d-model 1024 --steps 10  # a bigger model
    torchrun --standalone --nproc_per_node=4 -m scripts.bench.sharded_optimizer --backend nccl   # GPUs

For every world size, each rank trains DeepMLP with AdamW (fp32) under each method and measures, after a
step (before zero_grad), the bytes of parameter, gradient and optimizer-state storage it holds:

    unsharded      all-reduce the grads, plain AdamW on every rank (DDP's memory: stage 0)
    stage1         the implementation's ShardedOptimizer (grads all-reduced by the caller)
    stage2         ShardedOptimizer(shard_gradients=True) (step reduce-scatters the grads)
    torch_zero1    torch.distributed.optim.ZeroRedundancyOptimizer (grads all-reduced by the caller)

The table compares bytes with the accounting formula (zero_memory_per_rank with 4 + 4 + 8 bytes per
parameter: fp32 weights, grads, Adam's m and v) and step time with ZeroRedundancyOptimizer measured in
the same run; the plot shows bytes per rank against world size with the formula's lines. Writes
out/bench_sharded_optimizer.{csv,png}. Stage 3 is -m scripts.bench.fsdp.
"""

from __future__ import annotations

import argparse

import torch

from scripts.bench.common import load_impl
from scripts.bench.zero import add_model_args, run

METHODS = {  # method -> (ZeRO stage, the torch counterpart its step time is compared with)
    "unsharded": (0, "torch_zero1"),
    "stage1": (1, "torch_zero1"),
    "stage2": (2, "torch_zero1"),
    "torch_zero1": (1, None),
}


def build(method: str, impl: str, model, lr: float):
    """(module to call, optimizer, whether the caller averages grads) for one method but "unsharded"."""
    if method == "torch_zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return model, ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=lr), True
    zero = load_impl(impl, "sharded_optimizer")
    stage2 = method == "stage2"
    opt = zero.ShardedOptimizer(model.parameters(), torch.optim.AdamW, shard_gradients=stage2, lr=lr)
    return model, opt, not stage2  # stage 1 expects averaged grads; stage 2 averages them in step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(parser)
    run(parser.parse_args(), "bench_sharded_optimizer", METHODS, build)


if __name__ == "__main__":
    main()
