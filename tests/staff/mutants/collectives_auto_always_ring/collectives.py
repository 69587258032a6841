from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.collectives",
    '    return "recursive_doubling" if t_doubling < t_ring else "ring"',
    '    return "ring"',
)
