from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.collectives",
    "            _exchange_and_add(group, flat, ranks[me ^ mask], flat, ranks[me ^ mask])",
    "            half = flat[: flat.numel() // 2]\n"
    "            _exchange_and_add(group, half, ranks[me ^ mask], half, ranks[me ^ mask])",
)
