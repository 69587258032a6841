"""Mutant: the planner lets TP grow past a node (up to every GPU) before pipelining."""

import reference_solutions

# The other modules come from the reference, unchanged.
__path__.append(reference_solutions.__path__[0])
