"""Mutant: train_step runs GPipe's order when asked for 1F1B (same bubble, m activations held)."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    '"1f1b": one_f_one_b_schedule,',
    '"1f1b": gpipe_schedule,',
)
