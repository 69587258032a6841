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

import copy
import functools
from collections import OrderedDict

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from cs336_systems.models import MoE
from cs336_systems.transformer import Attention, Block, LMHead, RMSNorm, SwiGLU, Transformer, apply_rotary, lm_loss

from . import context_parallel, ddp, expert_parallel, fsdp, pipeline, sharded_optimizer, tensor_parallel  # noqa: F401
from .mesh import HSDP, ProcessMesh  # noqa: F401 (HSDP: for data_parallel="hsdp")

__all__ = ["ParallelAttention", "ParallelSwiGLU", "ParallelBlock", "ParallelTransformer", "parallelize"]

SCHEDULES = ("gpipe", "1f1b", "interleaved")
DATA_PARALLEL = ("ddp", "zero1", "fsdp", "hsdp")
DDP_BUCKET_MB = 25.0  # "ddp" buckets: torch DDP's default cap


# BEGIN SOLUTION
def _size(mesh: ProcessMesh, axis: str) -> int:
    return mesh.size(axis) if axis in mesh.shape else 1


def _column(dense: nn.Linear, group) -> nn.Linear:
    """An nn.Linear holding this rank's rows of ``dense`` (Part 4's column shard), no bias."""
    shard = tensor_parallel.ColumnParallelLinear.from_dense(dense, group)
    layer = nn.Linear(dense.in_features, shard.weight.shape[0], bias=False)
    layer.weight = shard.weight
    return layer


def _row(dense: nn.Linear, group) -> nn.Linear:
    """An nn.Linear holding this rank's columns of ``dense`` (Part 4's row shard), no bias."""
    shard = tensor_parallel.RowParallelLinear.from_dense(dense, group)
    layer = nn.Linear(shard.weight.shape[1], dense.out_features, bias=False)
    layer.weight = shard.weight
    return layer


# END SOLUTION


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
        # BEGIN SOLUTION: Task 11.1 (parallel block)
        cfg, tp = dense.cfg, dist.get_world_size(tp_group)
        for name, n in [("n_heads", cfg.n_heads), ("n_kv_heads", cfg.n_kv_heads)]:
            if n % tp:
                raise ValueError(f"{name} ({n}) must be divisible by the tensor-parallel size ({tp})")
        self.cfg, self.cp_group = cfg, cp_group
        self.cp = dist.get_world_size(cp_group)
        self.zigzag = bool(zigzag) and self.cp > 1
        self.wq, self.wk, self.wv = (_column(w, tp_group) for w in (dense.wq, dense.wk, dense.wv))
        self.wo = _row(dense.wo, tp_group)
        # END SOLUTION

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        """a (s, b, d_model), this cp rank's tokens -> (s, b, d_model) partial sums over tp."""
        # BEGIN SOLUTION: Task 11.1 (parallel block)
        return self._attend(a, batch_first=False)
        # END SOLUTION

    # BEGIN SOLUTION
    def _attend(self, a: torch.Tensor, *, batch_first: bool) -> torch.Tensor:
        """forward on a (s, b, d), or on a (b, s, d) with ``batch_first`` (the block's layout when it
        needs no sequence-first cut: one tp rank), which spares the block two transposing copies."""
        s, b = (a.shape[1], a.shape[0]) if batch_first else a.shape[:2]
        hd = self.cfg.head_dim

        def heads(t: torch.Tensor) -> torch.Tensor:  # -> (b, heads, s, hd)
            return t.view(b, s, -1, hd).transpose(1, 2) if batch_first else t.view(s, b, -1, hd).permute(1, 2, 0, 3)

        q, k, v = heads(self.wq(a)), heads(self.wk(a)), heads(self.wv(a))  # (b, H/T | K/T, s, hd)
        if self.cp == 1:
            positions = torch.arange(s, device="cpu")
        else:  # the global positions of this rank's tokens: where shard_sequence took them from
            whole = torch.arange(s * self.cp, device="cpu")
            positions = context_parallel.shard_sequence(whole, self.cp_group, zigzag=self.zigzag, dim=0)
        q, k = apply_rotary(q, positions, self.cfg.rope_theta), apply_rotary(k, positions, self.cfg.rope_theta)
        group = self.cfg.n_heads // self.cfg.n_kv_heads  # local query heads per local kv head
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (b, H/T, s, hd)
        if self.cp == 1:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            out = context_parallel.ring_attention(q, k, v, causal=True, zigzag=self.zigzag, group=self.cp_group)
        out = out.transpose(1, 2).reshape(b, s, -1) if batch_first else out.permute(2, 0, 1, 3).reshape(s, b, -1)
        return self.wo(out)  # this rank's heads' share of the output projection

    # END SOLUTION


class ParallelSwiGLU(nn.Module):
    """``transformer.SwiGLU`` split over ``tp_group``: ``w_gate`` and ``w_up`` by rows (hidden features
    [t·F/T, (t+1)·F/T), (F/T, d_model)), ``w_down`` by the same columns, (d_model, F/T).

    Forward, (..., d_model) replicated over tp -> (..., d_model), this rank's partial sum (the block
    reduces it). F = d_ff must divide by T. No communication here.
    """

    def __init__(self, dense: SwiGLU, *, tp_group: dist.ProcessGroup) -> None:
        super().__init__()
        # BEGIN SOLUTION: Task 11.1 (parallel block)
        d_ff, tp = dense.w_gate.out_features, dist.get_world_size(tp_group)
        if d_ff % tp:
            raise ValueError(f"d_ff ({d_ff}) must be divisible by the tensor-parallel size ({tp})")
        self.w_gate, self.w_up = _column(dense.w_gate, tp_group), _column(dense.w_up, tp_group)
        self.w_down = _row(dense.w_down, tp_group)
        # END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_model) -> (..., d_model) partial sums over tp."""
        # BEGIN SOLUTION: Task 11.1 (parallel block)
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))  # (..., F/T) inside
        # END SOLUTION


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
        # BEGIN SOLUTION: Task 11.1 (parallel block)
        if not isinstance(dense, Block):
            raise TypeError(f"dense must be a transformer.Block, got {type(dense).__name__}")
        self.tp_group = tp_group
        self.attn_norm = _copy(dense.attn_norm)
        self.attn = ParallelAttention(dense.attn, tp_group=tp_group, cp_group=cp_group, zigzag=zigzag)
        self.ffn_norm = _copy(dense.ffn_norm)
        self.is_moe = isinstance(dense.ffn, MoE)
        if not self.is_moe:
            self.ffn = ParallelSwiGLU(dense.ffn, tp_group=tp_group)
        elif ep_group is not None:
            self.ffn = expert_parallel.ExpertParallelMoE.from_dense(dense.ffn, ep_group)
        else:
            self.ffn = _copy(dense.ffn)
        # END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (b, s_local, d_model), this rank's tokens -> (b, s_local, d_model)."""
        # BEGIN SOLUTION: Task 11.1 (parallel block)
        tp = self.tp_group
        if dist.get_world_size(tp) == 1:  # no sequence-parallel cut: stay batch first, no transposing copies
            x = x + self.attn._attend(self.attn_norm(x), batch_first=True)
            return x + self.ffn(self.ffn_norm(x))  # SwiGLU and MoE act per token, in any layout
        h = x.transpose(0, 1).contiguous()  # (s_local, b, d): Part 4's SP functions cut dim 0
        a = tensor_parallel.all_gather_from_sp_region(self.attn_norm(h), tp)  # (S/cp, b, d)
        h = h + tensor_parallel.reduce_scatter_to_sp_region(self.attn(a), tp)  # (s_local, b, d)
        if self.is_moe:
            h = h + self.ffn(self.ffn_norm(h))  # this rank's tokens; experts reached over ep
        else:
            f = tensor_parallel.all_gather_from_sp_region(self.ffn_norm(h), tp)  # (S/cp, b, d)
            h = h + tensor_parallel.reduce_scatter_to_sp_region(self.ffn(f), tp)
        return h.transpose(0, 1).contiguous()  # (b, s_local, d): batch first between stages
        # END SOLUTION


# BEGIN SOLUTION
def _copy(module: nn.Module) -> nn.Module:
    """A deep copy with fresh parameters (training it never changes the dense model)."""
    return copy.deepcopy(module)


# END SOLUTION


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
        # BEGIN SOLUTION: Task 11.2 (pieces and stages)
        cfg = _check_model_and_mesh(model, mesh)
        self.mesh, self.cfg = mesh, cfg
        self.tp, self.cp, self.pp, self.dp = (mesh.size(a) for a in ("tp", "cp", "pp", "dp"))
        self.ep, self.fsdp = _size(mesh, "ep"), _size(mesh, "fsdp")
        _check_config(cfg, self, num_microbatches, schedule, num_chunks, data_parallel)
        self.num_microbatches, self.schedule, self.data_parallel = num_microbatches, schedule, data_parallel
        self.zigzag = bool(zigzag) and self.cp > 1
        groups = {axis: mesh.group(axis) for axis in mesh.axes}
        ep_group = groups.get("ep")

        # 1. Blocks on this rank's tp/cp/ep groups (no communication).
        blocks = nn.Sequential(OrderedDict(
            (name, ParallelBlock(child, tp_group=groups["tp"], cp_group=groups["cp"], ep_group=ep_group,
                                 zigzag=zigzag))
            for name, child in model.named_children() if isinstance(child, Block)
        ))  # fmt: skip

        # 2. Stages of whole blocks; embedding first, head last.
        total = self.pp * num_chunks
        pieces = pipeline.split_into_stages(blocks, total)
        stage = mesh.rank("pp")
        chunks = []
        for k in range(num_chunks):
            g = stage + k * self.pp
            layers = list(pieces[g].named_children())
            if g == 0:
                layers.insert(0, ("embed", _copy(model.embed)))
            if g == total - 1:
                layers.append(("head", _copy(model.head)))
            chunks.append(nn.Sequential(OrderedDict(layers)))
        self.chunks = chunks
        self._moes = [m for c in chunks for m in c.modules() if isinstance(m, expert_parallel.ExpertParallelMoE)]

        # 3. Data parallelism over dp.
        self._names = [[n for n, _ in c.named_parameters()] for c in chunks]  # before FSDP renames them
        if data_parallel == "fsdp":
            self.wrapped = [fsdp.FSDP(c, group=groups["dp"], units=_units(c)) for c in chunks]
        elif data_parallel == "hsdp":
            self.wrapped = [HSDP(c, mesh, "fsdp", "dp", units=_units(c)) for c in chunks]
        else:
            self.wrapped = chunks
        self._tp_summed = _sequence_parallel_params(chunks)  # after FSDP: its shards are the parameters now
        tp = self.tp
        self.pipeline = pipeline.PipelineStage(
            self.wrapped if num_chunks > 1 else self.wrapped[0], stage, self.pp,
            lambda logits, targets: lm_loss(logits, targets) / tp, group=groups["pp"],
        )  # fmt: skip
        self._forwards: list[int] | None = None  # per chunk, forwards so far in this step (None: no step)
        # FSDP and HSDP sum microbatches' grads locally; each chunk's last backward reduces them once.
        self._deferred = data_parallel in ("fsdp", "hsdp") and num_microbatches > 1
        if self._deferred:
            for i, w in enumerate(self.wrapped):
                w.register_forward_hook(functools.partial(self._sync_on_last_microbatch, i))
        params = [p for c in chunks for p in c.parameters()]
        self._bucketed = self._overlapped_ddp(params, groups["dp"])
        if data_parallel == "zero1":
            self.optimizer = sharded_optimizer.ShardedOptimizer(params, optimizer_cls, group=groups["dp"],
                                                                **optimizer_kwargs)  # fmt: skip
        else:
            self.optimizer = optimizer_cls(params, **optimizer_kwargs)
        # END SOLUTION

    def local_state_dict(self) -> dict[str, torch.Tensor]:
        """``{dense parameter name: this rank's tensor}`` for this rank's chunks (see the class)."""
        # BEGIN SOLUTION: Task 11.2 (pieces and stages)
        out = {}
        for chunk, wrapped, names in zip(self.chunks, self.wrapped, self._names):
            if self.data_parallel in ("fsdp", "hsdp"):
                state = wrapped.gather_full_params()  # keyed as before wrapping: no unit's flat_shard
                named = [(n, state[n]) for n in names]
            else:
                named = [(n, p.detach().clone()) for n, p in chunk.named_parameters()]
            firsts = {n: m.first_expert for n, m in chunk.named_modules()
                      if isinstance(m, expert_parallel.ExpertParallelMoE)}  # fmt: skip
            for name, t in named:
                out[_dense_name(name, firsts)] = t
        return out
        # END SOLUTION

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
        # BEGIN SOLUTION: Task 11.3 (training step)
        x, y = self._local_batch(inputs, targets)
        stage = self.mesh.rank("pp")
        self.optimizer.zero_grad(set_to_none=True)
        deferred = self._deferred
        if deferred:  # gradient sync off; each chunk's forward hook turns it on for its last microbatch
            self._forwards = [0] * len(self.wrapped)
            for w in self.wrapped:
                w.set_requires_gradient_sync(False)
        try:
            loss = self.pipeline.train_step(x if stage == 0 else None, y if stage == self.pp - 1 else None,
                                            self.num_microbatches, self.schedule)  # fmt: skip
        finally:
            if deferred:
                self._forwards = None
                for w in self.wrapped:
                    w.set_requires_gradient_sync(True)
        self._sync_gradients()
        self.optimizer.step()
        return self._global_loss(loss, x.device) if stage == self.pp - 1 else None
        # END SOLUTION

    # BEGIN SOLUTION
    def _local_batch(self, inputs, targets) -> tuple[torch.Tensor, torch.Tensor]:
        for name, t in [("inputs", inputs), ("targets", targets)]:
            if not isinstance(t, torch.Tensor) or t.dim() != 2:
                raise ValueError(f"{name} must be a (batch, seq) tensor of token ids, got {getattr(t, 'shape', t)}")
        if inputs.shape != targets.shape:
            raise ValueError(f"inputs {tuple(inputs.shape)} and targets {tuple(targets.shape)} must have one shape")
        B, S = inputs.shape
        replicas = self.dp * self.fsdp * self.ep
        if B % (replicas * self.num_microbatches):
            raise ValueError(f"inputs batch ({B}) must be divisible by dp·fsdp·ep·num_microbatches "
                             f"({self.dp}·{self.fsdp}·{self.ep}·{self.num_microbatches})")  # fmt: skip
        pieces = self.cp * self.tp
        if S % pieces or (self.zigzag and S % (2 * self.cp)):
            raise ValueError(f"inputs sequence ({S}) must be divisible by cp·tp ({pieces})"
                             + (f" and by 2·cp ({2 * self.cp}) for zigzag" if self.zigzag else ""))  # fmt: skip
        dp_rank = self.mesh.rank("dp") * self.fsdp + (self.mesh.rank("fsdp") if self.fsdp > 1 else 0)
        replica = dp_rank * self.ep + (self.mesh.rank("ep") if self.ep > 1 else 0)
        rows = slice(replica * B // replicas, (replica + 1) * B // replicas)
        out = []
        for t in (inputs, targets):
            t = t[rows]
            if self.cp > 1:
                t = context_parallel.shard_sequence(t, self.mesh.group("cp"), zigzag=self.zigzag, dim=1)
            out.append(t.chunk(self.tp, dim=1)[self.mesh.rank("tp")].contiguous())  # (B/R, S/(cp·tp))
        return out[0], out[1]

    def _sync_on_last_microbatch(self, i: int, wrapped, args, output) -> None:
        """Forward hook on FSDP (or HSDP) chunk i: its k-th forward of a step marks its output so that the backward
        from there runs with gradient sync on iff k is the last microbatch. The mark is a hook on the
        output's grad, which runs before any of the chunk's own backward, so one chunk's backward sees
        one setting throughout; schedules run each microbatch's backward whole (no split B/W here)."""
        if self._forwards is None or not torch.is_grad_enabled():
            return
        last = self._forwards[i] == self.num_microbatches - 1
        self._forwards[i] += 1
        for t in output if isinstance(output, (tuple, list)) else [output]:
            if isinstance(t, torch.Tensor) and t.requires_grad:

                def turn(grad, last=last):
                    wrapped.set_requires_gradient_sync(last)
                    return grad

                t.register_hook(turn)
                return

    def _overlapped_ddp(self, params: list[nn.Parameter], dp_group) -> ddp.DDPBucketed | None:
        """Under "ddp" with one microbatch: Part 2's bucketed DDP over dp for the non-MoE parameters, so
        their dp all-reduces start during backward, each as soon as its bucket's grads are complete (the
        flat all-reduce after backward overlaps nothing). Not with microbatches: its hooks would reduce
        every microbatch's backward, so there the flat all-reduce after backward stays."""
        if self.data_parallel != "ddp" or self.num_microbatches > 1 or self.dp == 1:
            return None
        moe_ids = {id(p) for m in self._moes for p in m.parameters()}
        dense = _Params([p for p in params if id(p) not in moe_ids])
        return ddp.DDPBucketed(dense, DDP_BUCKET_MB, group=dp_group)

    def _sync_gradients(self) -> None:
        sharded = self.data_parallel in ("fsdp", "hsdp")  # they averaged over dp (and fsdp) in backward
        axes = ["ep", "cp"] + (["dp"] if not sharded else [])
        if "dp" in axes and self._bucketed is not None:
            # First: its dp averages were launched in backward from the grads as backward left them, and
            # finishing writes them into .grad (averaging commutes with the tp sum and the ep/cp means).
            self._bucketed.finish_gradient_synchronization()
            axes.remove("dp")
        params = [p for c in self.chunks for p in c.parameters()]
        for p in params:  # an expert no token reached, or a chunk that saw no loss term: zeros, same layout
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if self.tp > 1 and self._tp_summed:
            flat = torch.cat([p.grad.reshape(-1) for p in self._tp_summed])
            dist.all_reduce(flat, group=self.mesh.group("tp"))
            for p, g in zip(self._tp_summed, flat.split([p.numel() for p in self._tp_summed])):
                p.grad.copy_(g.view_as(p))
        moe_ids = {id(p) for m in self._moes for p in m.parameters()}
        dense = _Params([p for p in params if id(p) not in moe_ids])
        for axis in axes:
            if _size(self.mesh, axis) > 1:
                ddp.all_reduce_gradients_flat(dense, group=self.mesh.group(axis))
        for moe in self._moes:
            expert_parallel.all_reduce_moe_gradients(moe, None if sharded or self.dp == 1 else self.mesh.group("dp"))
            if self.cp > 1:
                ddp.all_reduce_gradients_flat(moe, group=self.mesh.group("cp"))

    def _global_loss(self, loss: float, device) -> float:
        t = torch.tensor([loss], dtype=torch.float64, device=device)
        if self.tp > 1:
            dist.all_reduce(t, group=self.mesh.group("tp"))  # each tp rank holds loss/tp of its tokens
        for axis in ("cp", "ep", "fsdp", "dp"):
            if _size(self.mesh, axis) > 1:
                dist.all_reduce(t, group=self.mesh.group(axis))
                t /= self.mesh.size(axis)
        return float(t)

    # END SOLUTION


# BEGIN SOLUTION
class _Params(nn.Module):
    """A module that only lists parameters (for Part 2's functions, which take a module)."""

    def __init__(self, params: list[nn.Parameter]) -> None:
        super().__init__()
        self.params = nn.ParameterList(params)


def _units(chunk: nn.Module) -> list[nn.Module]:
    """FSDP units: each dense block (one all-gather and one reduce-scatter for its weights, not one per
    layer). Embedding and head stay per layer (their grads are also summed over tp). An MoE block stays
    per layer: its experts' grads are averaged over other groups than the rest of the block's."""
    return [m for m in chunk.children() if isinstance(m, ParallelBlock) and not m.is_moe]


def _sequence_parallel_params(chunks: list[nn.Module]) -> list[nn.Parameter]:
    """Parameters replicated over tp that see this rank's tokens only: embedding, norms, head, MoE layers."""
    kinds = (nn.Embedding, RMSNorm, LMHead, MoE, expert_parallel.ExpertParallelMoE)
    found = {id(p): p for c in chunks for m in c.modules() if isinstance(m, kinds) for p in m.parameters()}
    return list(found.values())


def _dense_name(name: str, firsts: dict[str, int]) -> str:
    """Local expert i of an expert-parallel MoE at ``prefix`` is global expert first + i."""
    for prefix, first in firsts.items():
        head = f"{prefix}.experts."
        if name.startswith(head):
            index, rest = name[len(head) :].split(".", 1)
            return f"{head}{first + int(index)}.{rest}"
    return name


def _check_model_and_mesh(model, mesh):
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a transformer.Transformer, got {type(model).__name__}")
    if not isinstance(mesh, ProcessMesh):
        raise TypeError(f"mesh must be a ProcessMesh, got {type(mesh).__name__}")
    if not {"dp", "pp", "cp", "tp"} <= set(mesh.axes) <= {"dp", "pp", "cp", "tp", "ep", "fsdp"}:
        raise ValueError(f"mesh must have axes 'dp', 'pp', 'cp', 'tp' (sizes may be 1) and may have 'ep' and "
                         f"'fsdp', got {mesh.axes}")  # fmt: skip
    return model.cfg


def _check_config(cfg, pt: ParallelTransformer, num_microbatches, schedule, num_chunks, data_parallel) -> None:
    for name, n in [("n_heads", cfg.n_heads), ("n_kv_heads", cfg.n_kv_heads), ("d_ff", cfg.d_ff)]:
        if n % pt.tp:
            raise ValueError(f"mesh: tp ({pt.tp}) must divide the model's {name} ({n})")
    if isinstance(num_chunks, bool) or not isinstance(num_chunks, int) or num_chunks < 1:
        raise ValueError(f"num_chunks must be an int >= 1, got {num_chunks!r}")
    if cfg.n_layers % (pt.pp * num_chunks):
        raise ValueError(f"mesh: pp·num_chunks ({pt.pp}·{num_chunks}) must divide the model's n_layers "
                         f"({cfg.n_layers}): stages hold whole blocks, as many each")  # fmt: skip
    if cfg.moe_every and cfg.num_experts % pt.ep:
        raise ValueError(f"mesh: ep ({pt.ep}) must divide the model's num_experts ({cfg.num_experts})")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if num_chunks > 1 and (schedule != "interleaved" or pt.pp == 1):
        raise ValueError(f"num_chunks ({num_chunks}) > 1 needs schedule 'interleaved' and pp >= 2")
    if data_parallel not in DATA_PARALLEL:
        raise ValueError(f"data_parallel must be one of {DATA_PARALLEL}, got {data_parallel!r}")
    if (data_parallel == "hsdp") != ("fsdp" in pt.mesh.shape):
        raise ValueError(f"data_parallel 'hsdp' and a mesh axis 'fsdp' go together: data_parallel is "
                         f"{data_parallel!r}, the mesh's axes {pt.mesh.axes}")  # fmt: skip
    if isinstance(num_microbatches, bool) or not isinstance(num_microbatches, int) or num_microbatches < 1:
        raise ValueError(f"num_microbatches must be an int >= 1, got {num_microbatches!r}")


# END SOLUTION


def parallelize(model: Transformer, mesh: ProcessMesh, **kwargs) -> ParallelTransformer:
    """``ParallelTransformer(model, mesh, **kwargs)``: this rank's piece of ``model`` on ``mesh`` (given)."""
    return ParallelTransformer(model, mesh, **kwargs)
