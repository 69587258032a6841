"""Mutant: ring_attention_forward does not check its arguments."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.context_parallel",
       old="""    _check_attention_inputs(q, k, v, causal, zigzag)
    ranks, me = _group_view(group)
    n = len(ranks)
    nxt, prv = ranks[(me + 1) % n], ranks[(me - 1) % n]
    acc = torch.promote_types(q.dtype, torch.float32)  # float32 even""",
       new="""    ranks, me = _group_view(group)
    n = len(ranks)
    nxt, prv = ranks[(me + 1) % n], ranks[(me - 1) % n]
    acc = torch.promote_types(q.dtype, torch.float32)  # float32 even""")  # fmt: skip
