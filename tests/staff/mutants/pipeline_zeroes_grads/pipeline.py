"""Mutant: train_step zeroes the stage's grads itself, so gradient accumulation is lost."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    "        self.timeline, self.peak_activations = [], 0\n",
    "        self.module.zero_grad()\n        self.timeline, self.peak_activations = [], 0\n",
)
