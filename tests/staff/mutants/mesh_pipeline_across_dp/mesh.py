"""Mutant: pipeline stages are neighbours along the dp axis instead of pp."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.mesh",
    'loss_fn, group=mesh.group("pp"))',
    'loss_fn, group=mesh.group("dp"))',
)
