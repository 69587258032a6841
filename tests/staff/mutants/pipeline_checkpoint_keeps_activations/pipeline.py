"""Mutant: with checkpoint=True the forward still builds and keeps its graph (recomputes, but saves nothing)."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    "keep_graph = not step.checkpoint",
    "keep_graph = True",
)
