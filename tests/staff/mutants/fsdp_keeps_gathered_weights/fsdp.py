"""Mutant: FSDP keeps each layer's gathered weight after forward (as if to reuse it in backward):
every full weight stays alive, so sharding saves no memory."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.fsdp",
       old="        del weight  # the only reference: the gathered storage is released here",
       new="        info.full = weight  # Bug: kept after forward instead of freed")  # fmt: skip
