"""Mutant: the first axis varies fastest (column-major) instead of the last."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.mesh",
    "grid = torch.arange(world).view(*shape.values())",
    "grid = torch.arange(world).view(*reversed(shape.values())).permute(*reversed(range(len(shape))))",
)
