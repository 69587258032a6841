"""The communication trace (--comm-trace DIR): one Chrome-trace file per test, lanes that nest, one clock.

These test the harness's trace tooling (tests/harness/trace.py), not the student package.
"""

from __future__ import annotations

import json

import pytest

from tests.harness.recorder import CommEvent
from tests.harness.trace import RANKS_SUBDIR, merge_test_trace, trace_file_of, write_rank_trace

pytestmark = pytest.mark.harness


def _all_reduce(index: int, issued: float, waited: float) -> list[CommEvent]:
    return [
        CommEvent(index, "all_reduce", None, (0, 1), 4, 16, "float32", ((4,),), True, True, issued),
        CommEvent(index + 1, "wait", None, (), 0, 0, None, (), False, True, waited, waits_for=index),
    ]


def test_a_tests_rank_files_merge_into_one_trace_on_the_parents_clock(tmp_path, monkeypatch):
    """Two ranks' recordings and the parent's phases become one file: a named lane per process, every
    slice placed on the shared clock (rank 1 started 2 ms after the test), rank files removed."""
    pending = tmp_path / RANKS_SUBDIR
    monkeypatch.setattr("torch.distributed.is_initialized", lambda: True)
    for rank, start in [(0, 100.001), (1, 100.002)]:
        monkeypatch.setattr("torch.distributed.get_rank", lambda rank=rank: rank)
        write_rank_trace(_all_reduce(0, start + 0.001, start + 0.004), start, start + 0.005, str(pending), "rec")
    path = merge_test_trace(str(tmp_path), "tests/test_x.py::test_y[w2]", [("call", 100.0, 100.010)], "passed")
    assert path == trace_file_of(str(tmp_path), "tests/test_x.py::test_y[w2]") and path.exists()
    assert not list(pending.glob("*.json")), "the per-recording rank files should be merged and removed"
    trace = json.loads(path.read_text())
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert names == {0: "pytest (the judge)", 1: "rank 0", 2: "rank 1"}, names
    calls = {e["pid"]: e for e in trace["traceEvents"] if e.get("cat") == "backward"}
    assert calls[2]["ts"] == pytest.approx(3000.0) and calls[2]["dur"] == pytest.approx(3000.0), (
        f"rank 1's all_reduce was issued 3 ms after the test started and waited 3 ms later: {calls[2]}"
    )
    assert trace["otherData"] == {"test": "tests/test_x.py::test_y[w2]", "outcome": "passed"}


def test_overlapping_async_calls_of_a_rank_get_their_own_lanes(tmp_path, monkeypatch):
    """Two all-reduces in flight at once on one rank sit in different sub-lanes (tids), so each lane nests
    (Perfetto draws overlapping slices of one lane wrongly); a later call reuses the first free lane."""
    monkeypatch.setattr("torch.distributed.is_initialized", lambda: False)
    events = [*_all_reduce(0, 1.001, 1.005), *_all_reduce(2, 1.002, 1.006), *_all_reduce(4, 1.007, 1.008)]
    write_rank_trace(events, 1.0, 1.01, str(tmp_path / RANKS_SUBDIR))
    trace = json.loads(merge_test_trace(str(tmp_path), "t.py::t", [("call", 1.0, 1.01)]).read_text())
    tids = [e["tid"] for e in sorted(trace["traceEvents"], key=lambda e: e.get("ts", -1)) if e.get("cat") == "backward"]
    assert tids == [1, 2, 1], f"expected lanes 1, 2 then 1 again for the three calls, got {tids}"
