"""Hidden tests for part 4 (never shipped to students): sequence parallelism without biases.

    pytest tests/staff/hidden/test_tensor_parallel_hidden.py --impl reference

The public sequence-parallel tests use an MLP with biases; ``TensorParallelMLP.from_dense`` takes any
``models.MLP``, and an MLP built with ``bias=False`` must work the same way with sequence parallelism
(rows r of the dense output and input gradient, every weight grad its dense slice).
"""

from __future__ import annotations

import pytest

from tests.harness import assert_close
from tests.oracles.tensor_parallel import MLP_SHARDS, check_shards, run_mlp


@pytest.mark.task4_5
def test_sequence_parallel_mlp_without_biases_matches_the_dense_rows(world_size):
    """Without biases, the sequence-parallel MLP's output and x.grad are still rows r of the dense MLP's."""
    outs, local, y, x_grad, grads = run_mlp(world_size, True, bias=False)
    weights = {name: dim for name, dim in MLP_SHARDS.items() if "bias" not in name}
    for r, out in enumerate(outs):
        assert_close(out["y"], local(y, r), what=f"rank {r}, sequence-parallel output without biases")
        assert_close(out["x_grad"], local(x_grad, r), what=f"rank {r}, gradient of this rank's rows of x (no biases)")
        check_shards(out["grads"], grads, weights, r, world_size, "gradient of")
