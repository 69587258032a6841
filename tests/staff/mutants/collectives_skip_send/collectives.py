from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.collectives",
    "        _exchange_and_add(group, chunks[(me - step - 1) % n], nxt,",
    "        skip = step == 0 and me == n - 1  # this rank 'forgets' its first send\n"
    "        _exchange_and_add(group, chunks[(me - step - 1) % n][:0] if skip else chunks[(me - step - 1) % n], nxt,",
)
