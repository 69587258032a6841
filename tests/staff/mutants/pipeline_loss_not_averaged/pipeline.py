"""Mutant: microbatch losses are not divided by the number of microbatches (grads m times too big)."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    "out = self.loss_fn(out, y_mb[i]) / m",
    "out = self.loss_fn(out, y_mb[i])",
)
