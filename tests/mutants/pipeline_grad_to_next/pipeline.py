"""Mutant: input gradients are sent to the next stage instead of the previous one."""

from tests.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    "dist.isend(x.grad.contiguous(), dst=self.prev_rank",
    "dist.isend(x.grad.contiguous(), dst=self.next_rank",
)
