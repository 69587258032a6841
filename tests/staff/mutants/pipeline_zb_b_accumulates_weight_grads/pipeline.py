"""Mutant: ZB-H1's B runs a whole backward (weight grads included) and W adds them again: grads doubled."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    "(grad_x,) = torch.autograd.grad(out, x, grad_out, retain_graph=True, allow_unused=True)",
    "out.backward(grad_out, retain_graph=True); grad_x = x.grad",
)
