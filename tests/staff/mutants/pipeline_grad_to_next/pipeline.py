"""Mutant: input gradients are sent to the next stage instead of the previous one."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    "dist.P2POp(dist.isend, grad_x.contiguous(), self._ring_prev",
    "dist.P2POp(dist.isend, grad_x.contiguous(), self._ring_next",
)
