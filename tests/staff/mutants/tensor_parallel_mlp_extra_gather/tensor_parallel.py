"""Mutant: the TP MLP gathers fc1's output and re-scatters it for fc2 (right values, extra collectives)."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.tensor_parallel",
    "return self.fc2(self.act(self.fc1(x)))",
    "h = gather_from_tp_region(self.act(self.fc1(x)), self.group)\n"
    "            return self.fc2(scatter_to_tp_region(h, self.group))",
)
