from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.collectives",
    "    chunks[me].copy_(piece)",
    "    chunks.reverse()\n    chunks[me].copy_(piece)",
)
