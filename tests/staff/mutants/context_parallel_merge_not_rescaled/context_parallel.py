"""Mutant: the online-softmax merge adds a block's output without rescaling what was accumulated."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.context_parallel",
       old="old_out.mul_(torch.exp(old_lse - new_lse)[..., None]).add_(",
       new="old_out.add_(")  # fmt: skip
