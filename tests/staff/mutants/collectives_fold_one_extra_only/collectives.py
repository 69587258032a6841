from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.collectives",
    "    extra = me >= p\n",
    "    extra = me == n - 1 and n != p  # 'the' extra rank\n",
)
