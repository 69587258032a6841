"""Mutant: ring attention's bytes count the forward hops only (backward's key/value and gradient hops forgotten)."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.accounting",
       old="return 2 * block * ((2 * c - 2) * e + c * ge)", new="return 2 * block * (c - 1) * e")  # fmt: skip
