"""Mutant: DDPBucketed only marks grads ready during backward and launches every bucket in finish."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.ddp",
    "        if len(bucket.ready) == len(bucket.params):\n            self._launch(bucket)",
    "        pass",
)
