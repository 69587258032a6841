"""The Part 5 oracles for schedules in a V (ZB-V, DualPipeV): torch's own orders, the V's chunks, a rank's training.

    from tests.oracles.pipeline_v import torch_v_schedule, v_chunks_of, v_train_rank
    torch_v_schedule("zb-v", p, m, r)      # [(kind, microbatch, local chunk, overlap), ...] as torch runs it
    results = run_ranks(p, v_train_rank, "dualpipev", checkpoint, m, batches)

``torch_v_schedule`` asks torch's ``ScheduleZBVZeroBubble`` / ``ScheduleDualPipeV`` for the order of
one rank (their ``_calculate_single_rank_operations``, called on a stand-in that carries only the
three sizes it reads, so no process group is needed) and writes it in the kit's vocabulary: torch's
stage index becomes the local chunk (stage r is chunk 0, stage 2p - 1 - r chunk 1), its I
(input gradient) and FULL_BACKWARD both become "B" (a B with no W of its own is whole), and its
OVERLAP_F_B becomes an F with overlap=True followed by the B. ``v_chunks_of`` cuts a model into 2p
chunks with the tests' own split and returns rank r's two, (chunk r, chunk 2p - 1 - r);
``v_train_rank`` trains them with ``PipelineStage(..., placement="v")``: rank 0 gets the inputs and
the targets and returns the loss. Used by tests/test_pipeline_v.py, its hidden counterpart and
scripts/bench/pipeline.py.
"""

from __future__ import annotations

import types
from collections import OrderedDict

import torch
from torch import nn
from torch.distributed.pipelining import schedules as torch_schedules

from tests.oracles.pipeline import build_model, stage_bounds

TORCH_V_SCHEDULES = {"zb-v": "ScheduleZBVZeroBubble", "dualpipev": "ScheduleDualPipeV"}


def torch_v_schedule(schedule: str, p: int, m: int, rank: int) -> list[tuple[str, int, int, bool]]:
    """Rank ``rank``'s order under torch's ``schedule`` ("zb-v" or "dualpipev") with p ranks and m microbatches."""
    cls = getattr(torch_schedules, TORCH_V_SCHEDULES[schedule])
    stand_in = types.SimpleNamespace(pp_group_size=p, _n_microbatches=m, num_stages=2 * p)
    kinds = {torch_schedules.FORWARD: "F", torch_schedules.BACKWARD_INPUT: "B",
             torch_schedules.FULL_BACKWARD: "B", torch_schedules.BACKWARD_WEIGHT: "W"}  # fmt: skip
    out = []
    for action in cls._calculate_single_rank_operations(stand_in, rank):
        if action is None:  # torch's idle slot
            continue
        if action.computation_type == torch_schedules.OVERLAP_F_B:
            forward, backward = action.sub_actions
            out.append(("F", forward.microbatch_index, int(forward.stage_index != rank), True))
            out.append(("B", backward.microbatch_index, int(backward.stage_index != rank), False))
        else:
            out.append(
                (kinds[action.computation_type], action.microbatch_index, int(action.stage_index != rank), False)
            )
    return out


def v_widths_model(p: int, seed: int = 0) -> nn.Sequential:
    """2p one-layer chunks whose boundaries all differ in width: chunk g maps 3 + g features to 4 + g
    (a Linear, then Tanh but after the last). Every message of a V then has its own size, so a receive
    matched with another message (a crossing) is a size mismatch, never silently wrong numbers."""
    torch.manual_seed(seed)
    layers = [nn.Sequential(nn.Linear(3 + g, 4 + g), nn.Tanh()) for g in range(2 * p - 1)]
    return nn.Sequential(*layers, nn.Sequential(nn.Linear(2 + 2 * p, 3 + 2 * p))).to(torch.float64)


def v_widths_batches(p: int, batch: int, steps: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``steps`` seeded (x, y) batches of ``batch`` rows for ``v_widths_model(p)``: x (batch, 3), y (batch, 3 + 2p)."""
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, 3, generator=gen, dtype=torch.float64),
             torch.randn(batch, 3 + 2 * p, generator=gen, dtype=torch.float64)) for _ in range(steps)]  # fmt: skip


def v_oracle_steps(p: int, batches, lr: float = 0.1):
    """One process, ``v_widths_model(p)``, the whole batch: (loss, {name: grad}) per SGD step."""
    model = v_widths_model(p)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    steps = []
    for x, y in batches:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        steps.append((loss.detach(), {n: q.grad.clone() for n, q in model.named_parameters()}))
        opt.step()
    return steps


def where_in_v(p: int, rank: int, chunk: int) -> str:
    """How the handout names a place in a V: "rank 1, chunk 1 (global chunk 6, the way back up)"."""
    g = rank if chunk == 0 else 2 * p - 1 - rank
    way = "the way down" if chunk == 0 else "the way back up"
    return f"rank {rank}, chunk {chunk} (global chunk {g}, {way})"


def assert_v_matches_oracle(results, expected, p: int, what: str) -> None:
    """``results[r]`` (``v_train_rank``'s steps) against ``v_oracle_steps``: the loss on rank 0, the other ranks
    None, every parameter's gradient on the rank holding its chunk, named by rank and chunk as in the handout."""
    from tests.harness import assert_close

    __tracebackhide__ = True
    for step, (loss, grads) in enumerate(expected):
        seen = set()
        for r in range(p):
            got_loss, got_grads = results[r][step]
            if r == 0:
                assert isinstance(got_loss, float), (
                    f"rank 0 (the V's both ends, it holds the loss), step {step}, {what}: returned {got_loss!r:.60}, "
                    "not the loss as a float"
                )
                assert_close(torch.tensor(got_loss, dtype=loss.dtype), loss, what=f"rank 0, step {step}, {what}, loss")
            else:
                assert got_loss is None, f"rank {r}, step {step}, {what}: returned {got_loss}, not None (rank 0's)"
            for name, grad in got_grads.items():
                g = int(name.split(".")[0])
                place = where_in_v(p, r, 0 if g == r else 1)
                assert_close(grad, grads[name], what=f"{place}, step {step}, {what}, {name}.grad")
                seen.add(name)
        assert seen == set(grads), f"{what}: parameters on no rank: {sorted(set(grads) - seen)}"


def v_chunks_of(model: nn.Sequential, p: int, rank: int) -> list[nn.Sequential]:
    """Rank ``rank``'s chunks of ``model`` cut into 2p: global chunks rank and 2p - 1 - rank (the model's names)."""
    layers = list(model.named_children())
    bounds = stage_bounds(len(model), 2 * p)
    return [nn.Sequential(OrderedDict(layers[a:b])) for a, b in (bounds[rank], bounds[2 * p - 1 - rank])]


def v_pipeline_stage(ctx, P, model: nn.Sequential, probe: nn.Module | None = None):
    """In a rank: ``P.PipelineStage`` over this rank's two V chunks of ``model`` (each behind ``probe``
    if given) with an MSE loss; returns (stage, chunks)."""
    chunks = v_chunks_of(model.to(ctx.device), ctx.world_size, ctx.rank)
    if probe is not None:
        chunks = [nn.Sequential(probe, *chunk) for chunk in chunks]
    return P.PipelineStage(chunks, ctx.rank, ctx.world_size, nn.MSELoss(), placement="v"), chunks


def v_train_rank(ctx, schedule, checkpoint, m, batches, model_kind="deep"):
    """In a rank: SGD steps of a V pipeline under ``schedule``; per step the loss (rank 0) and this rank's grads.
    ``model_kind``: a ``build_model`` kind, or "v-widths" (``v_widths_model``)."""
    P = ctx.load("pipeline")
    p = ctx.world_size
    model = v_widths_model(p) if model_kind == "v-widths" else build_model(model_kind, 2 * p)
    pipe, chunks = v_pipeline_stage(ctx, P, model)
    opt = torch.optim.SGD([q for c in chunks for q in c.parameters()], lr=0.1)
    steps = []
    for x, y in batches:
        opt.zero_grad()
        first = ctx.rank == 0  # the V's both ends
        loss = pipe.train_step(x.to(ctx.device) if first else None, y.to(ctx.device) if first else None, m,
                               schedule=schedule, checkpoint=checkpoint)  # fmt: skip
        steps.append((loss, {n: q.grad for c in chunks for n, q in c.named_parameters()}))
        opt.step()
    return steps


def overlap_rank(ctx, m):
    """DualPipeV on ``v_widths_model``: this rank's receives (time posted, peer, elements) and its timeline."""
    from tests.harness.recorder import CommRecorder

    P = ctx.load("pipeline")
    p = ctx.world_size
    pipe, _ = v_pipeline_stage(ctx, P, v_widths_model(p))
    x, y = v_widths_batches(p, 2 * m, steps=1, seed=5)[0]  # microbatches of 2 rows
    first = ctx.rank == 0
    with CommRecorder() as rec:
        pipe.train_step(x.to(ctx.device) if first else None, y.to(ctx.device) if first else None, m,
                        schedule="dualpipev")  # fmt: skip
    recvs = [(e.time, e.peer, e.numel) for e in rec.events if e.op in ("recv", "irecv") and e.dtype == "float64"]
    timeline = [(a.kind, a.microbatch, a.chunk, bool(a.overlap), start, end) for a, start, end in pipe.timeline]
    return recvs, timeline


def check_pairs_post_early(outs, m: int) -> None:
    """Judge ``overlap_rank``'s results: for every F&B pair whose B needs a message, the receive of that
    B's gradient (the k-th receive of its size from its neighbour, for the k-th B of its chunk; every
    chunk boundary of ``v_widths_model`` has its own width) was posted before the F's ``t_start``."""
    p, rows = len(outs), 2  # overlap_rank's microbatches have 2 rows
    for r, (recvs, timeline) in enumerate(outs):
        seen = {0: 0, 1: 0}  # Bs of each local chunk so far
        for n, (kind, i, c, *_) in enumerate(timeline):
            if kind != "B":
                continue
            k, seen[c] = seen[c], seen[c] + 1
            g = r if c == 0 else 2 * p - 1 - r  # this B's global chunk: its gradient comes from chunk g + 1
            peer = r + 1 if c == 0 else r - 1
            if n == 0 or not timeline[n - 1][3] or g == 2 * p - 1 or not 0 <= peer < p:
                continue  # not the B of an F&B pair, or its gradient needs no message (the loss, the V's turn)
            forward = timeline[n - 1]
            mine = [t for t, q, numel in recvs if q == peer and numel == rows * (4 + g)]
            pair = f"F{forward[1]}.{forward[2]}& B{i}.{c}"
            assert len(mine) > k, (
                f"{where_in_v(p, r, c)}: pair {pair}: {len(mine)} receives of chunk {g}'s gradient "
                f"({rows} x {4 + g}) from rank {peer}, expected one per B (this is B number {k + 1})"
            )
            late = mine[k] - forward[4]
            assert late < 0, (
                f"{where_in_v(p, r, c)}, dualpipev, {p} ranks, m={m}: pair {pair}: the receive of B{i}.{c}'s "
                f"gradient from rank {peer} was posted {late * 1e3:.2f} ms after F{forward[1]}.{forward[2]} "
                "started; an F&B pair posts its B's gradient receive before the F runs, so that message "
                "travels while the F computes (handouts/05-pipeline.md §5.8)"
            )
