"""Chrome-trace output of what the ranks communicated (open in https://ui.perfetto.dev or chrome://tracing).

    pytest tests/test_ddp.py -k overlap --world-sizes 2 --comm-trace /tmp/tr    # or CS336_TRACE=/tmp/tr
    python -m scripts.tools.trace /tmp/tr/test_ddp.py__test_each_bucket*.json    # the same as a PNG

With ``CS336_TRACE=DIR`` set, every distributed test writes ONE file, ``DIR/<test id>.json``: a lane
per process ("pytest" for the judging parent, "rank r" for each rank). The parent's lane holds the
test's phases (pytest's setup, call and teardown); a rank's lane holds each recorded region (a
``CommRecorder`` block, named after the rank function that opened it) and, inside it, one slice per
communication call: its name is the op, ``args`` hold group, peer, bytes, dtype, shapes, async and
in_backward. A call's slice starts when the call returned (the time the recorder sees) and, for an
async call, ends when its handle was waited on, so an all-reduce issued from a grad hook and waited
on at the end of backward spans that stretch; overlapping async calls get their own sub-lanes.

How: each ``CommRecorder`` writes its rank's events, when it closes, to ``DIR/.ranks/`` (a valid
Chrome trace on its own: scripts that record outside pytest find them there); after each test the
parent (``trace_plugin.py``) merges that test's files into its one file, on a clock shared by all
processes (``perf_counter`` is the machine's monotonic clock). A failing distributed test says
where its trace is, or how to get one.

A region is named after the rank function that opened it, or, inside ``with trace.labelled("...")``,
by that text (Part 11's training ranks name each step "mesh dp=2,pp=1,cp=2,tp=2 ddp step 0", from which
``python -m scripts.tools.trace --summary`` tells each group's axis).

The environment variable is read once, at import, in the ranks: with tracing off the recorder does
nothing more than before (one attribute test on exit).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
from pathlib import Path

TRACE_DIR: str | None = os.environ.get("CS336_TRACE") or None
RANKS_SUBDIR = ".ranks"  # where ranks leave their per-recording files until the parent merges them
_counter = itertools.count()
_region_label: str | None = None  # set by ``labelled``: the name of the regions recorded inside it


@contextlib.contextmanager
def labelled(label: str):
    """Name the regions this process records inside the block ``label`` (instead of the rank function's name)."""
    global _region_label
    saved, _region_label = _region_label, label
    try:
        yield
    finally:
        _region_label = saved


def chrome_events(events, rank: int, start: float, end: float, label: str = "recorded") -> list[dict]:
    """Chrome-trace "X" (complete) events, in microseconds from ``start``, for one rank's ``CommEvent``s:
    first the recorded region itself (``cat`` "phase"), then one slice per call."""
    waited = {e.waits_for: e.time for e in events if e.op == "wait" and e.waits_for is not None}
    out = [{"name": label, "cat": "phase", "ph": "X", "pid": 0, "tid": rank,
            "ts": 0.0, "dur": max((end - start) * 1e6, 1.0)}]  # fmt: skip
    for e in events:
        if e.op == "wait":
            continue
        t0 = (e.time - start) * 1e6
        t1 = (waited.get(e.index, e.time) - start) * 1e6
        out.append({
            "name": e.op + (" (in backward)" if e.in_backward else ""),
            "cat": "backward" if e.in_backward else "comm",
            "ph": "X", "pid": 0, "tid": rank, "ts": t0, "dur": max(t1 - t0, 1.0),
            "args": {"group": list(e.group_ranks), "peer": e.peer, "bytes": e.nbytes, "dtype": e.dtype,
                     "shapes": [list(s) for s in e.shapes], "async": e.async_op, "in_backward": e.in_backward,
                     "index": e.index, "start_s": e.time, "end_s": waited.get(e.index, e.time)},
        })  # fmt: skip
    return out


def write_rank_trace(events, start: float, end: float, directory: str | None = None,
                     label: str = "recorded") -> Path | None:  # fmt: skip
    """Write this process's recorded events as one Chrome-trace file; returns its path.

    ``directory`` given: the file goes there. Otherwise it goes to ``$CS336_TRACE/.ranks/``, where the
    parent picks it up after the test (``merge_test_trace``); without ``CS336_TRACE`` nothing is written.
    Inside ``labelled(text)``, ``text`` is the region's label.
    """
    label = _region_label or label
    if directory is None:
        if not TRACE_DIR:
            return None
        directory = os.path.join(TRACE_DIR, RANKS_SUBDIR)
    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_initialized() else 0
    path = Path(directory) / f"{os.getpid()}-rank{rank}-{next(_counter)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    trace = {"traceEvents": chrome_events(events, rank, start, end, label=label),
             "displayTimeUnit": "ms", "otherData": {"rank": rank, "label": label, "t0_s": start}}  # fmt: skip
    path.write_text(json.dumps(trace))
    return path


# -- the parent's side: one file per test ---------------------------------------------------------------


def trace_file_of(directory: str, nodeid: str) -> Path:
    """Where the test ``nodeid``'s merged trace goes: ``DIR/<file>__<test>[<case>].json``."""
    name = nodeid.split("/")[-1].replace("::", "__")
    name = re.sub(r"[^A-Za-z0-9_.\-\[\],=]", "_", name)[:180]
    return Path(directory) / f"{name}.json"


def _lanes(slices: list[dict]) -> None:
    """Give overlapping call slices of one rank separate ``tid``s (1, 2, ...), so every lane nests."""
    ends: list[float] = []  # end time of the last slice in each lane
    for s in sorted(slices, key=lambda s: s["ts"]):
        lane = next((i for i, end in enumerate(ends) if end <= s["ts"]), None)
        if lane is None:
            lane = len(ends)
            ends.append(0.0)
        ends[lane] = s["ts"] + s["dur"]
        s["tid"] = lane + 1


def merge_test_trace(directory: str, nodeid: str, phases: list[tuple[str, float, float]],
                     outcome: str = "") -> Path | None:  # fmt: skip
    """Merge the rank files waiting in ``DIR/.ranks`` with the parent's ``phases`` ((name, start, end)
    in ``perf_counter`` seconds) into the test's one trace file; the rank files are removed. Returns the
    path, or None when the test recorded nothing and had no phase."""
    pending = sorted((Path(directory) / RANKS_SUBDIR).glob("*.json"))
    if not pending and not phases:
        return None
    origin = min([t0 for _, t0, _ in phases] or [0.0])
    meta = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "pytest (the judge)"}}]
    events = [{"name": name, "cat": "phase", "ph": "X", "pid": 0, "tid": 0, "ts": (t0 - origin) * 1e6,
               "dur": max((t1 - t0) * 1e6, 1.0)} for name, t0, t1 in phases]  # fmt: skip
    ranks = set()
    for f in pending:
        try:
            trace = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        finally:
            f.unlink(missing_ok=True)
        rank, shift = trace["otherData"]["rank"], (trace["otherData"]["t0_s"] - origin) * 1e6
        if not phases:  # no parent clock: line the files up on the first one's start
            origin = trace["otherData"]["t0_s"]
            phases = [("recorded", origin, origin)]
            shift = 0.0
        ranks.add(rank)
        calls = []
        for e in trace["traceEvents"]:
            e = {**e, "pid": rank + 1, "ts": e["ts"] + shift}
            if e["cat"] == "phase":
                events.append({**e, "tid": 0})
            else:
                calls.append(e)
        _lanes(calls)
        events.extend(calls)
    meta += [{"ph": "M", "name": "process_name", "pid": r + 1, "args": {"name": f"rank {r}"}} for r in sorted(ranks)]
    path = trace_file_of(directory, nodeid)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": meta + events, "displayTimeUnit": "ms",
                                "otherData": {"test": nodeid, "outcome": outcome}}))  # fmt: skip
    return path
