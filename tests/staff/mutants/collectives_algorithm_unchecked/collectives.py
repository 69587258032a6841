from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.collectives",
    "    if algorithm not in ALL_REDUCE_ALGORITHMS:",
    "    if algorithm is None:",
)
