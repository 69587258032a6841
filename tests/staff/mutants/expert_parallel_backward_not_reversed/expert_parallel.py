"""Mutant: the all-to-all backward reuses the forward splits instead of swapping them."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.expert_parallel",
    "return _exchange(grad, input_splits, output_splits, ctx.group)",
    "return _exchange(grad, output_splits, input_splits, ctx.group)",
)
