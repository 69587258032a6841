"""Mutant: ZB-H1's steady state runs B(i) before F(w + i): the last stage waits on its own forward, every
stage above waits on it (a schedule that deadlocks)."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    """        if warmup + i < m:
            actions.append(Action("F", warmup + i))
        actions.append(Action("B", i))
""",
    """        actions.append(Action("B", i))
        if warmup + i < m:
            actions.append(Action("F", warmup + i))
""",
)
