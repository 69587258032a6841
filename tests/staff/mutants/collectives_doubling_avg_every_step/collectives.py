from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.collectives",
    '            mask <<= 1\n        if op == "avg":\n            flat.div_(n)\n',
    '            if op == "avg":\n                flat.div_(n)\n            mask <<= 1\n',
)
