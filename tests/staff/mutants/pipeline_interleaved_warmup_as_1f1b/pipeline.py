"""Mutant: interleaved warm-up uses 1F1B's p - s - 1 in place of 2(p - s - 1) (one short per later stage)."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    "warmup = min(2 * (p - stage - 1) + (v - 1) * p, total)",
    "warmup = min((p - stage - 1) + (v - 1) * p, total)",
)
