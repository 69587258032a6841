"""Mutant: the merge leaves log space (log(e^a + e^b)): correct for small scores, inf/nan for large ones."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.context_parallel",
       old="new_lse = torch.logaddexp(old_lse, blk_lse)",
       new="new_lse = torch.log(torch.exp(old_lse) + torch.exp(blk_lse))")  # fmt: skip
