"""What the two ZeRO benchmarks share (scripts/bench/sharded_optimizer.py, fsdp.py): train DeepMLP with
AdamW under a list of methods, measure the bytes each rank holds after a step, and compare them with the formula.

A benchmark gives ``run`` its methods: ``{name: (ZeRO stage, counterpart or None)}`` and a module-level
``build(method, impl, model, lr) -> (module to call, optimizer, whether the caller averages grads)``; the
baseline every benchmark shares, "unsharded" (DDP's memory: stage 0), is built here.
Every rank trains the same model on the same batch; after each step (before zero_grad) it counts the bytes
of parameter, gradient and optimizer-state storage it holds (DTensors count their local shard only).
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.distributed as dist

from cs336_systems.models import DeepMLP
from scripts.bench.common import (
    add_common_args,
    format_table,
    launch,
    load_impl,
    main_rank,
    save_plot,
    timed,
    under_torchrun,
    write_csv,
)

BYTES = {"param_bytes": 4, "grad_bytes": 4, "optimizer_bytes": 8}  # fp32 AdamW, no separate master copy


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """The common options plus the model, batch and schedule of the ZeRO benchmarks."""
    add_common_args(parser)
    parser.add_argument("--world-sizes", default="1,2,4", help="standalone runs (ignored under torchrun)")
    parser.add_argument("--layers", type=int, default=4, help="residual MLP blocks in DeepMLP")
    parser.add_argument("--d-model", type=int, default=256, help="model width")
    parser.add_argument("--d-ff", type=int, default=1024, help="MLP hidden width")
    parser.add_argument("--batch", type=int, default=32, help="rows per rank per step")
    parser.add_argument("--steps", type=int, default=5, help="timed steps (median reported)")
    parser.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate")


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t  # DTensor (fully_shard) -> this rank's shard


def _nbytes(t: torch.Tensor) -> int:
    t = _local(t)
    return t.numel() * t.element_size()


def _state_bytes(obj, seen=None) -> int:
    """Bytes of tensors in an optimizer's state, following nested optimizers (ZeRO wrappers)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return _nbytes(obj)
    if isinstance(obj, dict):
        return sum(_state_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_state_bytes(v, seen) for v in obj)
    if isinstance(obj, torch.optim.Optimizer):
        nested = [v for v in vars(obj).values() if isinstance(v, torch.optim.Optimizer)]
        return _state_bytes(obj.state, seen) + sum(_state_bytes(o, seen) for o in nested)
    return 0


def average_grads(model) -> None:
    """What DDP does for stage 0 and 1 (the caller's all-reduce): every grad becomes the mean over ranks."""
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad.div_(dist.get_world_size())


def bench_rank(rank, world_size, device, build, methods, impl, layers, d_model, d_ff, batch, steps, lr):
    """{method: {"params", "grads", "state" (bytes on this rank), "seconds" (median step)} or {"error"}}."""
    results = {}
    for method in methods:
        torch.manual_seed(0)
        model = DeepMLP(layers, d_model, d_ff).to(device)
        x = torch.randn(batch, d_model, device=device)  # same seed: every rank gets the same batch
        try:
            if method == "unsharded":  # all-reduce the grads, plain AdamW on every rank
                module, opt, average = model, torch.optim.AdamW(model.parameters(), lr=lr), True
            else:
                module, opt, average = build(method, impl, model, lr)

            def step(module=module, opt=opt, average=average, model=model, x=x):
                module(x).pow(2).mean().backward()
                if average:
                    average_grads(model)
                opt.step()

            times = []
            for _ in range(steps + 1):  # the first step allocates state: not timed
                opt.zero_grad()
                times.append(timed(step, device))
            params = list(module.parameters())
            results[method] = {
                "params": sum(_nbytes(p) for p in params),
                "grads": sum(_nbytes(p.grad) for p in params if p.grad is not None),
                "state": _state_bytes(opt),
                "seconds": statistics.median(times[1:]),
            }
        except Exception as exc:  # e.g. fully_shard unavailable on this backend: reported, not fatal
            results[method] = {"error": f"{type(exc).__name__}: {exc}"[:80]}
        dist.barrier()
    return results


def run(args, name: str, methods: dict[str, tuple[int, str | None]], build) -> None:
    """Launch every world size, print the table against the formula, write out/{name}.csv and .png."""
    accounting = load_impl(args.impl, "accounting")
    kwargs = dict(build=build, methods=list(methods), impl=args.impl, layers=args.layers, d_model=args.d_model,
                  d_ff=args.d_ff, batch=args.batch, steps=args.steps, lr=args.lr)  # fmt: skip
    num_params = sum(p.numel() for p in DeepMLP(args.layers, args.d_model, args.d_ff).parameters())
    # Under torchrun the launcher fixed the world size; standalone, we spawn each size in turn.
    sizes = [None] if under_torchrun() else [int(w) for w in args.world_sizes.split(",")]
    rows, measured = [], {}
    for w in sizes:
        res = launch(w or 0, bench_rank, backend=args.backend, **kwargs)[0]  # rank 0 (ranks differ by <= 1 param)
        world = w or dist.get_world_size()
        for method, (stage, counterpart) in methods.items():
            r = res[method]
            formula = accounting.zero_memory_per_rank(num_params, world, stage, **BYTES)
            if "error" in r:
                rows.append([world, method, "n/a", "n/a", "n/a", "n/a", formula / 2**20, "n/a", r["error"]])
                continue
            total = r["params"] + r["grads"] + r["state"]
            measured[(method, world)] = total
            other = res.get(counterpart or "", {})
            ratio = r["seconds"] / other["seconds"] if "seconds" in other else float("nan")
            versus = f"{ratio:.2f} x {counterpart}" if counterpart else "(torch)"
            rows.append([world, method, r["params"] / 2**20, r["grads"] / 2**20, r["state"] / 2**20,
                         total / 2**20, formula / 2**20, r["seconds"] * 1e3, versus])  # fmt: skip
    if not main_rank():
        return
    headers = ["world", "method", "params MiB", "grads MiB", "opt state MiB", "total MiB", "formula MiB",
               "step ms", "time vs torch"]  # fmt: skip
    print(f"DeepMLP({args.layers}, {args.d_model}, {args.d_ff}): {num_params / 1e6:.2f}M parameters, "
          f"AdamW fp32, {args.backend}, bytes on rank 0 after a step")  # fmt: skip
    print(format_table(headers, rows, floatfmt=".3g"))
    write_csv(args.out / f"{name}.csv", headers, rows)
    stages = sorted({stage for stage, _ in methods.values()})

    def draw(ax):
        worlds = sorted({w for _, w in measured})
        for stage in stages:
            formula = [accounting.zero_memory_per_rank(num_params, w, stage, **BYTES) / 2**20 for w in worlds]
            ax.plot(worlds, formula, ["-", "--", "-.", ":"][stage], color="gray", label=f"formula, stage {stage}")
        for i, (method, marker) in enumerate(zip(methods, "osD^xv")):
            # a small sideways offset per method, so equal values (yours vs torch's) stay visible
            shift = 1 + 0.02 * (i - (len(methods) - 1) / 2)
            pts = sorted((w * shift, b / 2**20) for (m, w), b in measured.items() if m == method)
            if pts:
                ax.plot(*zip(*pts), marker, label=method, alpha=0.8)
        ax.set_xlabel("world size")
        ax.set_ylabel("MiB per rank (params + grads + optimizer state)")
        ax.set_xticks(worlds)
        ax.legend(fontsize=7)

    print(f"plot: {save_plot(args.out / f'{name}.png', draw)}")
