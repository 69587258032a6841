"""Mutant: microbatch losses are not divided by the number of microbatches (grads m times too big)."""

from tests.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    "loss = self.loss_fn(out, y_mb[i]) / m",
    "loss = self.loss_fn(out, y_mb[i])",
)
