"""Mutant: expert gradients divided by the DP size only, though every EP rank's loss fed them."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.expert_parallel",
    "        p.grad.div_(ep * dp)",
    "        p.grad.div_(ep * dp if p is moe.router.weight else dp)",
)
