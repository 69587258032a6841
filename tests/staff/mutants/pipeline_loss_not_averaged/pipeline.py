"""Mutant: microbatch losses are not divided by the number of microbatches (grads m times too big)."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    "out = self.loss_fn(out, step.targets[i]) / step.num_microbatches",
    "out = self.loss_fn(out, step.targets[i])",
)
