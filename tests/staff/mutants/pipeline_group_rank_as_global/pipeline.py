"""Mutant: neighbours are group ranks passed to send/recv as global ranks (wrong in a subgroup)."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    "ranks[(stage - 1) % num_stages], ranks[(stage + 1) % num_stages]",
    "(stage - 1) % num_stages, (stage + 1) % num_stages",
)
