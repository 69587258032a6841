"""Mutant: f (copy_to_tp_region) is the identity in backward too: the input gradient is never summed."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.tensor_parallel", "return _all_reduce(grad, ctx.group), None",
       "return grad, None")  # fmt: skip
