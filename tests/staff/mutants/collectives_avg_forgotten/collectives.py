from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.collectives", "        chunks[me].div_(n)", "        pass")
