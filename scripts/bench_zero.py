"""ZeRO benchmark: bytes each rank holds and step time, unsharded vs stage 1 / 2 / 3, next to torch's own.

    python scripts/bench_zero.py                          # gloo on CPU, world sizes 1, 2, 4 (about a minute)
    python scripts/bench_zero.py --layers 8 --d-model 1024 --steps 10     # a bigger model
    torchrun --standalone --nproc_per_node=4 scripts/bench_zero.py --backend nccl   # one world size, GPUs

For every world size, each rank trains DeepMLP with AdamW (fp32) under each method and measures, after a
step (before zero_grad), the bytes of parameter, gradient and optimizer-state storage it holds:

    unsharded      all-reduce the grads, plain AdamW on every rank (DDP's memory: stage 0)
    stage1         the implementation's ShardedOptimizer (grads all-reduced by the caller)
    stage2         ShardedOptimizer(shard_gradients=True) (step reduce-scatters the grads)
    fsdp           the implementation's FSDP (stage 3: Linear weights sharded, biases/norms replicated)
    torch_zero1    torch.distributed.optim.ZeroRedundancyOptimizer (grads all-reduced by the caller)
    torch_fsdp2    torch.distributed.fsdp.fully_shard on every block and the root, where it runs

The table compares bytes with the accounting formula (zero_memory_per_gpu with 4 + 4 + 8 bytes per
parameter: fp32 weights, grads, Adam's m and v) and step time with torch's counterpart measured in the
same run; the plot shows bytes per rank against world size with the formula's lines.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere, also under torchrun
from scripts.benchlib import (  # noqa: E402
    add_common_args,
    format_table,
    launch,
    load_impl,
    main_rank,
    save_plot,
    under_torchrun,
    write_csv,
)

METHODS = ["unsharded", "stage1", "stage2", "fsdp", "torch_zero1", "torch_fsdp2"]
COUNTERPART = {
    "unsharded": "torch_zero1",
    "stage1": "torch_zero1",
    "stage2": "torch_zero1",
    "fsdp": "torch_fsdp2",
}
STAGE = {"unsharded": 0, "stage1": 1, "stage2": 2, "fsdp": 3, "torch_zero1": 1, "torch_fsdp2": 3}
BYTES = {"param_bytes": 4, "grad_bytes": 4, "optimizer_bytes": 8}  # fp32 AdamW, no separate master copy


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t  # DTensor (fully_shard) -> this rank's shard


def _state_bytes(obj, seen=None) -> int:
    """Bytes of tensors in an optimizer's state, following nested optimizers (ZeRO wrappers)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        t = _local(obj)
        return t.numel() * t.element_size()
    if isinstance(obj, dict):
        return sum(_state_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_state_bytes(v, seen) for v in obj)
    if isinstance(obj, torch.optim.Optimizer):
        nested = [v for v in vars(obj).values() if isinstance(v, torch.optim.Optimizer)]
        return _state_bytes(obj.state, seen) + sum(_state_bytes(o, seen) for o in nested)
    return 0


def _average_grads(model) -> None:
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad.div_(dist.get_world_size())


def _build(method: str, impl: str, model, lr: float):
    """(module to call, optimizer, whether the caller averages grads) for one method."""
    zero = load_impl(impl, "sharded_optimizer") if method in ("stage1", "stage2", "fsdp") else None
    if method == "unsharded":
        return model, torch.optim.AdamW(model.parameters(), lr=lr), True
    if method in ("stage1", "stage2"):
        opt = zero.ShardedOptimizer(model.parameters(), torch.optim.AdamW, shard_gradients=method == "stage2", lr=lr)
        return model, opt, method == "stage1"
    if method == "fsdp":
        wrapped = zero.FSDP(model)
        return wrapped, torch.optim.AdamW(wrapped.parameters(), lr=lr), False
    if method == "torch_zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return (
            model,
            ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=lr),
            True,
        )
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(next(model.parameters()).device.type, (dist.get_world_size(),))
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=lr), False


def bench_rank(rank, world_size, device, impl, layers, d_model, d_ff, batch, steps, lr):
    from cs336_systems.models import DeepMLP

    results = {}
    for method in METHODS:
        torch.manual_seed(0)
        model = DeepMLP(layers, d_model, d_ff).to(device)
        x = torch.randn(batch, d_model, device=device)  # same seed: every rank gets the same batch
        try:
            module, opt, average = _build(method, impl, model, lr)
            times = []
            for _ in range(steps + 1):  # the first step allocates state: not timed
                opt.zero_grad()
                dist.barrier()
                start = time.perf_counter()
                module(x).pow(2).mean().backward()
                if average:
                    _average_grads(model)
                opt.step()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                times.append(time.perf_counter() - start)
            params = list(module.parameters())
            results[method] = {
                "params": sum(_local(p).numel() * _local(p).element_size() for p in params),
                "grads": sum(
                    _local(p.grad).numel() * _local(p.grad).element_size() for p in params if p.grad is not None
                ),
                "state": _state_bytes(opt),
                "seconds": statistics.median(times[1:]),
            }
        except Exception as exc:  # e.g. fully_shard unavailable on this backend: reported, not fatal
            results[method] = {"error": f"{type(exc).__name__}: {exc}"[:80]}
        dist.barrier()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--world-sizes", default="1,2,4", help="standalone runs (ignored under torchrun)")
    parser.add_argument("--layers", type=int, default=4, help="residual MLP blocks in DeepMLP")
    parser.add_argument("--d-model", type=int, default=256, help="model width")
    parser.add_argument("--d-ff", type=int, default=1024, help="MLP hidden width")
    parser.add_argument("--batch", type=int, default=32, help="rows per rank per step")
    parser.add_argument("--steps", type=int, default=5, help="timed steps (median reported)")
    parser.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate")
    args = parser.parse_args()
    accounting = load_impl(args.impl, "accounting")
    kwargs = dict(impl=args.impl, layers=args.layers, d_model=args.d_model, d_ff=args.d_ff, batch=args.batch,
                  steps=args.steps, lr=args.lr)  # fmt: skip
    # Under torchrun the launcher fixed the world size; standalone, we spawn each size in turn.
    sizes = [None] if under_torchrun() else [int(w) for w in args.world_sizes.split(",")]
    rows, measured = [], {}
    for w in sizes:
        per_rank = launch(w or 0, bench_rank, backend=args.backend, **kwargs)
        world = w or dist.get_world_size()
        res = per_rank[0]  # rank 0 (ranks differ by at most one parameter's worth)
        from cs336_systems.models import DeepMLP

        num_params = sum(p.numel() for p in DeepMLP(args.layers, args.d_model, args.d_ff).parameters())
        for method in METHODS:
            r = res[method]
            formula = accounting.zero_memory_per_gpu(num_params, world, STAGE[method], **BYTES)
            if "error" in r:
                rows.append([world, method, "n/a", "n/a", "n/a", "n/a", formula / 2**20, "n/a", r["error"]])
                continue
            total = r["params"] + r["grads"] + r["state"]
            measured[(method, world)] = total
            other = res.get(COUNTERPART.get(method, ""), {})
            ratio = r["seconds"] / other["seconds"] if "seconds" in other else float("nan")
            versus = f"{ratio:.2f} x {COUNTERPART[method]}" if method in COUNTERPART else "(torch)"
            rows.append([world, method, r["params"] / 2**20, r["grads"] / 2**20, r["state"] / 2**20,
                         total / 2**20, formula / 2**20, r["seconds"] * 1e3,
                         versus])  # fmt: skip
    if not main_rank():
        return
    headers = ["world", "method", "params MiB", "grads MiB", "opt state MiB", "total MiB", "formula MiB",
               "step ms", "time vs torch"]  # fmt: skip
    print(f"DeepMLP({args.layers}, {args.d_model}, {args.d_ff}): {num_params / 1e6:.2f}M parameters, "
          f"AdamW fp32, {args.backend}, bytes on rank 0 after a step")  # fmt: skip
    print(format_table(headers, rows, floatfmt=".3g"))
    write_csv(args.out / "bench_zero.csv", headers, rows)

    def draw(ax):
        worlds = sorted({w for _, w in measured})
        for stage, style in zip(range(4), ["-", "--", "-.", ":"]):
            formula = [accounting.zero_memory_per_gpu(num_params, w, stage, **BYTES) / 2**20 for w in worlds]
            ax.plot(worlds, formula, style, color="gray", label=f"formula, stage {stage}")
        for i, (method, marker) in enumerate(zip(METHODS, "osD^xv")):
            # a small sideways offset per method, so equal values (yours vs torch's) stay visible
            pts = sorted((w * (1 + 0.02 * (i - 2.5)), b / 2**20) for (m, w), b in measured.items() if m == method)
            if pts:
                ax.plot(*zip(*pts), marker, label=method, alpha=0.8)
        ax.set_xlabel("world size")
        ax.set_ylabel("MiB per rank (params + grads + optimizer state)")
        ax.set_xticks(worlds)
        ax.legend(fontsize=7)

    print(f"plot: {save_plot(args.out / 'bench_zero.png', draw)}")


if __name__ == "__main__":
    main()
