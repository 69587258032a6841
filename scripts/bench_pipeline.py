"""Pipeline bubbles measured against (p - 1) / (m + p - 1), Gantt charts, and a real MLP step vs torch.

    python scripts/bench_pipeline.py                          # p in {2, 4}, m in {1, ..., 32}: ~1-2 min
    python scripts/bench_pipeline.py --impl student           # your PipelineStage
    python scripts/bench_pipeline.py --forward-ms 50 --steps 3 --d-model 1024   # steadier, bigger
    torchrun --standalone --nproc_per_node=4 scripts/bench_pipeline.py --backend nccl

Part 1, the bubble. Every stage is synthetic work of fixed length: its forward sleeps F ms and its
backward 2F ms, so timings are stable even on 2 shared cores. From each stage's ``.timeline`` the
bubble is 1 - (time spent in actions) / (p x step time), next to the formula; a Gantt chart per
schedule shows one row per stage (F blue, B orange). Part 2, a real step: ``DeepMLP`` cut into p
stages, one train step with our GPipe / 1F1B against ``torch.distributed.pipelining``'s
``ScheduleGPipe`` / ``Schedule1F1B`` on the same stages and batch. Under torchrun, p is the world
size. Writes out/bench_pipeline_{bubble,step}.csv, out/bench_pipeline_bubble.png and
out/bench_pipeline_gantt_{gpipe,1f1b}.png.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist
from benchlib import add_common_args, format_table, launch, load_impl, main_rank, save_plot, under_torchrun, write_csv
from torch import nn
from tqdm import tqdm

from cs336_systems.models import DeepMLP

SCHEDULES = ["gpipe", "1f1b"]
COLOURS = {"F": "tab:blue", "B": "tab:orange"}


class _Sleep(torch.autograd.Function):
    """Forward: sleep ``seconds``; backward: sleep twice that (a backward costs ~2 forwards)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, seconds: float) -> torch.Tensor:
        ctx.seconds = seconds
        time.sleep(seconds)
        return x.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        time.sleep(2 * ctx.seconds)
        return grad.clone(), None


class SyntheticStage(nn.Module):
    """A stage whose cost is fixed: (mb, 4) -> (mb, 4), with one parameter so it has a grad."""

    def __init__(self, forward_s: float) -> None:
        super().__init__()
        self.forward_s = forward_s
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Sleep.apply(x * self.scale, self.forward_s)


def _gathered(obj) -> list:
    """Every rank's ``obj``, on every rank (so the main rank can judge under torchrun too)."""
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def bubble_rank(rank, world_size, device, impl, microbatches, forward_ms, steps):
    """For each (m, schedule): the timeline of every stage, times relative to a shared barrier."""
    P = load_impl(impl, "pipeline")
    stage = P.PipelineStage(SyntheticStage(forward_ms / 1000).to(device), rank, world_size, nn.MSELoss())
    results = {}
    todo = [(m, s) for m in microbatches for s in SCHEDULES]
    for m, schedule in tqdm(todo, disable=rank != 0, desc=f"bubble, p={world_size}", leave=False):
        x = torch.randn(m, 4, device=device)  # microbatches of one example: the work is the sleep
        runs = []
        for _ in range(steps):
            dist.barrier()  # every rank leaves at about the same moment: a common time origin
            origin = time.perf_counter()
            stage.train_step(x, x, m, schedule=schedule)
            runs.append([(a.kind, a.microbatch, t0 - origin, t1 - origin) for a, t0, t1 in stage.timeline])
        results[(m, schedule)] = runs[1:] if steps > 1 else runs  # the first step warms up
    return _gathered(results)


def measured_bubble(timelines: list[list[tuple]]) -> float:
    """1 - busy / (p x makespan) for one step, from every stage's timeline."""
    makespan = max(t1 for tl in timelines for *_, t1 in tl)
    busy = sum(t1 - t0 for tl in timelines for *_, t0, t1 in tl)
    return 1 - busy / (len(timelines) * makespan)


def step_rank(rank, world_size, device, impl, d_model, layers, batch, m, steps):
    """Seconds per train step (median, slowest rank) of ours and torch's, both schedules."""
    from torch.distributed.pipelining import PipelineStage as TorchStage
    from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe

    P = load_impl(impl, "pipeline")
    torch.manual_seed(0)
    module = P.split_into_stages(DeepMLP(layers, d_model, 4 * d_model), world_size)[rank].to(device)
    x, y = torch.randn(batch, d_model, device=device), torch.randn(batch, d_model, device=device)
    first, last = rank == 0, rank == world_size - 1
    ours = P.PipelineStage(module, rank, world_size, nn.MSELoss())
    theirs = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}
    torch_stage = TorchStage(module, rank, world_size, device)

    def torch_step(schedule):
        if first:
            schedule.step(x)
        elif last:
            schedule.step(target=y, losses=[])
        else:
            schedule.step()

    rows = []
    for name in SCHEDULES:
        torch_schedule = theirs[name](torch_stage, m, loss_fn=nn.MSELoss())
        candidates = {
            "ours": lambda name=name: ours.train_step(x, y, m, schedule=name),
            "torch": lambda sched=torch_schedule: torch_step(sched),
        }
        times = {k: [] for k in candidates}
        for i in range(steps + 1):
            for label, fn in candidates.items():  # interleaved, so machine noise hits both alike
                module.zero_grad()
                dist.barrier()
                start = time.perf_counter()
                fn()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
                dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # a step ends when its slowest stage does
                if i > 0:  # step 0 warms up (torch exchanges shapes then)
                    times[label].append(elapsed.item())
        rows.append((name, statistics.median(times["ours"]), statistics.median(times["torch"])))
    return rows


def draw_gantt(ax, timelines, title: str) -> None:
    for s, tl in enumerate(timelines):
        for kind, mb, t0, t1 in tl:
            ax.broken_barh([(t0 * 1e3, (t1 - t0) * 1e3)], (s - 0.4, 0.8), color=COLOURS[kind], edgecolor="white")
            ax.text((t0 + t1) / 2 * 1e3, s, str(mb), ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(len(timelines)), [f"stage {s}" for s in range(len(timelines))])
    ax.invert_yaxis()
    ax.set_xlabel("time since the step started (ms)")
    ax.set_title(title + "   (blue: forward, orange: backward, label: microbatch)")


def formula(impl: str):
    """The accounting part's bubble formula: the implementation's own, or the reference's if it is a stub."""
    fn = load_impl(impl, "accounting").pipeline_bubble_fraction
    try:
        fn(2, 2)
        return fn
    except NotImplementedError:
        print("(accounting.pipeline_bubble_fraction is not implemented yet: using the reference's formula)")
        return load_impl("reference", "accounting").pipeline_bubble_fraction


def preflight(impl: str) -> None:
    """Fail here, with the handout's pointer, rather than in a rank (where the others would wait)."""
    P = load_impl(impl, "pipeline")
    try:
        P.split_into_stages(nn.Sequential(nn.Identity(), nn.Identity()), 2)
        P.gpipe_schedule(2, 2, 0), P.one_f_one_b_schedule(2, 2, 0)
    except NotImplementedError as exc:
        raise SystemExit(f"--impl {impl}: pipeline is not implemented yet: {exc}") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--stages", default="2,4", help="pipeline sizes p, standalone (under torchrun: world size)")
    parser.add_argument("--microbatches", default="1,2,4,8,16,32", help="microbatch counts m for the bubble table")
    parser.add_argument("--forward-ms", type=float, default=25.0, help="synthetic forward time F (backward = 2F)")
    parser.add_argument("--steps", type=int, default=2, help="steps per measurement (the first warms up)")
    parser.add_argument("--gantt", default="4,8", help="p,m of the Gantt charts (default 4,8)")
    parser.add_argument("--d-model", type=int, default=256, help="width of the real DeepMLP (d_ff = 4 d_model)")
    parser.add_argument("--layers", type=int, default=8, help="residual blocks of the real DeepMLP")
    parser.add_argument("--batch", type=int, default=64, help="batch of the real step")
    parser.add_argument("--step-microbatches", type=int, default=8, help="m of the real step")
    parser.add_argument("--step-repeats", type=int, default=5, help="timed real steps (median), after one warm-up")
    args = parser.parse_args()
    stages = [None] if under_torchrun() else [int(p) for p in args.stages.split(",")]
    microbatches = [int(m) for m in args.microbatches.split(",")]
    gantt_p, gantt_m = (int(v) for v in args.gantt.split(","))
    preflight(args.impl)
    bubble_of = formula(args.impl)

    bubble_rows, step_rows, gantts, curves = [], [], {}, {}
    for p in stages:
        kw = dict(backend=args.backend, impl=args.impl, microbatches=microbatches, forward_ms=args.forward_ms)
        per_rank = launch(p or 0, bubble_rank, steps=args.steps, **kw)[0]
        p = p or dist.get_world_size()
        for m in microbatches:
            row = [p, m, 100 * bubble_of(p, m)]
            for schedule in SCHEDULES:
                runs = [
                    [per_rank[s][(m, schedule)][k] for s in range(p)] for k in range(len(per_rank[0][(m, schedule)]))
                ]
                row.append(100 * statistics.median(measured_bubble(tl) for tl in runs))
                curves.setdefault((p, schedule), []).append((m, row[-1]))
                if (p, m) == (gantt_p, gantt_m):
                    gantts[schedule] = runs[-1]
            bubble_rows.append([*row, max(abs(row[3] - row[2]), abs(row[4] - row[2]))])
        kw = dict(d_model=args.d_model, layers=args.layers, batch=args.batch, m=args.step_microbatches)
        for name, ours, theirs in launch(p if not under_torchrun() else 0, step_rank, backend=args.backend,
                                         impl=args.impl, steps=args.step_repeats, **kw)[0]:  # fmt: skip
            step_rows.append([p, name, args.step_microbatches, 1e3 * ours, 1e3 * theirs, ours / theirs])
    if not main_rank():
        return

    headers = ["p", "m", "formula %", "GPipe measured %", "1F1B measured %", "max |diff| (pp)"]
    print(f"\nBubble, synthetic stages (F = {args.forward_ms:g} ms, B = 2F), {args.backend}:\n")
    print(format_table(headers, bubble_rows, floatfmt=".1f"))
    step_headers = ["p", "schedule", "m", "ours ms", "torch.distributed.pipelining ms", "ours / torch"]
    print(f"\nOne train step of DeepMLP({args.layers}, {args.d_model}, {4 * args.d_model}), batch {args.batch}:\n")
    print(format_table(step_headers, step_rows, floatfmt=".2f"))
    write_csv(args.out / "bench_pipeline_bubble.csv", headers, bubble_rows)
    write_csv(args.out / "bench_pipeline_step.csv", step_headers, step_rows)

    def draw_curves(ax):
        for p in sorted({p for p, _ in curves}):
            ms = [m for m, _ in curves[(p, "gpipe")]]
            ax.plot(ms, [100 * bubble_of(p, m) for m in ms], "k--", lw=1)
            for schedule, marker in zip(SCHEDULES, "os"):
                ax.plot(ms, [b for _, b in curves[(p, schedule)]], marker, label=f"p={p}, {schedule} (measured)")
        ax.set(xscale="log", xlabel="microbatches m", ylabel="bubble (% of the step)",
               title="Measured bubble vs (p - 1) / (m + p - 1) (dashed)")  # fmt: skip
        ax.legend()

    paths = [save_plot(args.out / "bench_pipeline_bubble.png", draw_curves)]
    for schedule, timelines in gantts.items():
        title = f"{'GPipe' if schedule == 'gpipe' else '1F1B'}, p={gantt_p}, m={gantt_m}"
        paths.append(
            save_plot(
                args.out / f"bench_pipeline_gantt_{schedule}.png",
                lambda ax, tl=timelines, t=title: draw_gantt(ax, tl, t),
            )
        )
    print("\nWrote " + ", ".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
