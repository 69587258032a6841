from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.collectives", "chunks[(me - step) % n], nxt", "chunks[(me - step + 1) % n], nxt")
