"""The capstone: a Llama-style transformer trained on a 4-D mesh with your own parts (handouts/11-capstone.md).

    python -m scripts.tools.train --mesh dp2,tp2,pp2 --steps 200       # train it; the curve matches one process

``parallelize(model, mesh)`` turns the given ``transformer.Transformer`` into this rank's piece of it on a
``ProcessMesh`` (Part 7) with axes "dp", "pp", "cp" and "tp" (sizes may be 1), plus "ep" for the
mixture-of-experts blocks, and ``train_step`` runs one AdamW step that equals one process's step on the
whole batch. Every axis is one of your parts on that axis's group:

    tp   Part 4  attention split by heads, SwiGLU by hidden features (Megatron); sequence parallel
                 around the norms: x (s/(cp·tp), b, d) --all-gather--> block --reduce-scatter--> (s/(cp·tp), b, d)
    cp   Part 9  ring attention over the zigzag layout; each token rotated by its *global* position
    pp   Part 5  stages of whole blocks (embedding on the first, head and loss on the last), 1F1B or interleaved
    dp   Parts 2, 3  data parallel: gradients averaged (flat all-reduce), ZeRO-1, or FSDP over dp
    fsdp Part 7  with an "fsdp" axis, HSDP: FSDP within "fsdp", replicated (averaged) across "dp"
    ep   Part 8  MoE experts split over ep, tokens by all-to-all; ep is data-parallel for everything else

Rank layout: the mesh's (row-major, last axis fastest). The whole batch (B, S) is given to every rank;
rank (dp=d, fsdp=f, ep=e, cp=c, tp=t) is data replica r = (d·fsdp + f)·ep + e of R = dp·fsdp·ep
(fsdp = 1, f = 0 without an "fsdp" axis; ep likewise) and trains on rows [r·B/R, (r+1)·B/R) of it, on
the tokens ``shard_sequence(..., zigzag=zigzag)`` gives cp rank c, of which it keeps the t-th contiguous
1/tp (sequence parallelism: the embedding, norms and head run on those tokens only).

Grouped-query attention under TP: rank t of T holds query heads [t·H/T, (t+1)·H/T) and the key/value
heads [t·K/T, (t+1)·K/T) they read, so T must divide both H and K (Megatron replicates K/V heads when
T > K; here that is an error).

Your task: the parallel block (11.1), the model's pieces and stages (11.2) and one training step (11.3).
Reuse your parts (imported below) on the mesh's groups; do not copy them. Bad input raises
ValueError/TypeError naming the argument, on every rank, before any message.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from cs336_systems.transformer import Attention, Block, SwiGLU, Transformer

from . import context_parallel, ddp, expert_parallel, fsdp, pipeline, sharded_optimizer, tensor_parallel  # noqa: F401
from .mesh import HSDP, ProcessMesh  # noqa: F401 (HSDP: for data_parallel="hsdp")

__all__ = ["ParallelAttention", "ParallelSwiGLU", "ParallelBlock", "ParallelTransformer", "parallelize"]

SCHEDULES = ("gpipe", "1f1b", "interleaved")
DATA_PARALLEL = ("ddp", "zero1", "fsdp", "hsdp")
DDP_BUCKET_MB = 25.0  # "ddp" buckets: torch DDP's default cap


# ---------------------------------------------------------------------------------------------
# ## Task 11.1: the parallel block (TP + SP, CP, EP)
# ---------------------------------------------------------------------------------------------


class ParallelAttention(nn.Module):
    """``transformer.Attention`` split by heads over ``tp_group`` and by sequence over ``cp_group``.

    Parameters (names as the dense module's, no biases), on tp rank t of T: ``wq`` the rows of query
    heads [t·H/T, (t+1)·H/T), (H/T·head_dim, d_model); ``wk``, ``wv`` the rows of key/value heads
    [t·K/T, (t+1)·K/T), (K/T·head_dim, d_model) (Part 4's column shards); ``wo`` the matching
    columns, (d_model, H/T·head_dim) (a row shard). Each is a plain ``nn.Linear`` (bias=False) holding
    that shard (``ParallelSwiGLU``'s likewise): take the weight from Part 4's
    ``ColumnParallelLinear.from_dense`` / ``RowParallelLinear.from_dense``, not the module, because
    ``ColumnParallelLinear``'s forward adds ``copy_to_tp_region`` (an all-reduce over tp in backward) where
    the block's sequence-parallel all-gather already does that job, and FSDP shards only ``nn.Linear`` and
    ``nn.Embedding`` weights.

    Forward, a (s, b, d_model) -> (s, b, d_model): ``a`` is this cp rank's whole block of the sequence
    (s = S/cp tokens, in the layout ``context_parallel.shard_sequence(..., zigzag=zigzag)`` gives; already
    gathered over tp), sequence first. Queries and keys are rotated by the tokens' global positions;
    keys and values are repeated to the local query heads, then ``context_parallel.ring_attention``
    (causal) runs over ``cp_group`` (one rank: plain causal attention). The result is this rank's
    *partial sum* of the output projection: summing it over the tp group gives the dense output.
    No tp communication here (the block does it); cp: the ring's neighbour hops only.
    """

    def __init__(self, dense: Attention, *, tp_group: dist.ProcessGroup, cp_group: dist.ProcessGroup,
                 zigzag: bool = True) -> None:  # fmt: skip
        super().__init__()
        raise NotImplementedError("Task 11.1 (parallel block): see handouts/11-capstone.md §11.1")

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        """a (s, b, d_model), this cp rank's tokens -> (s, b, d_model) partial sums over tp."""
        raise NotImplementedError("Task 11.1 (parallel block): see handouts/11-capstone.md §11.1")


class ParallelSwiGLU(nn.Module):
    """``transformer.SwiGLU`` split over ``tp_group``: ``w_gate`` and ``w_up`` by rows (hidden features
    [t·F/T, (t+1)·F/T), (F/T, d_model)), ``w_down`` by the same columns, (d_model, F/T).

    Forward, (..., d_model) replicated over tp -> (..., d_model), this rank's partial sum (the block
    reduces it). F = d_ff must divide by T. No communication here.
    """

    def __init__(self, dense: SwiGLU, *, tp_group: dist.ProcessGroup) -> None:
        super().__init__()
        raise NotImplementedError("Task 11.1 (parallel block): see handouts/11-capstone.md §11.1")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_model) -> (..., d_model) partial sums over tp."""
        raise NotImplementedError("Task 11.1 (parallel block): see handouts/11-capstone.md §11.1")


class ParallelBlock(nn.Module):
    """One ``transformer.Block`` on this rank of the mesh: x (b, s_local, d_model) -> (b, s_local, d_model).

    ``x`` holds this rank's tokens: s_local = S/(cp·tp), the tp-th contiguous piece of the cp rank's
    block. Modules, named as the dense block's: ``attn_norm`` and ``ffn_norm`` (copies, replicated),
    ``attn`` a ``ParallelAttention``, ``ffn`` a ``ParallelSwiGLU``, or for an MoE block
    ``expert_parallel.ExpertParallelMoE.from_dense(ffn, ep_group)`` (experts split over ep, router
    replicated) when ``ep_group`` is given, else a copy of the dense MoE.

    Forward, sequence parallel (Korthikanti et al. 2022): each sub-layer is
    ``x + reduce_scatter_to_sp_region(sublayer(all_gather_from_sp_region(norm(x))))`` over tp, on the
    sequence dim (the block works sequence-first inside: (s_local, b, d)): exactly one all-gather
    and one reduce-scatter per sub-layer in forward, and one of each in backward (Part 4's functions;
    nothing with one tp rank), and no other tp communication (no all-reduce: see ``ParallelAttention``).
    An MoE sub-layer runs on this rank's own tokens, without tp communication: ``x + moe(norm(x))`` (its
    all-to-alls go over ep).
    """

    def __init__(self, dense: Block, *, tp_group: dist.ProcessGroup, cp_group: dist.ProcessGroup,
                 ep_group: dist.ProcessGroup | None = None, zigzag: bool = True) -> None:  # fmt: skip
        super().__init__()
        raise NotImplementedError("Task 11.1 (parallel block): see handouts/11-capstone.md §11.1")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (b, s_local, d_model), this rank's tokens -> (b, s_local, d_model)."""
        raise NotImplementedError("Task 11.1 (parallel block): see handouts/11-capstone.md §11.1")


# ---------------------------------------------------------------------------------------------
# ## Task 11.2: the model's pieces on this rank: blocks, stages, data parallelism
# ---------------------------------------------------------------------------------------------


class ParallelTransformer:
    """This rank's piece of ``model`` (a ``transformer.Transformer``) on ``mesh``, and its optimizer.

    ``mesh`` must have the axes "dp", "pp", "cp" and "tp" (sizes may be 1) and may have "ep", and "fsdp"
    for ``data_parallel="hsdp"`` (then the dp·fsdp ranks are data replicas, rank (dp=d, fsdp=f) the
    (d·fsdp + f)-th: the module docstring's row rule). Built on every rank from the same dense model (same
    seed); ``model`` itself is never changed, not even by ``train_step`` (every module is this rank's own
    copy or shard). Construction:

      1. every block becomes a ``ParallelBlock`` (groups: ``mesh.group("tp")``, ``mesh.group("cp")``,
         ``mesh.group("ep")`` if the mesh has "ep", ``zigzag``); ``embed`` and ``head`` are copied
         (replicated: they run on this rank's tokens only);
      2. the blocks are cut into P·V chunks of L/(P·V) whole blocks (``pipeline.split_into_stages``),
         P = ``mesh.size("pp")``, V = ``num_chunks``; global chunk 0 starts with ``embed``, the last
         ends with ``head``; this rank keeps chunks pp_rank + k·P (k < V), as ``.chunks``, a list of
         ``nn.Sequential`` whose parameter names are the dense model's (``block3.attn.wq.weight``) (the
         chunks themselves, also under FSDP or HSDP, not their wrappers), run
         by a ``pipeline.PipelineStage`` over ``mesh.group("pp")``, with loss
         ``lm_loss(logits, targets) / tp`` (each tp rank holds 1/tp of the tokens);
      3. data parallelism over "dp": ``data_parallel="ddp"`` (gradients averaged over dp: see ``train_step``),
         ``"zero1"`` (``sharded_optimizer.ShardedOptimizer`` over dp) or ``"fsdp"`` (each chunk wrapped
         in ``fsdp.FSDP(chunk, group=mesh.group("dp"), units=...)``, Part 3.4: each dense block, not MoE,
         one unit, embedding and head per layer; with ``num_microbatches`` > 1 gradient sync is off for
         all but each chunk's last microbatch, so a step reduce-scatters once per unit or weight, not
         once per microbatch) or ``"hsdp"`` (each chunk wrapped in
         ``mesh.HSDP(chunk, mesh, "fsdp", "dp", units=...)``, Part 7, with FSDP's units and, under
         microbatches, the same deferred sync: a step reduce-scatters over fsdp and all-reduces over dp once
         per unit or parameter); ``.optimizer`` is ``optimizer_cls`` (default
         ``torch.optim.AdamW``) over this rank's parameters, with ``optimizer_kwargs``.

    ``local_state_dict()`` returns ``{dense name: tensor}`` for every parameter of this rank's chunks:
    TP weights are this rank's shard as ``ParallelAttention``/``ParallelSwiGLU`` say, an expert-parallel
    MoE holds E/ep experts, global experts [ep_rank·E/ep, (ep_rank+1)·E/ep), its local expert i named
    after global expert ``ep_rank·E/ep + i`` (no other expert on this rank), FSDP shards are gathered
    (it communicates over dp, or fsdp, then; every rank must call it), anything else whole.

    Raises ``TypeError`` for a ``model`` that is not a ``Transformer`` or a ``mesh`` that is not a
    ``ProcessMesh``, and ``ValueError`` (naming the argument) for a mesh without one of the four axes
    or with other axes, tp not dividing ``n_heads``, ``n_kv_heads`` or ``d_ff``, P·V not dividing
    ``n_layers`` (a message naming both ``mesh`` and ``num_chunks``), ep not dividing ``num_experts``,
    ``num_chunks`` < 1 (or > 1 with one stage or a schedule other than "interleaved"), an unknown
    ``schedule`` or ``data_parallel`` (or "hsdp" without an "fsdp" axis, or an "fsdp" axis without "hsdp"),
    or ``num_microbatches`` < 1: on every rank, before any communication.
    """

    def __init__(self, model: Transformer, mesh: ProcessMesh, *, num_microbatches: int = 1,
                 schedule: str = "1f1b", num_chunks: int = 1, data_parallel: str = "ddp", zigzag: bool = True,
                 optimizer_cls: type = torch.optim.AdamW, **optimizer_kwargs) -> None:  # fmt: skip
        raise NotImplementedError("Task 11.2 (pieces and stages): see handouts/11-capstone.md §11.2")

    def local_state_dict(self) -> dict[str, torch.Tensor]:
        """``{dense parameter name: this rank's tensor}`` for this rank's chunks (see the class)."""
        raise NotImplementedError("Task 11.2 (pieces and stages): see handouts/11-capstone.md §11.2")

    # ## Task 11.3: one training step ---------------------------------------------------------

    def train_step(self, inputs: torch.Tensor, targets: torch.Tensor) -> float | None:
        """One optimizer step on the whole batch: ``inputs``, ``targets`` (B, S) int64 token ids, the same
        on every rank. Returns the mean loss over all B·S tokens on the ranks of the last pipeline stage
        (the same float on each), ``None`` on the others.

        This rank keeps its rows and tokens (see the module docstring) and runs the pipeline with
        ``num_microbatches`` and ``schedule``. Then the gradients: the parameters that run on this
        rank's tokens only yet are replicated over tp (embedding, norms, head, MoE routers and experts)
        are summed over tp (one all-reduce, Megatron's sequence-parallel rule); then every gradient is
        averaged over the data axes ep, cp and dp (each ``ddp.all_reduce_gradients_flat`` over its group;
        not dp under FSDP or HSDP, which averaged over dp and fsdp during backward, on each chunk's last
        microbatch only; under "ddp" with one microbatch, dp by ``ddp.DDPBucketed`` buckets of
        ``DDP_BUCKET_MB``, all-reduced during backward and collected first), except an
        expert-parallel MoE's: ``expert_parallel.all_reduce_moe_gradients`` (router over ep and dp,
        experts over dp; its dp group None under FSDP or HSDP), then ``ddp.all_reduce_gradients_flat``
        over cp. A parameter whose
        ``.grad`` is None (an expert no token reached) counts as zeros. Then the optimizer steps. The
        loss is summed over tp and averaged over cp, ep, fsdp and dp on the last stage (scalar all-reduces).
        Nothing else communicates.

        ``ValueError`` naming ``inputs`` (or ``targets``) for a shape other than (B, S) of equal
        shapes, B not divisible by dp·fsdp·ep·num_microbatches (the data replicas, each cut into
        microbatches; fsdp, ep = 1 when the mesh lacks the axis), S not divisible by cp·tp (and, with zigzag
        and cp > 1, by 2·cp; zigzag asks nothing more at cp = 1): on every rank, before any communication.
        """
        raise NotImplementedError("Task 11.3 (training step): see handouts/11-capstone.md §11.3")


def parallelize(model: Transformer, mesh: ProcessMesh, **kwargs) -> ParallelTransformer:
    """``ParallelTransformer(model, mesh, **kwargs)``: this rank's piece of ``model`` on ``mesh`` (given)."""
    return ParallelTransformer(model, mesh, **kwargs)
