"""The hidden tests of parts 3 (FSDP), 4, 6 and 8 each kill a mutant that their public suite misses.

    pytest tests/staff/mutants/test_hidden_parts_mutants.py -v        # staff only

Each mutant below passes the whole public file of its part (checked when the row was written); its
hidden test fails on it with the message given here.
"""

from __future__ import annotations

import pytest

from tests.staff.mutants.runner import Mutant, assert_killed

pytestmark = pytest.mark.staff

FSDP = "tests/staff/hidden/test_fsdp_hidden.py"
TP = "tests/staff/hidden/test_tensor_parallel_hidden.py"
ACCOUNTING = "tests/staff/hidden/test_accounting_hidden.py"
EP = "tests/staff/hidden/test_expert_parallel_hidden.py"

MUTANTS = [  # (suite, mutant)
    (FSDP, Mutant("fsdp_hidden_replicated_average_by_world",
                  "::test_two_fsdp_groups_each_train_like_a_plain_model_on_their_own_batches[w4-deep_mlp]",
                  "(FSDP group [0, 1]), deep_mlp, step 0", world_sizes="4")),
    (TP, Mutant("tensor_parallel_hidden_sp_bias_unguarded",
                "::test_sequence_parallel_mlp_without_biases_matches_the_dense_rows[w2]", "rank 0")),
    (ACCOUNTING, Mutant("accounting_hidden_memory_truncated",
                        "::test_memory_with_fractional_bytes_per_parameter_rounds_to_the_nearest_byte",
                        "expected the nearest int, 46")),
    (EP, Mutant("expert_parallel_hidden_capacity_from_local_tokens",
                "::test_ranks_with_different_token_counts_share_one_capacity_over_the_group[w2-top1-capacity1.0]",
                "rank 0 of 2 (3 tokens), top1-capacity1.0: output")),
]  # fmt: skip


@pytest.mark.parametrize("suite, mutant", MUTANTS, ids=[str(m) for _, m in MUTANTS])
def test_the_hidden_test_kills_the_mutant(suite, mutant):
    """The hidden test fails on this mutant, in bounded time, with a message that teaches."""
    assert_killed(mutant, suite, deadline=20)
