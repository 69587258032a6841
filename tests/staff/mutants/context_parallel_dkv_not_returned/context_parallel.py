"""Mutant: backward returns the key/value gradient it accumulated last (another rank's block), never
sending it on to its owner."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.context_parallel",
       old="works, dk, dv = grad_hop", new="works, _, _ = grad_hop")  # fmt: skip
