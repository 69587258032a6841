"""Mutant: ZB-H1 delays stage s's first W by s + 1 rounds instead of s (more activations held, later Ws)."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    "        if i >= stage:\n",
    "        if i > stage:\n",
)
