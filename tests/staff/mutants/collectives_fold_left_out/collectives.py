from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.collectives",
    "        _exchange_and_add(group, send, ranks[partner], target, ranks[partner])",
    "        pass  # the extra rank's tensor never reaches the core",
)
