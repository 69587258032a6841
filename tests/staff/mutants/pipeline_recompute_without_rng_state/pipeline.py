"""Mutant: the recomputation does not restore the forward's RNG state, so dropout draws other masks."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    "                _set_rng_state(saved.rng, step.device)\n",
    "",
)
