"""Mutant: each rank calls new_group only for the slices it belongs to (new_group is collective)."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.mesh",
    "group = dist.new_group(ranks)  # collective: every rank creates every slice's group\n"
    "                if me in ranks:",
    "if me in ranks:\n                    group = dist.new_group(ranks)",
)
