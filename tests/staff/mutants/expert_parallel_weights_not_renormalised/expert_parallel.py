"""Mutant: top-k weights are the raw probabilities, not renormalised over the chosen k."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.expert_parallel",
    "        if k > 1:\n            weights = weights / weights.sum(dim=-1, keepdim=True)\n",
    "",
)
