"""Oracles and shared rank functions for Part 10's restart and live-recovery tests (Tasks 10.5-10.6).

The oracle restates the job's specification (``fault_tolerance.TrainConfig``, ``build_model``, ``batch``)
in one process: the float64 MLP with parameters drawn from ``Generator(seed)`` in ``parameters()`` order
(``randn * 0.5``), step s's global batch drawn from ``Generator(seed * 100003 + s)`` (inputs, then targets),
mean-squared error, AdamW(lr 0.05, weight decay 0.01). A data-parallel run of any world size over the same
global batch, interrupted or not, must end with these parameters up to the order of additions.

The rank functions return plain values (no object of the implementation), so the parent judges
without importing it.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from pathlib import Path

import torch
from torch import nn

from tests.harness import run_ranks
from tests.harness.run import need_gpus

CONFIG = {"steps": 6, "global_batch": 12, "checkpoint_every": 2, "dims": (5, 7, 3), "seed": 0}


def global_batch_for(world_size: int) -> int:
    """The smallest multiple of 12 that ``world_size`` divides (12 at world sizes 1, 2, 3, 4, 6; 24 at 8;
    60 at 5; 84 at 7): every rank takes the same number of rows, at every world size the harness accepts."""
    return math.lcm(CONFIG["global_batch"], world_size)


TIMEOUT_S = 1.0  # the detector's heartbeat timeout in these tests (TrainConfig.heartbeat_timeout)
SLACK_S = 2.0  # what a loaded 2-core machine may add to a detection on top of the timeout
ATTEMPT_DEADLINE_S = 15.0  # launch's deadline per attempt; an attempt takes 1-5 s on 2 loaded cores
MAX_ATTEMPTS = 3  # supervise's default max_restarts (2) + 1
# The harness's deadline for a supervised job: every attempt at its deadline, and the rest of the test.
SUPERVISED_DEADLINE_S = MAX_ATTEMPTS * ATTEMPT_DEADLINE_S + 15.0


def oracle_model(dims=CONFIG["dims"], seed: int = CONFIG["seed"]) -> nn.Sequential:
    d_in, d_hidden, d_out = dims
    gen = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(d_in, d_hidden), nn.Tanh(), nn.Linear(d_hidden, d_out)).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.5)
    return model


def oracle_batch(step: int, global_batch: int = CONFIG["global_batch"], dims=CONFIG["dims"], seed: int = 0):
    gen = torch.Generator().manual_seed(seed * 100_003 + step)
    x = torch.randn(global_batch, dims[0], generator=gen, dtype=torch.float64)
    y = torch.randn(global_batch, dims[2], generator=gen, dtype=torch.float64)
    return x, y


def uninterrupted(steps: int = CONFIG["steps"], **config) -> dict[str, torch.Tensor]:
    """The parameters after ``steps`` AdamW steps of one process on every step's whole global batch."""
    config = {**CONFIG, **config}
    model = oracle_model(config["dims"], config["seed"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.01)
    for step in range(steps):
        x, y = oracle_batch(step, config["global_batch"], config["dims"], config["seed"])
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# -- Task 10.5: a supervised job, summarized as plain values ------------------------------------------


def _failure(f) -> dict | None:
    if f is None:
        return None
    return {"rank": f.rank, "dead_rank": f.dead_rank, "step": f.step, "waiting_for": f.waiting_for, "how": f.how,
            "noticed_at": f.noticed_at, "message": str(f)}  # fmt: skip


def run_job(fn, world_size: int, *args, **kwargs) -> list:
    """``run_ranks(1, fn, world_size, ...)``: one test rank whose ``fn`` starts a job of ``world_size`` ranks
    through the launcher. On NCCL each job rank needs a GPU of its own ("Duplicate GPU detected"): with fewer,
    the test skips, naming how many it needs (``need_gpus``, tests/harness/run.py)."""
    need_gpus(world_size, f"a job of {world_size} ranks (started through the launcher)")
    return run_ranks(1, fn, world_size, *args, **kwargs)


def supervise_rank(ctx, world_size: int, config: dict, *, spares: int, fault: dict | None,
                   deadline: float = ATTEMPT_DEADLINE_S):  # fmt: skip
    """Run ``supervise(train_job, ...)`` from this rank (it forks the job's ranks) and summarize what happened:
    every attempt's world size, start step and per-rank outcome, the steps left on disk, the final values."""
    ft = ctx.load("fault_tolerance")
    directory = tempfile.mkdtemp(prefix="cs336-ft-")
    try:
        cfg = ft.TrainConfig(directory=directory, heartbeat_timeout=TIMEOUT_S, **config)
        plan = ft.FaultPlan(**fault) if fault else None
        try:
            history = ft.supervise(ft.train_job, cfg, world_size=world_size, spares=spares, fault=plan,
                                   deadline=deadline, grace=3.0)  # fmt: skip
        except RuntimeError as exc:  # the message is the teaching part: the parent shows it
            return {"raised": f"{type(exc).__name__}: {exc}"}
        attempts = [
            {"world_size": a.world_size, "start_step": a.start_step,
             "outcomes": [{"rank": o.rank, "ok": o.ok, "died": o.died, "exitcode": o.exitcode, "error": o.error,
                           "failure": _failure(o.failure), "fault_at": o.fault_at, "stacks": o.stacks}
                          for o in a.outcomes]}
            for a in history.attempts
        ]  # fmt: skip
        return {"attempts": attempts, "result": history.result,
                "folders": sorted(p.name for p in Path(directory).iterdir())}  # fmt: skip
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def scripted_job(rank, config, start_step: int = 0) -> dict:
    """A job without training, for the supervisor's policy: each rank of each attempt does what
    ``<config.directory>/script.json`` says (``{"<attempt>": {"<rank>": action}}``, default ``"ok"``):
    ``"ok"`` returns, ``"die"`` SIGKILLs itself, ``"bug"`` raises ZeroDivisionError (a rank's own error),
    ``"name:<r>"`` raises ``PeerFailure`` naming rank r once every ``"ok"`` rank has returned (so the named
    rank finished: it is failed only because a survivor says so). Rank 0 logs each attempt it ran."""
    import json
    import os
    import signal as signals
    import time

    folder = Path(config.directory)
    script = json.loads((folder / "script.json").read_text())
    actions = {int(r): a for r, a in script.get(str(rank.attempt), {}).items()}
    action = actions.get(rank.rank, "ok")
    if rank.rank == 0:
        with open(folder / "attempts.log", "a") as log:
            log.write(f"{rank.attempt} {rank.world_size} {start_step}\n")
    if action == "die":
        os.kill(os.getpid(), signals.SIGKILL)
    if action == "bug":
        1 / 0  # noqa: B018 - the rank's own bug
    if action.startswith("name:"):
        oks = [r for r in range(rank.world_size) if actions.get(r, "ok") == "ok"]
        if oks:
            rank.store.wait([f"returned/{r}" for r in oks])
            # launch kills ranks still running once every rank left is named: let the named one's report land
            time.sleep(0.5)
        from cs336_systems.launcher import PeerFailure  # given code: the staff's copy

        raise PeerFailure(rank.rank, int(action[5:]), 0, "a scripted wait", "scripted: no heartbeat")
    rank.store.set(f"returned/{rank.rank}", "1")
    return {"attempt": rank.attempt, "world_size": rank.world_size}


def policy_rank(ctx, world_size: int, script: dict, spares: int, max_restarts: int = 2) -> dict:
    """``supervise(scripted_job, ...)`` on a script of actions per attempt and rank; what it launched (from
    rank 0's log: attempt, world size, start step) and how it ended (its history, or what it raised)."""
    import json

    ft = ctx.load("fault_tolerance")
    directory = tempfile.mkdtemp(prefix="cs336-ft-policy-")
    try:
        (Path(directory) / "script.json").write_text(json.dumps(script))
        cfg = ft.TrainConfig(directory=directory)
        out: dict = {"raised": None, "attempts": None}
        try:
            history = ft.supervise(scripted_job, cfg, world_size=world_size, spares=spares,
                                   max_restarts=max_restarts, deadline=20.0, grace=5.0)  # fmt: skip
            out["attempts"] = [(a.world_size, a.start_step) for a in history.attempts]
        except Exception as exc:  # noqa: BLE001 - what supervise raised is the result
            out["raised"] = f"{type(exc).__name__}: {exc}"
        log = Path(directory) / "attempts.log"
        out["launched"] = [tuple(int(x) for x in line.split()) for line in log.read_text().splitlines()] if (
            log.exists()) else []  # fmt: skip
        return out
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def describe(summary: dict) -> str:
    """What the supervised job did, attempt by attempt, rank by rank: the text of a failed check."""
    if "raised" in summary:
        return f"supervise raised:\n{summary['raised']}"
    lines = []
    for i, a in enumerate(summary["attempts"]):
        lines.append(f"attempt {i}: world size {a['world_size']}, from step {a['start_step']}")
        for o in a["outcomes"]:
            if o["failure"]:
                state = f"reported: {o['failure']['message']}"
            elif o["ok"]:
                state = "finished"
            else:
                state = f"ended with exit code {o['exitcode']}" + (
                    f": {o['error'].strip()[-1500:]}" if o["error"] else ""
                )
            lines.append(f"  rank {o['rank']}: {state}")
            if o["stacks"]:
                lines.append("  its stack when the launcher killed it:\n" + o["stacks"][-1500:])
    lines.append(f"step folders left on disk: {summary['folders']}")
    return "\n".join(lines)


def check_survivors_noticed(summary: dict, fault: dict, *, expect_step: int, expect_waiting: str,
                            expect_how: str) -> None:  # fmt: skip
    """Every survivor of the first attempt reported a ``PeerFailure`` naming the faulty rank, its step, what
    the survivor waited for and how it noticed, within the timeout plus slack of the fault."""
    if "raised" in summary and "without a report" in summary["raised"] and "--- rank" in summary["raised"]:
        raise AssertionError(
            f"{describe(summary)}\n\nA survivor's collective raised (the peer's socket closed) and the error went "
            f"through as a bug, though rank {fault['rank']} had just died. `waiting` must turn such an error into a "
            "PeerFailure, and the launcher's notice (dead/<rank>) may come a few milliseconds after the socket "
            "closes: wait up to `timeout` for a failed peer before letting the error through (the grace wait, "
            "handouts/10-failures.md §10.5)."
        )
    assert "raised" not in summary, describe(summary)
    first = summary["attempts"][0]
    dead = fault["rank"]
    assert dead < len(first["outcomes"]), (
        f"the fault names rank {dead}, but the first attempt ran {len(first['outcomes'])} ranks\n{describe(summary)}"
    )
    killed = first["outcomes"][dead]
    assert killed["fault_at"] is not None, f"rank {dead} never reached step {fault['step']}\n{describe(summary)}"
    for o in first["outcomes"]:
        if o["rank"] == dead:
            continue
        f = o["failure"]
        assert f is not None, (
            f"rank {o['rank']} survived rank {dead}'s fault but did not report a PeerFailure\n{describe(summary)}"
        )
        got = (f["rank"], f["dead_rank"], f["step"])
        assert got == (o["rank"], dead, expect_step), (
            f"rank {o['rank']}'s PeerFailure says (reporter, dead rank, step) = {got}, expected "
            f"{(o['rank'], dead, expect_step)}\n{describe(summary)}"
        )
        assert expect_waiting in f["waiting_for"], (
            f"rank {o['rank']} says it waited for {f['waiting_for']!r}; it was waiting for {expect_waiting}"
        )
        assert expect_how in f["how"], f"rank {o['rank']} noticed it by {f['how']!r}, expected {expect_how!r}"
        assert expect_waiting in f["message"] and f"rank {dead}" in f["message"], f"message: {f['message']!r}"
        took = f["noticed_at"] - killed["fault_at"]
        limit = TIMEOUT_S + SLACK_S
        assert took < limit, f"rank {o['rank']} noticed rank {dead}'s fault after {took:.2f} s (limit {limit} s)"


def check_final_parameters(summary: dict, expected: dict[str, torch.Tensor]) -> None:
    """Every rank of the last attempt ends with the uninterrupted run's parameters (float64 tolerance)."""
    from tests.harness import assert_close

    assert "raised" not in summary, describe(summary)
    for rank, value in enumerate(summary["result"]):
        for name, want in expected.items():
            assert_close(value["params"][name], want, what=f"rank {rank} of the last attempt, parameter {name}")


def plan_restart_rank(ctx) -> dict:
    """Steps 2, 4 and 6 saved at world 1; step 4 loses its commit marker, step 6 gets a truncated file; then
    ``plan_restart`` for several (healthy, global batch) pairs, and once on an empty folder."""
    ft, ckpt = ctx.load("fault_tolerance"), ctx.load("checkpoint")
    directory, empty = tempfile.mkdtemp(prefix="cs336-ft-"), tempfile.mkdtemp(prefix="cs336-ft-")
    try:
        state = {"w": torch.arange(6.0, device=ctx.device), "step": 0}
        for step in (2, 4, 6):
            ckpt.save_checkpoint(state, directory, step)
        (ckpt.step_directory(directory, 4) / ckpt.COMMIT_MARKER).unlink()
        six = ckpt.step_directory(directory, 6)
        biggest = max((p for p in six.iterdir() if p.name != ckpt.COMMIT_MARKER), key=lambda p: p.stat().st_size)
        biggest.write_bytes(biggest.read_bytes()[: biggest.stat().st_size // 2])
        plans = {}
        for healthy, batch in [(4, 12), (3, 12), (5, 12), (7, 12), (3, 8), (1, 12)]:
            plan = ft.plan_restart(directory, healthy=healthy, global_batch=batch)
            plans[(healthy, batch)] = (plan.step, plan.world_size)
        plan = ft.plan_restart(empty, healthy=4, global_batch=12)
        return {"plans": plans, "empty": (plan.step, plan.world_size)}
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(empty, ignore_errors=True)


def _beat_forever(store, rank: int, step: int, stop) -> None:
    count = 0
    while not stop.wait(0.02):
        count += 1
        store.set(f"heartbeat/{rank}", f"{count} {step}")


def detector_rank(ctx, scenario: str) -> dict:
    """A ``FailureDetector`` of rank 0 on an in-process store, with peers played by threads (``peers``) or by
    the test (``waiting``); what it reports, and when."""
    import threading
    import time

    import torch.distributed as dist

    ft = ctx.load("fault_tolerance")
    store, stop = dist.HashStore(), threading.Event()
    out: dict = {}
    if scenario == "peers":  # peer 1 beats once and falls silent, 2 and 3 keep beating; later 1 stops, 2 dies
        store.set("heartbeat/1", "1 7")
        beaters = [threading.Thread(target=_beat_forever, args=(store, r, 3, stop), daemon=True) for r in (2, 3)]
        for t in beaters:
            t.start()
        det = ft.FailureDetector(store, 0, 4, interval=0.02, timeout=0.3).start()
        start, first, beating = time.monotonic(), None, None
        while time.monotonic() - start < 0.9:
            found = det.failed_peer()
            if found is not None and found[0] == 3:
                beating = found
            if found is not None and found[0] == 1 and first is None:
                first = (tuple(found), time.monotonic() - start)
            time.sleep(0.02)
        out["beating_peer_failed"] = beating
        out["early"] = first if first is not None and first[1] < 0.25 else None
        out["silent"] = first[0] if first is not None else None
        store.set("heartbeat/1", "stopped")
        time.sleep(0.1)
        out["stopped"] = det.failed_peer()
        store.set("dead/2", "-9")
        noticed = time.monotonic()
        out["dead"] = det.failed_peer()
        out["dead_took"] = time.monotonic() - noticed
        det.stop()
        # A peer that never beats at all: its timeout runs from start(), and its step is None.
        lone = ft.FailureDetector(dist.HashStore(), 0, 2, interval=0.02, timeout=0.3).start()
        time.sleep(0.5)
        found = lone.failed_peer()
        out["never_seen"] = None if found is None else tuple(found[:2])
        lone.stop()
    elif scenario == "on_failure":  # peer 1 falls silent outside any wait, then (another store) inside one
        calls: list = []

        def on_failure(failure) -> None:
            calls.append(time.monotonic())

        beater = threading.Thread(target=_beat_forever, args=(store, 1, 0, stop), daemon=True)
        beater.start()
        det = ft.FailureDetector(store, 0, 2, interval=0.02, timeout=0.3, on_failure=on_failure).start()
        stop.set()
        beater.join()
        time.sleep(0.8)  # rank 1 has failed for 0.5 s, but this rank waits for nothing
        out["outside"] = len(calls)
        det.stop()
        store, stop, calls = dist.HashStore(), threading.Event(), []
        beater = threading.Thread(target=_beat_forever, args=(store, 1, 0, stop), daemon=True)
        beater.start()
        det = ft.FailureDetector(store, 0, 2, interval=0.02, timeout=0.3, on_failure=on_failure).start()
        time.sleep(0.1)
        with det.waiting("the gradient all-reduce of step 0"):
            stop.set()
            silent_from = time.monotonic()
            time.sleep(1.0)  # blocked: rank 1 fails after 0.3 s, then 35 intervals of the heartbeat thread
        out["inside"] = len(calls)
        out["first_took"] = calls[0] - silent_from if calls else None
        det.stop()
    else:  # waiting: an error with a healthy peer, an error after a death, a body blocked on a silent peer
        beater = threading.Thread(target=_beat_forever, args=(store, 1, 4, stop), daemon=True)
        beater.start()
        det = ft.FailureDetector(store, 0, 2, interval=0.02, timeout=0.3).start()
        try:
            with det.waiting("a step"):
                1 / 0  # noqa: B018 - an error that has nothing to do with the peers
        except Exception as exc:  # noqa: BLE001
            out["passed_through"] = type(exc).__name__
        out["converted"], out["converted_other"] = None, None
        try:
            with det.waiting("the all-reduce of step 4"):
                store.set("dead/1", "-9")  # the peer dies during the collective, which then fails
                raise RuntimeError("Connection closed by peer")
        except Exception as exc:  # noqa: BLE001
            if type(exc).__name__ == "PeerFailure":
                out["converted"] = (exc.rank, exc.dead_rank, exc.step, exc.waiting_for)
                cause = exc.__cause__
                out["cause"] = None if cause is None else f"{type(cause).__name__}: {cause}"
            else:
                out["converted_other"] = f"{type(exc).__name__}: {exc}"
        det.stop()
        stop.set()
        beater.join()
        # A body blocked on a peer that falls silent: the detector's thread must call on_failure.
        store2, stop2, calls = dist.HashStore(), threading.Event(), []
        beater = threading.Thread(target=_beat_forever, args=(store2, 1, 2, stop2), daemon=True)
        beater.start()

        def on_failure(failure) -> None:
            calls.append((failure.waiting_for, time.monotonic()))

        det = ft.FailureDetector(store2, 0, 2, interval=0.02, timeout=0.3, on_failure=on_failure).start()
        time.sleep(0.1)
        stop2.set()
        silent_from = time.monotonic()
        with det.waiting("the gradient all-reduce of step 2"):
            while not calls and time.monotonic() - silent_from < 3.0:
                time.sleep(0.01)  # blocked, as in a collective that never returns
        out["on_failure"] = (calls[0][0],) if calls else None
        out["on_failure_took"] = calls[0][1] - silent_from if calls else float("inf")
        det.stop()
    stop.set()
    return out


# -- Task 10.6: live recovery -----------------------------------------------------------------------------


def replica_state_numels() -> list[int]:
    """The elements of each tensor of a replica's state in key order (``sorted`` over the keys, as
    ``send_replica_state`` promises): "optim/<name>/exp_avg", ".../exp_avg_sq", ".../step", "param/<name>"."""
    keys = {}
    for name, p in oracle_model().named_parameters():
        keys[f"param/{name}"] = p.numel()
        for entry, numel in (("exp_avg", p.numel()), ("exp_avg_sq", p.numel()), ("step", 1)):
            keys[f"optim/{name}/{entry}"] = numel
    return [keys[k] for k in sorted(keys)]


def replica_state_bytes() -> tuple[int, int]:
    """(bytes, tensors) of a replica's state of the oracle model under AdamW: each parameter, its exp_avg and
    exp_avg_sq (float64) and its step (a float32 scalar)."""
    params = list(oracle_model().parameters())
    return sum(3 * p.numel() * 8 + 4 for p in params), 4 * len(params)


def live_recovery_rank(ctx, replaced: int, steps_before: int, steps_after: int, group_ranks=None) -> dict:
    """DDP (your ``all_reduce_gradients_flat``) over ``group_ranks`` (default: the world); after ``steps_before``
    steps rank ``replaced`` starts over (another model, an empty AdamW, step 0) and ``recover_replica`` runs
    under the recorder; then ``steps_after`` more steps."""
    import torch.distributed as dist

    from tests.harness.recorder import CommRecorder

    ft, ddp = ctx.load("fault_tolerance"), ctx.load("ddp")
    group = None
    ranks = list(range(ctx.world_size))
    if group_ranks is not None:  # several independent replica groups: every rank makes every group
        groups = [dist.new_group(g) for g in group_ranks]
        ranks = next(g for g in group_ranks if ctx.rank in g)
        group = groups[group_ranks.index(ranks)]
    me, n = ranks.index(ctx.rank), len(ranks)

    def fresh(seed: int):
        model = oracle_model(seed=seed).to(ctx.device)
        return model, torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.01)

    rows_total = global_batch_for(n)  # every replica takes the same number of rows: an even split

    def train(step: int) -> None:
        x, y = (t.to(ctx.device) for t in oracle_batch(step, rows_total))
        rows = slice(me * x.shape[0] // n, (me + 1) * x.shape[0] // n)
        nn.functional.mse_loss(model(x[rows]), y[rows]).backward()
        ddp.all_reduce_gradients_flat(model, group=group)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    model, optimizer = fresh(0)
    for step in range(steps_before):
        train(step)
    step = steps_before
    if ctx.rank == replaced:  # a new process on a new node: nothing of the old replica survives
        model, optimizer = fresh(1234)
        step = 0
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    with CommRecorder() as rec:
        if replaced in ranks:  # other replica groups have nothing to recover
            step = ft.recover_replica(model, optimizer, step, replaced=replaced, group=group)
    after = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for s in range(step, step + steps_after):
        train(s)
    return {"events": rec.events, "step": step, "before": before, "after": after,
            "params": {k: v.detach().clone() for k, v in model.state_dict().items()}}  # fmt: skip


def check_live_recovery(outs: list, *, replaced: int, healthy: int, steps_before: int, steps_after: int,
                        replicas: int | None = None) -> None:  # fmt: skip
    """Judge ``live_recovery_rank``'s results: ``healthy`` only sends to ``replaced`` (an int64 length, a uint8
    header, then exactly the state's tensors), ``replaced`` only receives from it, nobody else communicates or
    changes, every rank is at ``steps_before`` after recovery and ends as an uninterrupted run."""
    from tests.harness import assert_close
    from tests.harness.recorder import format_events

    state_bytes, state_tensors = replica_state_bytes()
    for rank, out in enumerate(outs):
        events = [e for e in out["events"] if e.op != "wait"]
        assert out["step"] == steps_before, (
            f"rank {rank}: recover_replica returned step {out['step']}, expected {steps_before}"
        )
        if rank == healthy:
            assert events and all(e.op == "send" and e.peer == replaced for e in events), (
                f"rank {rank} (healthy) must only send to rank {replaced}:\n{format_events(events)}"
            )
            header = [(e.dtype, e.numel) for e in events[:2]]
            assert len(events) > 2 and header[0] == ("int64", 1) and header[1][0] == "uint8", (
                f"rank {rank} should send the header's length (one int64), the header (uint8), then the tensors; "
                f"sent {header}\n{format_events(events)}"
            )
            sent = sum(e.nbytes for e in events[2:])
            assert (len(events[2:]), sent) == (state_tensors, state_bytes), (
                f"after the header, rank {rank} sent {len(events[2:])} tensors of {sent} bytes; the state is "
                f"{state_tensors} tensors of {state_bytes} bytes (parameters, exp_avg, exp_avg_sq, step)\n"
                f"{format_events(events)}"
            )
            order = [e.numel for e in events[2:]]
            assert order == replica_state_numels(), (
                f"rank {rank} sent the state's tensors with {order} elements; in key order (sorted keys: optim/... "
                f"before param/...) they have {replica_state_numels()}\n{format_events(events)}"
            )
        elif rank == replaced:
            assert events and all(e.op == "recv" and e.peer == healthy for e in events), (
                f"rank {rank} (replaced) must only receive from rank {healthy}:\n{format_events(events)}"
            )
        else:
            assert not events, f"rank {rank}, neither replaced nor the source, communicated:\n{format_events(events)}"
        if rank != replaced:
            for name, before in out["before"].items():
                assert torch.equal(out["after"][name], before), f"rank {rank} (healthy) had {name} changed by recovery"
    expected = uninterrupted(steps=steps_before + steps_after, global_batch=global_batch_for(replicas or len(outs)))
    for rank, out in enumerate(outs):
        for name, want in expected.items():
            assert_close(
                out["params"][name], want, what=f"rank {rank} after recovery and {steps_after} more steps, {name}"
            )
