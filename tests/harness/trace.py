"""Chrome-trace output of what the ranks communicated (open in https://ui.perfetto.dev or chrome://tracing).

With ``CS336_TRACE=DIR`` set, every ``CommRecorder`` writes, when it closes, one Chrome-trace JSON
file into DIR: ``<pid>-rank<r>-<n>.json``, one lane (``tid``) per rank, one slice per communication
call (its name is the op; ``args`` hold group, bytes, dtype, shapes, async, in_backward) and one
slice for the recorded phase itself. A call's slice starts when the call returned (the time the
recorder sees) and, for an async call, ends when its handle was waited on, so an all-reduce issued
from a grad hook and waited on at the end of backward spans that stretch. Merge a test's files
with ``scripts/show_trace.py DIR/*.json`` (it also draws a PNG timeline).

The environment variable is read once, at import: with tracing off the recorder does nothing more
than before (one attribute test on exit).
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

TRACE_DIR: str | None = os.environ.get("CS336_TRACE") or None
_counter = itertools.count()


def chrome_events(events, rank: int, start: float, end: float, label: str = "recorded") -> list[dict]:
    """Chrome-trace "X" (complete) events, in microseconds from ``start``, for one rank's ``CommEvent``s."""
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


def write_rank_trace(events, start: float, end: float, directory: str | None = None) -> Path | None:
    """Write this process's recorded events as one Chrome-trace file in ``directory`` (default: $CS336_TRACE)."""
    directory = directory or TRACE_DIR
    if not directory:
        return None
    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_initialized() else 0
    test = ""  # the pooled ranks outlive tests: PYTEST_CURRENT_TEST here is the test that started the pool
    path = Path(directory) / f"{os.getpid()}-rank{rank}-{next(_counter)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    trace = {"traceEvents": chrome_events(events, rank, start, end, label=test or "recorded"),
             "displayTimeUnit": "ms", "otherData": {"rank": rank, "test": test, "t0_s": start}}  # fmt: skip
    path.write_text(json.dumps(trace))
    return path
