"""Mutant: causal blocks keep every key column (masked) instead of skipping the hidden half of a
zigzag block: results are right, but ranks with more earlier blocks do more work (unbalanced)."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.context_parallel",
       old="col1 = int(torch.searchsorted(k_pos, q_pos[-1], right=True))", new="col1 = len(k_pos)")  # fmt: skip
