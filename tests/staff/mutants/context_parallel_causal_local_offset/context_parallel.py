"""Mutant: the causal mask of every key/value block uses this rank's own positions (no global offset)."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.context_parallel",
       old="_visible(q_pos, _positions(owner, n, s, zigzag), causal)",
       new="_visible(q_pos, _positions(me, n, s, zigzag), causal)", count=2)  # fmt: skip
