from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.accounting",
    "    return (p.bit_length() - 1) + (2 if world_size != p else 0)",
    "    return (p.bit_length() - 1) + (1 if world_size != p else 0)",
)
