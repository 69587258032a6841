"""Mutant: the first pipeline stage holds one microbatch's activations, not min(pp, m) (GPipe/1F1B forgotten)."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.accounting",
    "return states + per_layer * math.ceil(layers / pp) * min(pp, m)",
    "return states + per_layer * math.ceil(layers / pp)",
)
