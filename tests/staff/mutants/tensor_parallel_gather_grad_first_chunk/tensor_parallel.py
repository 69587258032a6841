"""Mutant: gather_from_tp_region's backward hands every rank the first chunk of the gradient."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.tensor_parallel", "        return _split_last(grad, ctx.group), None",
       "        return grad.chunk(_world(ctx.group), dim=-1)[0].contiguous(), None")  # fmt: skip
