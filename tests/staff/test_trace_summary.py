"""The comm trace's per-axis summary (``python -m scripts.tools.trace FILE --summary TEXT``), as written problem 4
of Part 11 reads it: a region labelled with its mesh, each call counted on the axis it travels along.

    pytest tests/staff/test_trace_summary.py

Staff-only: it tests the kit's trace tooling (tests/harness/trace.py, scripts/tools/trace.py), not the student package.
"""

from __future__ import annotations

import pytest

from scripts.tools.trace import rows_of, summary
from tests.harness import trace
from tests.harness.recorder import CommEvent

pytestmark = pytest.mark.staff

# A dp2 x tp2 mesh, row-major: rank 0 is (dp 0, tp 0), rank 1 (0, 1), rank 2 (1, 0), rank 3 (1, 1).
LABEL = "mesh dp=2,pp=1,cp=1,tp=2 ddp step 0"


def _calls(t0: float) -> list[CommEvent]:
    """Rank 0's step: two all-gathers over tp (ranks 0, 1), an all-reduce over dp (ranks 0, 2), a send to rank 1."""
    return [
        CommEvent(0, "all_gather", None, (0, 1), 4, 16, "float32", ((4,),), False, False, t0 + 0.001),
        CommEvent(1, "all_gather", None, (0, 1), 4, 16, "float32", ((4,),), False, True, t0 + 0.002),
        CommEvent(2, "all_reduce", None, (0, 2), 8, 32, "float32", ((8,),), False, False, t0 + 0.003),
        CommEvent(3, "send", 1, (0, 1, 2, 3), 2, 8, "float32", ((2,),), False, False, t0 + 0.004),
    ]


def test_a_labelled_region_is_summed_per_mesh_axis(tmp_path, monkeypatch):
    """Inside ``trace.labelled(...)`` a recording carries that label; the summary of a region so labelled puts each
    call on the axis along which its group's (or its peer's) coordinates differ, with its count and bytes."""
    monkeypatch.setattr("torch.distributed.is_initialized", lambda: True)
    monkeypatch.setattr("torch.distributed.get_rank", lambda: 0)
    with trace.labelled(LABEL):
        trace.write_rank_trace(_calls(10.0), 10.0, 10.01, str(tmp_path / trace.RANKS_SUBDIR), "recorded in f")
    trace.write_rank_trace(_calls(11.0), 11.0, 11.01, str(tmp_path / trace.RANKS_SUBDIR), "recorded in f")
    path = trace.merge_test_trace(str(tmp_path), "t.py::t[w4]", [("call", 10.0, 11.02)])
    lines = summary(rows_of(path), "tp=2 ddp step 0")
    got = {tuple(part.strip() for part in line.split("|")[2:]) for line in lines}
    want = {
        ("tp", "all_gather", "1 calls", "16 bytes"),
        ("tp", "all_gather (in backward)", "1 calls", "16 bytes"),
        ("dp", "all_reduce", "1 calls", "32 bytes"),
        ("tp", "send", "1 calls", "8 bytes"),
    }
    assert got == want, f"the step's calls per axis: expected {sorted(want)}, got {sorted(got)}:\n" + "\n".join(lines)
    assert all(line.startswith(LABEL) for line in lines), "only the labelled region is summed:\n" + "\n".join(lines)
