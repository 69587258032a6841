"""Hidden tests for Part 7 (never shipped to students): odd world sizes, three stages, ZeRO-2's traffic.

    pytest tests/staff/hidden/test_mesh_hidden.py --impl reference

On 3 and 6 ranks the mesh has axes of size 3 (the public meshes are powers of two); a pipeline of 3
stages on 3 ranks trains with GPipe; and on DP 2 x TP 2 with ZeRO-2 the gradients must travel as a
reduce-scatter in the dp slice with no all-reduce before it (averaging twice gives the same numbers,
so only the recorder sees it).
"""

from __future__ import annotations

import pytest

from tests.harness import run_ranks
from tests.harness.recorder import calls, format_events
from tests.oracles.mesh import (
    check_mesh_training,
    coords_of,
    mesh_batches,
    mesh_rank,
    slice_of,
    trainer_rank,
)

MESHES = {3: [{"dp": 3}, {"a": 1, "b": 3}, {"a": 3, "b": 1, "c": 1}], 6: [{"dp": 2, "tp": 3}, {"a": 3, "b": 2}]}


@pytest.mark.task7_1
@pytest.mark.parametrize("n", [3, 6])
def test_mesh_with_axes_of_size_three_is_row_major(n):
    """Meshes with an axis of 3 ranks: slices, coordinates and groups follow row-major order."""
    shapes = MESHES[n]
    outs = run_ranks(n, mesh_rank, shapes)
    for rank, per_mesh in enumerate(outs):
        for shape, got in zip(shapes, per_mesh):
            assert got["coords"] == coords_of(rank, shape), f"rank {rank}, mesh {shape}: coords {got['coords']}"
            for axis in shape:
                want = slice_of(rank, shape, axis)
                g = got["axes"][axis]
                assert g["ranks"] == want == g["group_ranks"], f"rank {rank}, mesh {shape}, {axis}: {g}, want {want}"


@pytest.mark.task7_3
def test_three_stage_pipeline_trains_like_one_process():
    """DP 1 x PP 3 x TP 1 with AdamW: every stage's parameters equal one process's after every step."""
    shape = {"dp": 1, "pp": 3, "tp": 1}
    batches = mesh_batches(steps=2, batch=8)
    outs = run_ranks(3, trainer_rank, shape, "adamw", 0, batches)
    check_mesh_training(outs, shape, "adamw", batches, "pp3")


@pytest.mark.task7_3
def test_zero2_reduce_scatters_instead_of_all_reducing_over_dp():
    """With ZeRO-2 the dp slice sees reduce-scatters and all-gathers of the gradients, never an all-reduce."""
    shape = {"dp": 2, "pp": 1, "tp": 2}
    outs = run_ranks(4, trainer_rank, shape, "sgd", 2, mesh_batches(2, 8), record_step=1)
    for rank, steps in enumerate(outs):
        dp_slice = tuple(slice_of(rank, shape, "dp"))
        events = [e for e in calls(steps[1]["events"]) if e.group_ranks == dp_slice]
        ops = sorted({e.op for e in events})
        assert "all_reduce" not in ops and any("reduce_scatter" in op for op in ops), (
            f"rank {rank}: dp slice {list(dp_slice)} saw {ops}; ZeRO-2 averages with the optimizer's reduce-scatter "
            f"only:\n{format_events(steps[1]['events'], limit=60)}"
        )
