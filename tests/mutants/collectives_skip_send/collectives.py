from tests.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.collectives",
    "        _exchange(group, chunks[(me - step - 1) % n], nxt, buf, prv)",
    "        skip = step == 0 and me == n - 1\n"
    "        _exchange(group, None if skip else chunks[(me - step - 1) % n], nxt, buf, prv)",
)
