"""Our all-reduce algorithms vs torch's ``dist.all_reduce``, in the same run; the alpha-beta model fitted.

    python -m scripts.bench.collectives                         # gloo on CPU, world 2 and 4
    python -m scripts.bench.collectives --impl student          # your implementation
    torchrun --standalone --nproc_per_node=8 -m scripts.bench.collectives --backend nccl

For each message size M (float32) it times ``all_reduce(x, algorithm=a)`` for the ring, recursive
doubling and "auto", the built-in, and the bare one-message exchange "1-msg" (each rank ``isend``s the
whole tensor to the next rank, ``irecv``s the previous one's and adds it: one message of M bytes, a floor
for any all-reduce built from point-to-point, which sends at least 2(N-1)/N x M >= M bytes per rank),
interleaved (round after round of one call each, the ops taking turns at going first, so machine noise
hits all alike; each op's median over the rounds, each call's time the slowest rank's):
    bus bandwidth   busbw = M / t * 2(N-1)/N   (what each link carries in a ring; comparable
                                               across N and algorithms, as in nccl-tests)
    ratio           busbw / built-in busbw  (= built-in time / our time); "1-msg / built-in" is the
                    exchange's (built-in time / exchange time): roughly the ceiling of the other ratios
                    here, since a point-to-point all-reduce sends at least one message's worth
    interval        where 90% of the ratios fall when the rounds are resampled (a bootstrap over paired
                    rounds, common.ratio_interval): how far this run's ratio can be trusted. Another run,
                    in another spell of the machine, can land outside.
Then it fits the alpha-beta model (alpha seconds per message, beta seconds per byte) to the ring's
and recursive doubling's times for each world size, prints alpha, beta and the model's error at
each point, and draws measured and modelled time against size with the crossover marked: the one
"auto" uses (the implementation's ALPHA_BETA) and the one the fit predicts.
Writes out/bench_collectives.{csv,png}.
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.distributed as dist
from tqdm import tqdm

from scripts.bench.common import (
    add_common_args,
    format_table,
    launch,
    load_impl,
    main_rank,
    ratio_interval,
    timed,
    under_torchrun,
    write_csv,
)

DEFAULT_SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
ALGORITHMS = ["ring", "recursive_doubling", "auto"]
BUILTIN = "built-in"
EXCHANGE = "1-msg"  # the bare one-message exchange: isend/irecv of the whole tensor plus one add


def _exchange(x: torch.Tensor, buf: torch.Tensor) -> None:
    """Send all of ``x`` to the next rank, receive the previous rank's into ``buf``, add it: one message."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if world > 1:
        works = [dist.isend(x, (rank + 1) % world), dist.irecv(buf, (rank - 1) % world)]
        for work in works:
            work.wait()
    x.add_(buf)


def bench_rank(rank: int, world_size: int, device: torch.device, impl: str, sizes: list[int], samples: int):
    """Per size: ``samples`` (more where a call is cheap) rounds of one call of every op, the ops taking turns
    at going first, so a slow spell of the machine hits every op alike; each op's median over the rounds."""
    C = load_impl(impl, "collectives")
    ops = {a: (lambda x, a=a: C.all_reduce(x, algorithm=a)) for a in ALGORITHMS}
    ops[BUILTIN] = dist.all_reduce
    ops[EXCHANGE] = lambda x: _exchange(x, buffers[x.numel()])
    buffers = {}
    names = list(ops)
    backend = dist.get_backend()
    alpha, beta = C.ALPHA_BETA.get(backend, C.ALPHA_BETA["gloo"])
    rows, rounds = [], {}
    for size in tqdm(sizes, disable=rank != 0, desc=f"world {world_size}", leave=False):
        x = torch.ones(size // 4, dtype=torch.float32, device=device)
        buffers[x.numel()] = torch.zeros_like(x)
        for op in ops.values():  # warm up every op (connections, allocator)
            op(x)
        times = {name: [] for name in names}
        for i in range(max(samples, min(4 * samples, (64 << 20) // size))):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                times[name].append(timed(lambda op=ops[name], x=x: op(x), device))
        chosen = C.choose_all_reduce_algorithm(size, world_size, alpha=alpha, beta=beta)
        rows.append((size, {name: statistics.median(t) for name, t in times.items()}, chosen))
        rounds[size] = times
    return {"rows": rows, "rounds": rounds, "alpha_beta": (alpha, beta), "backend": backend}


def _fmt_size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def _fit(acc, world: int, rows) -> tuple[float, float] | None:
    """alpha, beta fitted to the ring's and recursive doubling's times (None before Task 1.7, or at one rank)."""
    if world < 2:  # one rank sends nothing: every modelled time is 0, there is nothing to fit
        print(f"(no fit at world size {world}: one rank sends no message)")
        return None
    points = [(size, t[a], a) for size, t, _ in rows for a in ("ring", "recursive_doubling")]
    try:
        return acc.fit_alpha_beta(*zip(*points), world_size=world)
    except (NotImplementedError, AttributeError) as exc:
        print(f"(no fit: accounting.fit_alpha_beta is not there yet: {exc})")
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--world-sizes", default="2,4", help="standalone runs (ignored under torchrun)")
    parser.add_argument("--max-size", type=int, default=64 << 20, help="largest message in bytes (default 64 MiB)")
    parser.add_argument("--samples", type=int, default=60,
                        help="interleaved rounds per size, at least (4x for small messages)")  # fmt: skip
    args = parser.parse_args()
    sizes = [s for s in DEFAULT_SIZES if s <= args.max_size]
    worlds = [None] if under_torchrun() else [int(w) for w in args.world_sizes.split(",")]

    results = {}
    for world in worlds:
        kwargs = dict(backend=args.backend, impl=args.impl, sizes=sizes, samples=args.samples)
        out = launch(world or 0, bench_rank, **kwargs)[0]
        results[world or dist.get_world_size()] = out
    if not main_rank():
        return
    acc = load_impl(args.impl, "accounting")
    names = [*ALGORITHMS, BUILTIN, EXCHANGE]
    table, csv_rows, fits, autos = [], [], {}, []
    for world, out in results.items():
        factor = 2 * (world - 1) / world
        for size, t, chosen in out["rows"]:
            cells = [world, _fmt_size(size)]
            runs = out["rounds"][size]
            intervals = {name: ratio_interval(runs[BUILTIN], runs[name]) for name in names}
            for name in names:
                csv_rows.append([world, size, name, t[name], factor * size / t[name] / 1e9, t[BUILTIN] / t[name],
                                 *intervals[name], len(runs[name])])  # fmt: skip
                cells.append(t[name] * 1e3)
            cells += [factor * size / t[BUILTIN] / 1e9] + [t[BUILTIN] / t[a] for a in [*ALGORITHMS, EXCHANGE]]
            cells += ["{:.2f}-{:.2f}".format(*intervals[a]) for a in ("auto", EXCHANGE)] + [chosen]
            table.append(cells)
            autos.append((t[BUILTIN] / t["auto"], world, _fmt_size(size), cells[-3], t[BUILTIN] / t[EXCHANGE]))
        fits[world] = _fit(acc, world, out["rows"])
    headers = ["world", "size", *(f"{n} ms" for n in names), "built-in busbw GB/s",
               *(f"{a} / built-in" for a in [*ALGORITHMS, EXCHANGE]), "auto 90% interval", "1-msg 90% interval",
               "auto picks"]  # fmt: skip
    backend = next(iter(results.values()))["backend"]
    print(f"\nall_reduce ({args.impl}) vs dist.all_reduce, backend {backend}, float32; ratios of bus bandwidth\n")
    print(format_table(headers, table))
    write_csv(args.out / "bench_collectives.csv", ["world", "bytes", "algorithm", "seconds", "busbw_GBps",
                                                    "ratio_to_builtin", "ratio_90_low", "ratio_90_high",
                                                    "rounds"], csv_rows)  # fmt: skip
    worst = min(autos)
    print(f"\nauto / built-in: worst {worst[0]:.2f} (world {worst[1]}, {worst[2]}; 90% interval {worst[3]}), "
          f"where one bare message reaches {worst[4]:.2f}")  # fmt: skip
    print(
        "(intervals: bootstrap over the rounds of this run; they do not cover a slower or faster spell of the "
        "machine in another run)"
    )
    _report_fits(acc, results, fits)
    print(f"\nplot: {_plot(acc, results, fits, args.out / 'bench_collectives.png', backend)}")


def _report_fits(acc, results, fits) -> None:
    """alpha, beta per world size, and the model's relative error at every measured point."""
    for world, fit in fits.items():
        alpha_used, beta_used = results[world]["alpha_beta"]
        print(f"\nworld {world}: auto uses alpha = {alpha_used:.3g} s, beta = {beta_used:.3g} s/B "
              f"(crossover {_crossover_text(acc, world, alpha_used, beta_used)})")  # fmt: skip
        if fit is None:
            continue
        alpha, beta = fit
        cross = _crossover_text(acc, world, alpha, beta)
        bandwidth = f"{1 / beta / 1e9:.3g} GB/s" if beta > 0 else "unbounded: these sizes show no cost per byte"
        print(f"world {world}: fitted alpha = {alpha:.3g} s, beta = {beta:.3g} s/B "
              f"(1/beta = {bandwidth}), crossover {cross}")  # fmt: skip
        errors = []
        for size, t, _ in results[world]["rows"]:
            for a in ("ring", "recursive_doubling"):
                model = acc.all_reduce_time(size, world, a, alpha, beta)
                errors.append((abs(model - t[a]) / t[a], a, size))
        err, a, size = max(errors)
        print(f"world {world}: model vs measured, worst relative error {err:.0%} ({a}, {_fmt_size(size)}); "
              f"median {statistics.median(e for e, _, _ in errors):.0%}")  # fmt: skip


def _crossover_text(acc, world: int, alpha: float, beta: float) -> str:
    try:
        cross = acc.all_reduce_crossover_bytes(world, alpha, beta)
    except (NotImplementedError, AttributeError):
        return "unknown before Task 1.7"
    return "none: recursive doubling always wins" if cross is None else f"{cross / 2**20:.3g} MiB"


def _plot(acc, results, fits, path, backend: str):
    """One panel per world size: measured time (markers), fitted model (lines), crossovers (vertical)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    worlds = list(results)
    fig, axes = plt.subplots(1, len(worlds), figsize=(6.5 * len(worlds), 4.8), squeeze=False)
    styles = {"ring": ("o", "C0"), "recursive_doubling": ("s", "C1"), "auto": ("^", "C2"), BUILTIN: ("x", "k"),
              EXCHANGE: ("+", "gray")}  # fmt: skip
    for ax, world in zip(axes[0], worlds):
        rows = results[world]["rows"]
        xs = [size for size, _, _ in rows]
        for name, (marker, color) in styles.items():
            ax.plot(xs, [t[name] for _, t, _ in rows], marker, color=color, label=f"{name} (measured)")
        fit = fits.get(world)
        if fit is not None:
            fine = [xs[0] * (xs[-1] / xs[0]) ** (i / 60) for i in range(61)]
            for a in ("ring", "recursive_doubling"):
                modelled = [acc.all_reduce_time(m, world, a, *fit) for m in fine]
                ax.plot(fine, modelled, "-", color=styles[a][1], alpha=0.6, label=f"{a} (model)")
        for label, (alpha, beta), style in [("auto's crossover", results[world]["alpha_beta"], "--"),
                                            ("fitted crossover", fit or (None, None), ":")]:  # fmt: skip
            cross = None
            if alpha is not None:
                try:
                    cross = acc.all_reduce_crossover_bytes(world, alpha, beta)
                except (NotImplementedError, AttributeError):
                    pass
            if cross is not None and xs[0] / 4 < cross < xs[-1] * 4:
                ax.axvline(cross, linestyle=style, color="gray", label=f"{label} {cross / 2**20:.2g} MiB")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("time per all-reduce (s)")
        ax.set_title(f"all-reduce, world {world} ({backend})")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


if __name__ == "__main__":
    main()
