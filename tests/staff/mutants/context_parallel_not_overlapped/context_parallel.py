"""Mutant: the forward posts the next hop only after computing with the current block (no overlap)."""

from tests.staff.mutants.mutate import mutate

POST = """        if more:  # the next block travels while this one is computed
            k_next, v_next = torch.empty_like(k_cur), torch.empty_like(v_cur)
            hop = _post_hop(group, nxt, prv, [k_cur, v_cur], [k_next, v_next])
"""
COMPUTE = """        seen = _visible(q_pos, _positions(owner, n, s, zigzag), causal)
        if seen is not None:
            row0, col1, hidden = seen
            scores = _scores(qf, k_cur.to(acc), row0, col1, hidden, scale)  # (b, h, sq', sk')
            blk_lse = torch.logsumexp(scores, dim=-1)  # (b, h, sq'): finite, every row sees a key
            blk_out = torch.exp(scores - blk_lse[..., None]) @ v_cur[..., :col1, :].to(acc)  # (b, h, sq', dv)
            _merge(out, lse, row0, blk_out, blk_lse)
"""
mutate(globals(), "reference_solutions.context_parallel", old=POST + COMPUTE, new=COMPUTE + POST)
