"""Mutant: input gradients are sent to the next stage instead of the previous one."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    "dist.P2POp(dist.isend, x.grad.contiguous(), self.prev_rank",
    "dist.P2POp(dist.isend, x.grad.contiguous(), self.next_rank",
)
