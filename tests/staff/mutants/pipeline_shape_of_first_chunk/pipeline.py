"""Mutant: a rank allocates every chunk's incoming activations with the first shape it learned
(right while all chunk boundaries have the same width, wrong when they differ)."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    "return torch.empty(step.act_meta[k][0], dtype=step.act_meta[k][1], device=step.device)",
    "return torch.empty(*next(iter(step.act_meta.values()))[:1], dtype=step.act_meta[k][1], device=step.device)",
)
