"""What Slurm says about the cluster grader's arrays, and the ``status`` report built from it and from R.

Task states come from Slurm's accounting (``sacct``) where the cluster has it, else from the queue (``squeue``:
a task no longer queued has ended, and without accounting Slurm cannot say how). Per submission:

    graded   a counted result in R (store.py); "graded, grader exit N" when the grader itself failed on it
    running  a task has started it and that task is still running
    failed   a task started it and ended (cancelled, node failure, time limit) without its result:
             ``resubmit --missing`` grades it again
    pending  not started yet: its task is queued, or (when no task holds it) nothing will grade it until
             ``resubmit --missing``
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

from cs336_systems import platform_support
from scripts.grading.cluster.shards import export_submissions
from scripts.grading.cluster.store import Store

# A task in one of these states may still grade its shard (a requeued task is PENDING or REQUEUED again).
LIVE = {"PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "CONFIGURING", "COMPLETING", "REQUEUE_HOLD",
        "REQUEUE_FED"}  # fmt: skip


def _expand(job: str) -> list[str]:
    """``12_[3-5,7%2]`` (a pending array's range) -> 12_3, 12_4, 12_5, 12_7; ``12_4`` -> itself."""
    m = re.fullmatch(r"(\d+)_\[([^\]]+)\]", job)
    if not m:
        return [job]
    out = []
    for piece in m.group(2).split("%")[0].split(","):
        lo, _, hi = piece.partition("-")
        out += [f"{m.group(1)}_{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def _run(cmd: list[str]) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _slurm_states(arrays: list[str]) -> tuple[dict[str, tuple[str, str]], str]:
    """{``<array>_<task>``: (state, node)} for the arrays' tasks that Slurm knows, and where it came from."""
    ids = ",".join(arrays)
    out = _run(["sacct", "-n", "-P", "-X", "-j", ids, "-o", "JobID,State,NodeList"])
    source = "sacct"
    if out is None:  # no accounting here: the queue alone
        out, source = _run(["squeue", "-h", "-r", "-j", ids, "-o", "%i|%T|%N"]), "squeue (no accounting)"
    if out is None:
        return {}, "no Slurm answered (sacct and squeue failed)"
    states = {}
    for line in out.splitlines():
        job, state, node = (line.split("|") + ["", ""])[:3]
        for one in _expand(job.strip()):
            states[one] = (state.split()[0] if state else "?", node)  # "CANCELLED by 0" -> CANCELLED
    return states, source


def task_states(store: Store) -> tuple[dict[str, str], dict[str, str], str]:
    """({task id: state}, {task id: node}, where the states came from) for every task of every array. A Slurm
    task that the queue no longer lists (no accounting) is ENDED; a local task (a pid) is RUNNING or ENDED."""
    slurm = [a["job_id"] for a in store.arrays if a["cluster"] == "slurm"]
    found, source = _slurm_states(slurm) if slurm else ({}, "no Slurm array")
    states, nodes = {}, {}
    alive = platform_support.process_parents() if any(a["cluster"] == "local" for a in store.arrays) else {}
    for a in store.arrays:
        for task in a["task_ids"]:
            if a["cluster"] == "local":  # /proc on Linux, ps on macOS: the kit's one process scan
                states[task] = "RUNNING" if task.isdigit() and int(task) in alive else "ENDED"
            elif task in found:
                states[task], nodes[task] = found[task]
            else:
                states[task] = "ENDED" if source.startswith("squeue") else "UNKNOWN"
    return states, nodes, source


def _task_of(store: Store) -> dict[str, str]:
    """{submission: the task it was given to last}."""
    return {name: a["task_ids"][k] for a in store.arrays for k, names in enumerate(a["tasks"]) for name in names}


def queued_names(store: Store) -> set[str]:
    """Submissions whose last task is still queued or running (``resubmit`` leaves them to it)."""
    states = task_states(store)[0]
    return {name for name, task in _task_of(store).items() if states.get(task) in LIVE}


def submission_status(store: Store, name: str, task: str | None, states: dict[str, str]) -> str:
    record = store.done(name)
    if record:
        status = record["row"].get("status", "ok")
        return "graded" if status == "ok" else f"graded, {status}"
    running = store.running(name)
    if running:
        state = states.get(running["task"], "UNKNOWN")
        if state in ("RUNNING", "COMPLETING"):
            return "running"
        if state not in LIVE:
            return f"failed (task {running['task']} {state.lower()} while grading it)"
    if task and states.get(task) not in LIVE:
        return f"pending (task {task} ended without it: resubmit --missing)"
    return "pending"


def print_status(store: Store) -> int:
    config = store.config
    states, nodes, source = task_states(store)
    task_of = _task_of(store)
    names = [p.name for p in export_submissions(Path(config["export"]))]
    per_sub = {n: submission_status(store, n, task_of.get(n), states) for n in names}
    print(f"tasks (from {source}):")
    records = {n: store.done(n) for n in names}
    for a in store.arrays:
        for task, shard in zip(a["task_ids"], a["tasks"]):
            # What this task graded itself; what a later task (a resubmit) graded of its shard is said apart, so a
            # cancelled task never reads as having graded its shard.
            mine = sum(bool(records.get(n)) and records[n].get("task") == task for n in shard)
            later = sum(bool(records.get(n)) and records[n].get("task") != task for n in shard)
            print(f"  {task:>12} {states[task]:<11} {nodes.get(task, ''):<12} {mine}/{len(shard)} graded by it"
                  + (f", {later} by a later task" if later else "") + f" ({a['kind']} {a['submitted']})")  # fmt: skip
    print("submissions:")
    for name, status in per_sub.items():
        print(f"  {name}: {status}")
    counts = Counter(s.split(" ")[0].rstrip(",") for s in per_sub.values())
    print(", ".join(f"{counts[k]} {k}" for k in ("graded", "running", "pending", "failed")))
    return 0
