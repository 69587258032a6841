"""Hidden tests for part 11 (never shipped to students): other models, shapes, seeds and meshes.

    pytest tests/staff/hidden/test_parallelize_hidden.py --impl reference

Each case trains a model the public tests do not (one key/value head per tp rank, a contiguous CP
layout, a ring of 4, four stages, top-1 experts beside TP, CP or FSDP, interleaving beside TP, HSDP under
microbatches, with interleaved chunks too) for three AdamW
steps on a batch of another shape and seed, and compares every rank's loss and parameters with one
process. Explicit world sizes (2 and 4); on NCCL a size larger than the visible GPUs is skipped.
"""

from __future__ import annotations

import pytest

from cs336_systems.transformer import TransformerConfig
from tests.harness import run_ranks
from tests.oracles.transformer import (
    batches,
    check_training,
    dense_training,
    full_shape,
    mesh_case,
    mesh_size,
    training_rank,
)

_GQA1 = TransformerConfig(vocab_size=11, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=24)
_DEEP = TransformerConfig(vocab_size=11, d_model=16, n_layers=4, n_heads=2, n_kv_heads=2, d_ff=24)
_MOE1 = TransformerConfig(vocab_size=11, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=24, moe_every=1,
                          num_experts=4, top_k=1)  # fmt: skip

# id -> (mesh shape, model, parallelize options, batch, seq, seed)
CASES = {
    "tp2-one-kv-head-per-rank": ({"tp": 2}, _GQA1, {}, 4, 8, 5),
    "cp2-contiguous": ({"cp": 2}, _GQA1, {"zigzag": False}, 4, 12, 6),
    "cp4-zigzag": ({"cp": 4}, _GQA1, {}, 2, 16, 7),
    "pp4-1f1b-four-microbatches": ({"pp": 4}, _DEEP, {"num_microbatches": 4}, 8, 6, 8),
    "ep2xtp2-top1": ({"ep": 2, "tp": 2}, _MOE1, {}, 4, 8, 9),
    "pp2xtp2-interleaved": ({"pp": 2, "tp": 2}, _DEEP, {"num_microbatches": 2, "schedule": "interleaved",
                                                       "num_chunks": 2}, 4, 8, 10),
    "dp2xpp2-gpipe-zero1": ({"dp": 2, "pp": 2}, _DEEP, {"num_microbatches": 2, "schedule": "gpipe",
                                                       "data_parallel": "zero1"}, 8, 6, 11),
    "dp2xcp2-fsdp": ({"dp": 2, "cp": 2}, _GQA1, {"data_parallel": "fsdp"}, 4, 8, 12),
    "ep2xcp2-moe": ({"ep": 2, "cp": 2}, _MOE1, {}, 4, 8, 13),
    "tp2-moe-without-ep": ({"tp": 2}, _MOE1, {}, 4, 8, 15),
    "dp2xfsdp2-hsdp": ({"dp": 2, "fsdp": 2}, _GQA1, {"data_parallel": "hsdp"}, 8, 8, 16),
    "fsdp2xep2-hsdp-moe": ({"fsdp": 2, "ep": 2}, _MOE1, {"data_parallel": "hsdp"}, 8, 8, 17),
    "dp2xep2-fsdp-moe": ({"dp": 2, "ep": 2}, _MOE1, {"data_parallel": "fsdp"}, 8, 8, 14),
    "dp2xfsdp2-hsdp-microbatches": ({"dp": 2, "fsdp": 2}, _DEEP, {"data_parallel": "hsdp", "num_microbatches": 2},
                                    8, 6, 18),
    "fsdp2xpp2-hsdp-interleaved": ({"fsdp": 2, "pp": 2}, _DEEP, {"data_parallel": "hsdp", "num_microbatches": 4,
                                                                "schedule": "interleaved", "num_chunks": 2}, 8, 6, 19),
}  # fmt: skip


def _params(task: str, ids: list[str]) -> list:
    return [pytest.param(i, id=i, marks=getattr(pytest.mark, task)) for i in ids]


@pytest.mark.parametrize(
    "case",
    _params(
        "task11_1", ["tp2-one-kv-head-per-rank", "cp2-contiguous", "cp4-zigzag", "ep2xtp2-top1", "tp2-moe-without-ep"]
    )
    + _params("task11_2", ["pp4-1f1b-four-microbatches", "pp2xtp2-interleaved"])
    + _params(
        "task11_3",
        [
            "dp2xpp2-gpipe-zero1",
            "dp2xcp2-fsdp",
            "ep2xcp2-moe",
            "dp2xep2-fsdp-moe",
            "dp2xfsdp2-hsdp",
            "fsdp2xep2-hsdp-moe",
            "dp2xfsdp2-hsdp-microbatches",
            "fsdp2xpp2-hsdp-interleaved",
        ],
    ),
)
def test_other_models_and_meshes_train_like_one_process(case):
    """Three steps on other models, batches and meshes: every loss and parameter equal to one process."""
    shape, cfg, options, batch, seq, seed = CASES[case]
    data = batches(cfg, steps=3, batch=batch, seq=seq, seed=seed)
    losses, state = dense_training(cfg, data, seed=seed, options=options)
    outs = run_ranks(mesh_size(shape), training_rank, shape, cfg, data, options, seed=seed)
    check_training(outs, shape, losses, state, f"{case} {full_shape(shape)} {options}")


@pytest.mark.task11_3
@pytest.mark.parametrize("name", ["tp4", "dp2xtp2-zero1", "dp2xpp2-gpipe"])
def test_the_oracle_meshes_the_public_tests_leave_out(name):
    """tp4, ZeRO-1 beside TP, GPipe beside DP (the public model and batches): equal to one process."""
    shape, cfg, options = mesh_case(name)
    data = batches(cfg)
    losses, state = dense_training(cfg, data, options=options)
    outs = run_ranks(mesh_size(shape), training_rank, shape, cfg, data, options)
    check_training(outs, shape, losses, state, f"mesh {name} {full_shape(shape)} {options}")
