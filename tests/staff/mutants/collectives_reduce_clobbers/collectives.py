from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.collectives",
    "    partial = tensor.contiguous().clone() if rel != 0 else None",
    "    partial = None",
)
