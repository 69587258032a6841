"""Mutant: g (reduce_from_tp_region) all-reduces in backward as well as in forward."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.tensor_parallel",
       "        return grad, None\n\n\nclass _ScatterToTPRegion",
       "        return _all_reduce(grad, None), None\n\n\nclass _ScatterToTPRegion")  # fmt: skip
