"""Hidden tests for Part 7 (never shipped to students): odd world sizes, three stages, ZeRO-2's traffic.

    pytest tests/staff/hidden/test_mesh_hidden.py --impl reference

Each is a public check at another size or layout. On 3 and 6 ranks the mesh has axes of size 3 (the
public meshes are powers of two); pipelines of 3 stages on 3 ranks and, tp fastest, on 6; ZeRO-1/2's
dp traffic on DP 2 x TP 2 (the public test: DP 2 x PP 2; averaging twice gives the same numbers, so
only the recorder sees it); HSDP with 4 replicas and float16, and of 3 shards under microbatches.
"""

from __future__ import annotations

import pytest
import torch

from tests.harness import run_ranks
from tests.oracles.mesh import (
    D_MODEL,
    check_hsdp_microbatches,
    check_hsdp_setup,
    check_mesh_training,
    check_zero_traffic,
    coords_of,
    hsdp_microbatch_rank,
    hsdp_setup_rank,
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
@pytest.mark.parametrize("zero_stage", [1, 2])
def test_zero_traffic_over_dp_on_dp2_x_tp2(zero_stage):
    """DP 2 x TP 2 (the public test runs DP 2 x PP 2): ZeRO-1 all-reduces once and never
    reduce-scatters, ZeRO-2 reduce-scatters and never all-reduces, in the dp slice."""
    shape = {"dp": 2, "pp": 1, "tp": 2}
    outs = run_ranks(4, trainer_rank, shape, "sgd", zero_stage, mesh_batches(2, 8), record_step=1)
    check_zero_traffic(outs, shape, zero_stage)


@pytest.mark.task7_2
def test_hsdp_of_four_replicas_broadcasts_buffers_and_computes_in_float16():
    """HSDP with 4 replicas of 1 shard (the public test: 2 x 1 and 2 x 2) and compute_dtype=float16:
    rank 0's buffers everywhere, the forward in float16."""
    shape = {"replicate": 4, "shard": 1}
    x = torch.randn(4, D_MODEL, generator=torch.Generator().manual_seed(9))
    outs = run_ranks(4, hsdp_setup_rank, shape, torch.float16, x)
    check_hsdp_setup(outs, shape, torch.float16, x)


@pytest.mark.task7_2
def test_hsdp_of_three_shards_under_microbatches_reduces_once_per_step():
    """HSDP of 2 replicas x 3 shards (the public test: 2 x 2 and 1-D meshes; a shard slice of 3 pads) with units and
    2 microbatches, AdamW: the first backward reduces nothing, the last once per unit and parameter; as one process."""
    shape = {"replicate": 2, "shard": 3}
    batches = mesh_batches(steps=2, batch=24, seed=3)
    outs = run_ranks(6, hsdp_microbatch_rank, shape, batches, 2, "adamw")
    check_hsdp_microbatches(outs, shape, batches, 2, "adamw")


@pytest.mark.task7_3
def test_six_rank_layout_with_tp_fastest_trains_like_one_process():
    """DP 1 x PP 3 x TP 2 on 6 ranks, tp varying fastest: each rank's stage is its pp coordinate."""
    shape = {"dp": 1, "pp": 3, "tp": 2}
    batches = mesh_batches(steps=2, batch=8)
    outs = run_ranks(6, trainer_rank, shape, "sgd", 0, batches)
    check_mesh_training(outs, shape, "sgd", batches, "dp1xpp3xtp2")
