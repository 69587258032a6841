from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.collectives",
    "(int(size_in.item()), *rest)",
    "(tensors[to].shape[0], *rest)",
)
