"""Mutant: the planner lets TP grow past a node (up to every GPU) before pipelining."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.accounting",
    "tps = [t for t in (2**i for i in range(per_node.bit_length())) if t <= per_node and heads % t == 0]",
    "tps = [t for t in (2**i for i in range(gpus.bit_length())) if t <= gpus and heads % t == 0]",
)
