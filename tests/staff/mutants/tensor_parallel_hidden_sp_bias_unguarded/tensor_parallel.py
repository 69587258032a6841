"""Mutant: the sequence-parallel MLP adds fc2's shared bias even when the MLP has no bias."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.tensor_parallel",
    old="        if self.fc2.bias is not None:\n"
    "            y = y + _SharedBias.apply(self.fc2.bias, _world(self.group))",
    new="        y = y + _SharedBias.apply(self.fc2.bias, _world(self.group))",
)
