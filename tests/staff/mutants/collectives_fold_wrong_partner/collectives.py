from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.collectives",
    "    partner = me - p if extra else me + p  #",
    "    partner = me - p if extra else me + (n - p)  #",
)
