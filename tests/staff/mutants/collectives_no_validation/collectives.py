from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.collectives",
    "    if tensor.dim() == 0 or tensor.shape[0] % n != 0:",
    "    if tensor.dim() == 0:",
)
