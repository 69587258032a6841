"""Mutant: ZB-H1 runs each round's W before its B (a weight gradient before the input gradient it needs)."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    """        actions.append(Action("B", i))
        if i >= stage:
            actions.append(Action("W", weights))
            weights += 1
""",
    """        if i >= stage:
            actions.append(Action("W", weights))
            weights += 1
        actions.append(Action("B", i))
""",
)
