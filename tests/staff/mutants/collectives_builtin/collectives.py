from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.collectives",
    "    flat = tensor.view(-1) if tensor.is_contiguous()",
    "    dist.all_reduce(tensor, group=group)\n"
    "    if op == 'avg':\n"
    "        tensor.div_(n)\n"
    "    return\n"
    "    flat = tensor.view(-1) if tensor.is_contiguous()",
)
