"""Step time of every DDP variant against torch's DistributedDataParallel, in the same run.

    python -m scripts.bench.ddp                                  # gloo on CPU, 2 ranks (a minute or two)
    python -m scripts.bench.ddp --impl student                   # your implementation
    python -m scripts.bench.ddp --layers 8 --d-model 1024 --caps 1,5,25,100,400   # a bigger model
    torchrun --standalone --nproc_per_node=2 -m scripts.bench.ddp --backend nccl

Every rank trains its own copy of a DeepMLP (float32, SGD, MSE loss) on its own batch; one step is
zero_grad, forward, backward, gradient sync, optimizer step. Variants: no communication at all
(the compute-only floor), naive (2.1), flat (2.2), per-parameter overlap (2.3), bucketed (2.4) at
each cap in --caps, and torch DDP at the same caps. Variants take turns in several rounds so that
machine noise hits all alike; a step's time is the slowest rank's, and the table shows the median.
Ratios are against torch DDP with the same bucket cap (25 MiB, torch's default, for the rows
without buckets). Writes out/bench_ddp.{csv,png}: step time vs bucket size, with the others as lines.
"""

from __future__ import annotations

import argparse
import math
import statistics

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tqdm import tqdm

from cs336_systems.models import DeepMLP
from cs336_systems.utils import random_batch, seed_everything
from scripts.bench.common import (
    add_common_args,
    format_table,
    launch,
    load_impl,
    main_rank,
    save_plot,
    timed,
    write_csv,
)

TORCH_DEFAULT_CAP_MB = 25.0


def _variants(caps: list[float]) -> list[tuple[str, str, float | None]]:
    """(label, kind, bucket cap in MiB or None), in the order they run within a round."""
    fixed = [("no communication", "none", None), ("naive", "naive", None), ("flat", "flat", None),
             ("per-parameter overlap", "individual", None)]  # fmt: skip
    return (
        fixed
        + [(f"bucketed {c:g} MiB", "bucketed", c) for c in caps]
        + [(f"torch DDP {c:g} MiB", "torch", c) for c in caps]
    )


def _build(kind: str, cap, ddp, args, device):
    """(module to call, module whose parameters the optimizer steps, sync after backward)."""
    seed_everything(0)
    model = DeepMLP(args.layers, args.d_model, args.d_ff).to(device)
    if kind == "none":
        return model, model, lambda: None
    if kind == "naive":
        return model, model, lambda: ddp.all_reduce_gradients(model)
    if kind == "flat":
        return model, model, lambda: ddp.all_reduce_gradients_flat(model)
    if kind == "individual":
        net = ddp.DDPIndividualParameters(model)
    elif kind == "bucketed":
        net = ddp.DDPBucketed(model, cap)
    else:  # torch's reducer does its all-reduces inside backward: nothing to do after it
        ids = [device.index] if device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, bucket_cap_mb=cap), model, lambda: None
    return net, model, net.finish_gradient_synchronization


def _step(net, opt, sync, x, y) -> None:
    opt.zero_grad(set_to_none=True)
    F.mse_loss(net(x), y).backward()
    sync()
    opt.step()


def bench_rank(rank: int, world_size: int, device: torch.device, impl: str, args) -> dict:
    ddp = load_impl(impl, "ddp")
    x, y = random_batch(args.batch, args.d_model, args.d_model, seed=rank)  # (batch, d_model) each
    x, y = x.to(device), y.to(device)
    runs = {}
    for label, kind, cap in _variants(args.caps):
        net, model, sync = _build(kind, cap, ddp, args, device)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        for _ in range(args.warmup):  # connections, allocator, torch DDP's bucket rebuild after step 1
            _step(net, opt, sync, x, y)
        runs[label] = (net, opt, sync)
    times = {label: [] for label in runs}
    for _ in tqdm(range(args.rounds), disable=rank != 0, desc="rounds", leave=False):
        for label, (net, opt, sync) in runs.items():
            for _ in range(args.steps):
                times[label].append(timed(lambda net=net, opt=opt, sync=sync: _step(net, opt, sync, x, y), device))
    n_params = sum(p.numel() for p in DeepMLP(args.layers, args.d_model, args.d_ff).parameters())
    return {"medians": {k: statistics.median(v) for k, v in times.items()}, "n_params": n_params}


def _report(result: dict, args) -> None:
    med = result["medians"]
    floor = med["no communication"]
    headers = ["variant", "bucket MiB", "step ms", "over compute-only ms", "ratio to torch DDP", "torch DDP ref"]
    rows = []
    default_cap = min(args.caps, key=lambda c: abs(math.log(c / TORCH_DEFAULT_CAP_MB)))  # 25 if measured
    for label, _, cap in _variants(args.caps):
        ref = f"torch DDP {cap if cap is not None else default_cap:g} MiB"
        rows.append([label, "-" if cap is None else f"{cap:g}", med[label] * 1e3, (med[label] - floor) * 1e3,
                     med[label] / med[ref], ref])  # fmt: skip
    size_mb = result["n_params"] * 4 / 2**20
    print(f"\nDeepMLP({args.layers}, {args.d_model}, {args.d_ff}): {result['n_params'] / 1e6:.1f}M parameters, "
          f"{size_mb:.1f} MiB of float32 grads; batch {args.batch} per rank; world {args.world_size}, {args.backend}; "
          f"median of {args.rounds * args.steps} steps\n")  # fmt: skip
    print(format_table(headers, rows))
    best_ours = min((med[f"bucketed {c:g} MiB"], c) for c in args.caps)
    best_torch = min((med[f"torch DDP {c:g} MiB"], c) for c in args.caps)
    print(f"\nbest bucketed: {best_ours[0] * 1e3:.1f} ms at {best_ours[1]:g} MiB; best torch DDP: "
          f"{best_torch[0] * 1e3:.1f} ms at {best_torch[1]:g} MiB; "
          f"ratio {best_ours[0] / best_torch[0]:.2f}")  # fmt: skip
    print(f"communication/computation estimate: naive spends {(med['naive'] - floor) * 1e3:.1f} ms beyond a "
          f"{floor * 1e3:.1f} ms compute-only step (ratio {(med['naive'] - floor) / floor:.2f})")  # fmt: skip
    write_csv(args.out / "bench_ddp.csv", headers, rows)

    def draw(ax):
        ax.plot(args.caps, [med[f"bucketed {c:g} MiB"] * 1e3 for c in args.caps], "o-", label=f"bucketed ({args.impl})")
        ax.plot(args.caps, [med[f"torch DDP {c:g} MiB"] * 1e3 for c in args.caps], "s--", label="torch DDP")
        for label, style in [
            ("no communication", ":"),
            ("naive", "-."),
            ("flat", "--"),
            ("per-parameter overlap", "-"),
        ]:
            ax.axhline(med[label] * 1e3, linestyle=style, color="gray", linewidth=1)
            ax.annotate(label, (args.caps[0], med[label] * 1e3), fontsize=8, va="bottom")
        ax.set_xscale("log")
        ax.set_xlabel("bucket size cap (MiB)")
        ax.set_ylabel("step time (ms, median)")
        ax.set_title(f"DDP step time vs bucket size ({args.world_size} ranks, {args.backend}, {size_mb:.0f} MiB grads)")
        ax.legend()

    print(f"wrote {save_plot(args.out / 'bench_ddp.png', draw)} and {args.out / 'bench_ddp.csv'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--world-size", type=int, default=2, help="ranks to spawn (ignored under torchrun)")
    parser.add_argument("--layers", type=int, default=4, help="residual MLP blocks in the DeepMLP")
    parser.add_argument("--d-model", type=int, default=512, help="model width (also input/output size)")
    parser.add_argument("--d-ff", type=int, default=2048, help="hidden width of each MLP block")
    parser.add_argument("--batch", type=int, default=32, help="examples per rank per step")
    parser.add_argument("--caps", type=lambda s: [float(c) for c in s.split(",")], default=[1.0, 5.0, 25.0, 100.0],
                        help="bucket caps in MiB for ours and torch DDP (default 1,5,25,100)")  # fmt: skip
    parser.add_argument("--steps", type=int, default=3, help="timed steps per variant per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; variants take turns within each")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per variant before the rounds")
    args = parser.parse_args()
    args.caps = sorted(args.caps)
    results = launch(args.world_size, bench_rank, backend=args.backend, impl=args.impl, args=args)
    if main_rank():
        if dist.is_initialized():
            args.world_size = dist.get_world_size()
        _report(results[0], args)


if __name__ == "__main__":
    main()
