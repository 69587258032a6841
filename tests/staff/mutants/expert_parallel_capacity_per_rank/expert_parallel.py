"""Mutant: capacity applied per rank (local tokens, local queue) instead of per expert over the group."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.expert_parallel",
    "        capacity = expert_capacity(int(all_counts.sum()) // k, E, k, self.capacity_factor)\n"
    "        per_choice = c.sum(dim=0)  # (E, k)\n"
    "        ahead = (torch.cumsum(per_choice, 1) - per_choice)[None] + (torch.cumsum(c, 0) - c)  # queued before\n",
    "        capacity = expert_capacity(int(all_counts.sum()) // k // world, E, k, self.capacity_factor)\n"
    "        ahead = torch.cumsum(c, 2) - c  # this rank's own queue only\n",
)
