from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.collectives",
    '    root = _check_member(src, ranks, "src")',
    '    root = src if 0 <= src < len(ranks) else _check_member(src, ranks, "src")',
)
