"""Mutant: hooks registered per name (named_parameters(remove_duplicate=False)): a tied weight is reduced twice."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.ddp",
    "            for p in _trainable_parameters(module):\n"
    "                p.register_post_accumulate_grad_hook(self._launch_all_reduce)",
    "            for _, p in module.named_parameters(remove_duplicate=False):\n"
    "                if p.requires_grad:\n"
    "                    p.register_post_accumulate_grad_hook(self._launch_all_reduce)",
)
