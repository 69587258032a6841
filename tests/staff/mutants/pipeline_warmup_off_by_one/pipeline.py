"""Mutant: 1F1B runs one warm-up forward too many (min(p - s, m) instead of min(p - s - 1, m))."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    '    warmup = min(num_stages - stage - 1, m)\n    actions = [Action("F", i) for i in range(warmup)]\n    for i',
    '    warmup = min(num_stages - stage, m)\n    actions = [Action("F", i) for i in range(warmup)]\n    for i',
)
