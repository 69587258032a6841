"""Fault-tolerance benchmark: time from a killed rank to training again, restart from disk vs live recovery.

    python -m scripts.bench.fault_tolerance                          # gloo, N = 2 and 4, three widths: 2.4 min
    python -m scripts.bench.fault_tolerance --impl student --world-sizes 2
    python -m scripts.bench.fault_tolerance --widths 256,1024,2048 --repeats 5   # bigger states

The job is Task 10.5's (``fault_tolerance.train_job``: DDP over your ``all_reduce_gradients_flat``, a float64
MLP of layers width x width, AdamW, a committed checkpoint every --checkpoint-every steps). At step
--kill-step, rank N - 1 sends itself SIGKILL after its backward, so the survivors are waiting in the
gradient all-reduce. Two ways back:

    restart   your supervise() with one spare: every rank is relaunched (forked), loads the newest committed
              checkpoint (your load_checkpoint) and redoes the steps since it
    live      a hot spare waits beside the job; the survivors keep their processes and their state, join a new
              process group with the spare in the dead rank's place, and the spare receives the state from a
              healthy replica (your recover_replica): no disk, no lost step

Times are measured from the kill (``time.time()`` when the rank signalled itself; one machine, one clock):
``detect`` (the first survivor's PeerFailure), ``first step`` (the first optimizer step done after the
recovery: restart, the first step from the checkpoint; live, the killed step redone on its first rank) and
``caught up`` (step --kill-step done on every rank: the work the failure undid is redone), in that order
(the benchmark checks it). The table prints
medians over --repeats and the ratio restart / live of ``caught up`` with its 90% interval; the plot draws
``caught up`` against the replica's state size. Time with the defaults: 143 s measured on the 2-core course VM
while other jobs shared it (36 runs; each prints a line as it ends). Writes out/bench_fault_tolerance.{csv,png}.
Ranks are forked from this process (spawned on macOS: cs336_systems/platform_support.py), so this benchmark
runs on gloo (the job's logic is the same on NCCL).
"""

from __future__ import annotations

import argparse
import functools
import shutil
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
from torch import nn

from scripts.bench.common import add_common_args, format_table, load_impl, ratio_interval, save_plot, write_csv

DEADLINE_S = 120  # per attempt: a run that hangs fails with every rank's stack instead
_FT = None  # the implementation's fault_tolerance module, loaded in main() (forked ranks inherit it)


def live_job(rank, config, kill_step: int, impl: str) -> dict:
    """One rank of the live-recovery run: ranks 0..N-1 train, rank N is a hot spare. Returns its timestamps.
    ``impl`` loads the implementation in a spawned rank (macOS), which inherits no ``_FT``."""
    ft = _FT or load_impl(impl, "fault_tolerance")
    n, me = rank.world_size - 1, rank.rank
    train_group = dist.new_group(list(range(n)))  # the spare is in no training collective
    model = ft.build_model(config)
    optimizer = ft.make_optimizer(model.parameters())
    ft.init_adamw_state(optimizer)
    ddp = ft.ddp
    ends: dict[int, float] = {}
    out: dict = {}
    step = 0
    if me == n:  # the spare: wait for the launcher's notice that a training rank died
        while not (dead := [r for r in range(n) if rank.store.check([f"dead/{r}"])]):
            time.sleep(0.002)
        me, dead = dead[0], dead[0]
    else:
        # No on_failure: a survivor must live on. On gloo the all-reduce raises when its peer dies; on NCCL the
        # callback would abort the communicator (ProcessGroupNCCL.abort) so that the blocked wait returns.
        detector = ft.FailureDetector(rank.store, me, n, interval=config.heartbeat_interval,
                                      timeout=config.heartbeat_timeout)  # fmt: skip
        try:
            with detector:
                for step in range(config.steps):
                    _train_step(ft, ddp, model, optimizer, config, step, me, n, train_group, rank, detector)
                    ends[step] = time.time()
            return {"ends": ends}
        except ft.PeerFailure as failure:
            out["detected_at"], dead = failure.noticed_at, failure.dead_rank
            optimizer.zero_grad(set_to_none=True)  # the failed step's local grads were never averaged
    # A new process group of the survivors and the spare, the spare in the dead rank's place. The old groups
    # go first, their last references with them: closing their sockets is what wakes a survivor still blocked
    # on a live peer that has left the collective (gloo cannot abort a pending operation).
    del train_group
    dist.destroy_process_group()
    dist.init_process_group("gloo", store=dist.PrefixStore("live/", rank.store), rank=me, world_size=n)
    step = ft.recover_replica(model, optimizer, step, replaced=dead)
    out["recovered_at"] = time.time()
    for s in range(step, config.steps):
        _train_step(ft, ddp, model, optimizer, config, s, me, n, None, rank, None)
        ends[s] = time.time()
    out["ends"] = ends
    return out


def _train_step(ft, ddp, model, optimizer, config, step, me, n, group, rank, detector) -> None:
    x, y = ft.batch(config, step)
    rows = slice(me * config.global_batch // n, (me + 1) * config.global_batch // n)
    if detector is not None:
        detector.beat(step)
    nn.functional.mse_loss(model(x[rows]), y[rows]).backward()
    rank.reached(step, "sync")
    if detector is None:
        ddp.all_reduce_gradients_flat(model, group=group)
    else:
        with detector.waiting(f"the gradient all-reduce of step {step}"):
            ddp.all_reduce_gradients_flat(model, group=group)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def run_restart(config, world_size: int, kill_step: int) -> dict:
    ft = _FT
    fault = ft.FaultPlan(rank=world_size - 1, step=kill_step)
    history = ft.supervise(ft.train_job, config, world_size=world_size, spares=1, fault=fault, deadline=DEADLINE_S)
    first, last = history.attempts[0], history.attempts[-1]
    killed_at = first.outcomes[world_size - 1].fault_at
    ends = last.outcomes[0].value["step_ends"]
    detect = min(o.failure.noticed_at for o in first.outcomes if o.failure is not None)
    return {"detect": detect - killed_at, "first": ends[0] - killed_at,
            "caught_up": ends[kill_step - last.start_step] - killed_at}  # fmt: skip


def run_live(config, world_size: int, kill_step: int, impl: str) -> dict:
    ft = _FT
    fault = ft.FaultPlan(rank=world_size - 1, step=kill_step)
    outcomes = ft.launch(live_job, world_size + 1, config, kill_step, impl, fault=fault, deadline=DEADLINE_S,
                         grace=DEADLINE_S)  # fmt: skip
    bad = [o for o in outcomes if not o.ok and o.rank != world_size - 1]
    if bad:
        raise RuntimeError(f"the live-recovery run failed:\n{ft.describe_outcomes(outcomes)}")
    killed_at = outcomes[world_size - 1].fault_at
    values = [o.value for o in outcomes if o.ok]
    detect = min(v["detected_at"] for v in values if "detected_at" in v)
    # The first step done after the recovery: live recovery redoes the killed step first. (A step of a survivor
    # that ended after the kill but before it noticed, e.g. step kill_step - 1, is not a step after the failure.)
    first = min(v["ends"][kill_step] for v in values)
    caught_up = max(v["ends"][kill_step] for v in values)
    return {"detect": detect - killed_at, "first": first - killed_at, "caught_up": caught_up - killed_at}


def check_phases(method: str, phases: dict) -> None:
    """The phases of one run come in order: the failure is noticed, a step is done, the lost step is redone."""
    if not phases["detect"] <= phases["first"] <= phases["caught_up"]:
        raise RuntimeError(f"{method}: phases out of order (seconds after the kill): detect {phases['detect']:.3f}, "
                           f"first step {phases['first']:.3f}, caught up {phases['caught_up']:.3f}")  # fmt: skip


def state_megabytes(config) -> float:
    """Parameters, exp_avg and exp_avg_sq of the float64 model (a replica's state)."""
    return 3 * 8 * sum(p.numel() for p in _FT.build_model(config).parameters()) / 2**20


def main() -> None:
    global _FT
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--world-sizes", default="2,4", help="training ranks N (each >= 2), comma-separated")
    parser.add_argument("--widths", default="64,512,1024", help="model widths: layers width x width")
    parser.add_argument("--steps", type=int, default=8, help="steps of the job")
    parser.add_argument("--checkpoint-every", type=int, default=4, help="a committed checkpoint every k steps")
    parser.add_argument("--kill-step", type=int, default=7, help="the step at which rank N - 1 is killed")
    parser.add_argument("--repeats", type=int, default=3, help="runs per method and size")
    args = parser.parse_args()
    if args.backend != "gloo":
        parser.error("the job's ranks are forked from this process: --backend gloo only")
    if not 0 < args.kill_step < args.steps:
        parser.error(f"--kill-step must be in 1..{args.steps - 1}")
    torch.set_num_threads(1)  # the launcher picks gloo's interface (cs336_systems/platform_support.py)
    _FT = load_impl(args.impl, "fault_tolerance")
    live = functools.partial(run_live, impl=args.impl)
    worlds = [int(w) for w in args.world_sizes.split(",")]
    widths = [int(w) for w in args.widths.split(",")]
    rows, points = [], []
    total = len(worlds) * len(widths) * args.repeats * 2
    done = 0
    for n in worlds:
        for width in widths:
            times = {"restart": [], "live": []}
            for _ in range(args.repeats):
                for method, run in (("restart", run_restart), ("live", live)):
                    directory = tempfile.mkdtemp(prefix="cs336-bench-ft-")
                    try:
                        config = _FT.TrainConfig(directory=directory, steps=args.steps, dims=(width, width, width),
                                                 checkpoint_every=args.checkpoint_every, global_batch=12)  # fmt: skip
                        phases = run(config, n, args.kill_step)
                        check_phases(method, phases)
                        times[method].append(phases)
                    finally:
                        shutil.rmtree(directory, ignore_errors=True)
                    done += 1
                    print(f"[{done}/{total}] N={n} width={width} {method}: caught up "
                          f"{times[method][-1]['caught_up']:.2f} s after the kill", flush=True)  # fmt: skip
            megabytes = state_megabytes(config)
            med = {m: {k: statistics.median(t[k] for t in ts) for k in ts[0]} for m, ts in times.items()}
            low, high = ratio_interval([t["caught_up"] for t in times["restart"]],
                                       [t["caught_up"] for t in times["live"]])  # fmt: skip
            ratio = med["restart"]["caught_up"] / med["live"]["caught_up"]
            phases = [med[m][k] for m in ("restart", "live") for k in ("detect", "first", "caught_up")]
            rows.append([n, width, round(megabytes, 2), *phases, ratio, f"[{low:.2g}, {high:.2g}]"])
            points.append((n, megabytes, med["restart"]["caught_up"], med["live"]["caught_up"]))
    print()
    headers = ["N", "width", "state MB", "restart detect s", "restart first step s", "restart caught up s",
               "live detect s", "live first step s", "live caught up s", "restart/live", "90% interval"]  # fmt: skip
    print(format_table(headers, rows))
    write_csv(args.out / "bench_fault_tolerance.csv", headers, rows)

    def draw(ax) -> None:
        for n in worlds:
            mine = sorted((mb, r, li) for w, mb, r, li in points if w == n)
            ax.plot([p[0] for p in mine], [p[1] for p in mine], "o-", label=f"restart from disk, N={n}")
            ax.plot([p[0] for p in mine], [p[2] for p in mine], "s--", label=f"live recovery, N={n}")
        ax.set_xlabel("replica state (MB: parameters + AdamW state, float64)")
        ax.set_ylabel("seconds from the kill to the lost step done again")
        ax.set_title(f"Back to step {args.kill_step} after a SIGKILL (checkpoint every {args.checkpoint_every})")
        ax.legend()

    print(f"wrote {save_plot(args.out / 'bench_fault_tolerance.png', draw)}")


if __name__ == "__main__":
    main()
