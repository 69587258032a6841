"""FSDP, ZeRO stage 3 (Rajbhandari et al. 2020; Zhao et al. 2023): every big weight sharded 1/N per rank.

Your task (handouts/03-zero.md §3.3): implement ``FSDP`` from its docstring with torch.distributed's
built-in collectives (``all_gather_single`` and ``reduce_scatter_single``, the names torch 2.13 gives
``all_gather_into_tensor`` and ``reduce_scatter_tensor``, which it deprecates; ``broadcast``,
``all_reduce``). The tests measure what each rank holds (tensor storage, not attribute names) and record
what each forward and backward sends.

Who talks to whom (group of N ranks): forward all-gathers a layer's weight just before it runs and
frees it after; backward all-gathers it again (a Linear's: an Embedding's grad needs only its indices),
then reduce-scatters its weight grad, so each rank's shard holds its chunk of the mean. Replicated
parameters (biases, norms) have their grads all-reduced and averaged. That is 1.5x DDP's traffic for
1/N of the parameter memory.

Task 3.4 (§3.4) groups the weights of a submodule (a "unit", e.g. a transformer block) into one flat
shard: one all-gather before the unit runs, one before its backward, one reduce-scatter after it, instead
of one of each per layer. And it defers gradient reduction across microbatches
(``set_requires_gradient_sync(False)``): unsharded grads accumulate locally, then one reduce-scatter per
unit on the microbatch that syncs.
"""

from __future__ import annotations

import functools

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

__all__ = ["FSDP"]


# BEGIN SOLUTION
def _group_size_rank(group) -> tuple[int, int, list[int]]:
    """(size, my rank within the group, the group's global ranks in group order)."""
    ranks = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)
    return len(ranks), ranks.index(dist.get_rank()), ranks


# END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 3.3: FSDP (ZeRO stage 3)
# ---------------------------------------------------------------------------------------------


# BEGIN SOLUTION
# The non-deprecated names where this torch has them (2.13 warns about the older ones).
_all_gather_tensor = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
_reduce_scatter_tensor = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)


class _Sync:
    """Whether backward reduces gradients now (the default) or keeps summing them locally (§3.4)."""

    enabled = True


def _defer_or_take(owner, full: torch.Tensor) -> torch.Tensor | None:
    """``full`` (an unsharded grad, padded) plus what ``owner.pending`` summed while sync was off;
    or None, ``full`` added to ``owner.pending``, while sync is off. Costs one full-size fp32 grad per
    shard (or unit) from the first microbatch to the one that syncs."""
    if not owner.sync.enabled:
        owner.pending = full if owner.pending is None else owner.pending.add_(full)
        return None
    if owner.pending is not None:
        full, owner.pending = full.add_(owner.pending), None
    return full


class _Shard:
    """How one weight of ``shape`` is split: padded to ``N * chunk`` elements, rank r keeps chunk r."""

    def __init__(self, shape: torch.Size, group, compute_dtype, sync: _Sync) -> None:
        self.shape, self.numel = shape, shape.numel()
        self.group, self.compute_dtype, self.sync = group, compute_dtype, sync
        self.pending: torch.Tensor | None = None  # (N * chunk,) grads summed while sync is off
        self.world, self.rank, _ = _group_size_rank(group)
        self.chunk = -(-self.numel // self.world)  # ceil: numel < N gives chunks of 1 (some all padding)

    def split(self, full: torch.Tensor) -> torch.Tensor:
        padded = torch.zeros(self.world * self.chunk, dtype=full.dtype, device=full.device)
        padded[: self.numel] = full.reshape(-1)
        return padded[self.rank * self.chunk : (self.rank + 1) * self.chunk].clone()  # (chunk,)

    def gather(self, shard: torch.Tensor, dtype=None) -> torch.Tensor:
        """The full weight (``shape``) in ``dtype`` (default: compute dtype, else the shard's), a fresh
        tensor that nothing else references: it dies with the caller's last reference."""
        dtype = dtype or self.compute_dtype or shard.dtype
        local = shard.detach().to(dtype)  # cast before gathering: bf16 halves the bytes on the wire
        if self.world == 1:
            return local.view(self.shape)
        full = torch.empty(self.world * self.chunk, dtype=dtype, device=shard.device)
        _all_gather_tensor(full, local, group=self.group)
        return full[: self.numel].view(self.shape)

    def reduce_scatter(self, grad: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
        """This rank's chunk of the mean over ranks of ``grad`` (full ``shape``), in ``dtype``; None
        (and ``grad`` kept, summed with the next ones) while gradient sync is off."""
        padded = torch.zeros(self.world * self.chunk, dtype=dtype, device=grad.device)
        padded[: self.numel] = grad.reshape(-1)
        padded = _defer_or_take(self, padded)
        if padded is None:
            return None
        if self.world == 1:
            return padded
        chunk = torch.empty(self.chunk, dtype=dtype, device=grad.device)
        _reduce_scatter_tensor(chunk, padded, group=self.group)
        return chunk.div_(self.world)


class _ShardedLinearFunction(torch.autograd.Function):
    """y = x W^T + b with W gathered from shards in forward, freed, and gathered again in backward.

    Only x and the shard are saved for backward, never the gathered W (saving it would keep every
    layer's full weight alive from forward to backward, undoing ZeRO-3).
    """

    @staticmethod
    def forward(ctx, x, shard, bias, info: _Shard):
        dtype = info.compute_dtype or x.dtype
        weight = info.gather(shard)  # (out, in)
        y = F.linear(x.to(dtype), weight, None if bias is None else bias.to(dtype))  # (..., out)
        del weight  # the only reference: the gathered storage is released here
        ctx.save_for_backward(x, shard, bias)
        ctx.info = info
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, grad_y):
        x, shard, bias = ctx.saved_tensors
        info: _Shard = ctx.info
        dtype = info.compute_dtype or x.dtype
        weight = info.gather(shard)  # (out, in): gathered again, just for this layer's backward
        grad_y = grad_y.to(dtype)
        grad_x = (grad_y @ weight).to(x.dtype) if ctx.needs_input_grad[0] else None  # (..., in)
        del weight
        grad_shard = grad_bias = None
        if ctx.needs_input_grad[1]:
            grad_w = grad_y.reshape(-1, info.shape[0]).T @ x.to(dtype).reshape(-1, info.shape[1])  # (out, in)
            grad_shard = info.reduce_scatter(grad_w, shard.dtype)  # (chunk,): averaged over ranks
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = grad_y.reshape(-1, info.shape[0]).sum(0).to(bias.dtype)  # averaged by its hook
        return grad_x, grad_shard, grad_bias, None


class _ShardedEmbeddingFunction(torch.autograd.Function):
    """A table lookup with the table gathered in forward; backward needs only the indices, so it
    reduce-scatters the scattered-row gradient without gathering the table again."""

    @staticmethod
    def forward(ctx, indices, shard, info: _Shard, padding_idx):
        weight = info.gather(shard)  # (num_embeddings, dim)
        y = F.embedding(indices, weight, padding_idx).to(shard.dtype)  # (..., dim)
        del weight
        ctx.save_for_backward(indices)
        ctx.info, ctx.padding_idx, ctx.dtype = info, padding_idx, shard.dtype
        return y

    @staticmethod
    def backward(ctx, grad_y):
        (indices,) = ctx.saved_tensors
        info: _Shard = ctx.info
        grad_w = torch.zeros(info.shape, dtype=ctx.dtype, device=grad_y.device)
        grad_w.index_add_(0, indices.reshape(-1), grad_y.reshape(-1, info.shape[1]).to(ctx.dtype))
        if ctx.padding_idx is not None:
            grad_w[ctx.padding_idx] = 0
        return None, info.reduce_scatter(grad_w, ctx.dtype), None, None


def _linear_forward(layer: nn.Linear, info: _Shard, x: torch.Tensor) -> torch.Tensor:
    return _ShardedLinearFunction.apply(x, layer.weight, layer.bias, info)


def _embedding_forward(layer: nn.Embedding, info: _Shard, indices: torch.Tensor) -> torch.Tensor:
    return _ShardedEmbeddingFunction.apply(indices, layer.weight, info, layer.padding_idx)


# END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 3.4: FSDP units (one flat shard per block) and deferred gradient sync
# ---------------------------------------------------------------------------------------------


# BEGIN SOLUTION
class _Unit:
    """The weights of one unit's layers, concatenated in order into one flat buffer of ``total``
    elements, padded to ``N * chunk``; rank r keeps chunk r as the parameter ``flat_shard``.

    The gathered buffer lives in one storage per unit, resized to 0 bytes when not in use: a fresh
    tensor over it per gather, so refilling it for backward leaves alone the version counter of the
    views autograd saved in forward (they read the refilled bytes, with no recompute).
    """

    def __init__(self, module: nn.Module, layers: list[nn.Module], group, compute_dtype, sync: _Sync) -> None:
        self.module, self.layers, self.sync = module, layers, sync
        weights = list(dict.fromkeys(layer.weight for layer in layers))  # tied within a unit: once; not kept
        self.shapes = [w.shape for w in weights]
        self.offsets = [0]
        for w in weights:
            self.offsets.append(self.offsets[-1] + w.numel())
        self.total = self.offsets[-1]
        self.group, self.compute_dtype = group, compute_dtype
        self.world, self.rank, _ = _group_size_rank(group)
        self.chunk = -(-self.total // self.world)
        self.pending: torch.Tensor | None = None  # (N * chunk,) grads summed while sync is off
        with torch.no_grad():
            flat = torch.zeros(self.world * self.chunk, dtype=weights[0].dtype, device=weights[0].device)
            torch.cat([w.detach().reshape(-1) for w in weights], out=flat[: self.total])
            shard = flat[self.rank * self.chunk : (self.rank + 1) * self.chunk].clone()  # (chunk,)
        self.flat_shard = nn.Parameter(shard)
        self.dtype = compute_dtype or shard.dtype
        self.storage = torch.empty(0, dtype=self.dtype, device=shard.device).untyped_storage()
        slot = {id(w): i for i, w in enumerate(weights)}
        self.index = [slot[id(layer.weight)] for layer in layers]  # layer -> which weight it uses

    def full(self) -> torch.Tensor:
        """(N * chunk,) in compute dtype: a fresh tensor over the unit's storage, all-gathered into."""
        nbytes = self.world * self.chunk * self.dtype.itemsize
        if self.storage.nbytes() != nbytes:
            self.storage.resize_(nbytes)
        full = torch.empty(0, dtype=self.dtype, device=self.flat_shard.device)
        full.set_(self.storage, 0, (self.world * self.chunk,))
        local = self.flat_shard.detach().to(self.dtype)  # cast before gathering: bf16 halves the bytes
        if self.world == 1:
            full.copy_(local)
        else:
            _all_gather_tensor(full, local, group=self.group)
        return full

    def free(self) -> None:
        self.storage.resize_(0)

    def reduce_scatter(self, grads: tuple) -> torch.Tensor | None:
        """This rank's chunk of the mean over ranks of the unit's grads (one per weight, or None), fp32."""
        shard = self.flat_shard
        flat = torch.empty(self.world * self.chunk, dtype=shard.dtype, device=shard.device)
        for i, g in enumerate(grads):
            segment = flat[self.offsets[i] : self.offsets[i + 1]]
            segment.copy_(g.reshape(-1)) if g is not None else segment.zero_()
        flat[self.total :].zero_()  # the padding: every rank sums zeros there
        flat = _defer_or_take(self, flat)
        if flat is None:
            return None
        if self.world == 1:
            return flat
        mine = torch.empty(self.chunk, dtype=shard.dtype, device=shard.device)
        _reduce_scatter_tensor(mine, flat, group=self.group)  # one message for the whole unit
        return mine.div_(self.world)


class _GatherUnit(torch.autograd.Function):
    """flat shard -> every weight of the unit (views of one gathered buffer, compute dtype).

    Backward runs once all the unit's layers have produced their weight grads: it packs them into one
    flat buffer (no full-size zeros per weight, as slicing one gathered tensor would cost) and
    reduce-scatters it.
    """

    @staticmethod
    def forward(ctx, shard, unit: _Unit):
        ctx.unit = unit
        ctx.set_materialize_grads(False)
        full = unit.full()
        return tuple(full[a:b].view(s) for a, b, s in zip(unit.offsets, unit.offsets[1:], unit.shapes))

    @staticmethod
    def backward(ctx, *grads):
        unit: _Unit = ctx.unit
        unit.free()  # the unit's backward is done: nothing reads the gathered buffer any more
        return unit.reduce_scatter(grads), None


def _unit_pre_forward(unit: _Unit, module, args) -> None:
    weights = _GatherUnit.apply(unit.flat_shard, unit)
    for layer, i in zip(unit.layers, unit.index):
        layer.weight = weights[i]  # a plain attribute now: the unit's parameter is its flat shard


def _unit_post_forward(unit: _Unit, module, args, output) -> None:
    unit.free()  # autograd keeps views of it: the refill before backward brings the bytes back

    def refill(grad):
        if unit.storage.nbytes() == 0:
            unit.full()
        return grad

    for t in output if isinstance(output, (tuple, list)) else [output]:
        if isinstance(t, torch.Tensor) and t.requires_grad:
            t.register_hook(refill)  # runs before any of the unit's own backward


def _unit_linear_forward(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    w = layer.weight  # a view of the unit's gathered buffer, in compute dtype
    bias = None if layer.bias is None else layer.bias.to(w.dtype)
    return F.linear(x.to(w.dtype), w, bias).to(x.dtype)


def _unit_embedding_forward(layer: nn.Embedding, indices: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return F.embedding(indices, layer.weight, layer.padding_idx).to(dtype)


# END SOLUTION


# BEGIN SOLUTION
def _check_units(module: nn.Module, units) -> dict[int, int]:
    """id(layer) -> index of the unit that shards it (its trainable Linear/Embedding weights), after
    checking ``units`` (the errors the FSDP docstring promises), before any communication."""
    if units is None:
        return {}
    if not isinstance(units, (list, tuple)) or not all(isinstance(u, nn.Module) for u in units):
        raise TypeError(f"units must be a list or tuple of nn.Module (submodules of module), got {units!r:.80}")
    inside = {id(m) for m in module.modules()}
    trees = [{id(m) for m in u.modules()} for u in units]
    for i, u in enumerate(units):
        if id(u) not in inside:
            raise ValueError(f"units[{i}] ({type(u).__name__}) is not a submodule of module")
        for j, other in enumerate(units):
            if i != j and id(other) in trees[i]:
                raise ValueError(f"units overlap: units[{j}] is units[{i}] or inside it; units must be disjoint")
    owner = {}  # id(layer) -> unit index, for the layers whose weight a unit shards
    for i, u in enumerate(units):
        for m in u.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)) and m.weight.requires_grad:
                owner[id(m)] = i
    where: dict[int, int | None] = {}  # id(trainable weight) -> the unit of its layers (None: no unit)
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)) and m.weight.requires_grad:
            here = owner.get(id(m))
            if where.setdefault(id(m.weight), here) != here:
                raise ValueError(
                    f"units: a {type(m).__name__} weight is tied across a unit's boundary (used in units "
                    f"{where[id(m.weight)]} and {here}, None meaning outside every unit): tie weights within a unit"
                )
    return owner


# END SOLUTION


class FSDP(nn.Module):
    """Fully sharded data parallelism (ZeRO-3) over the ranks of ``group``; ``.module`` is the model.

    On construction, the parameters and buffers of the group's first rank are broadcast (``src`` is a global
    rank: ``dist.get_global_rank(group, 0)``, rank 0 without a group), then every ``nn.Linear`` /
    ``nn.Embedding`` weight of shape S is replaced by a 1-D shard of ``ceil(numel / N)`` elements
    (the flattened weight, zero-padded to a multiple of N, chunk ``rank``). Its name is unchanged
    (``module.fc1.weight`` is now the shard), so ``FSDP.parameters()`` yields the shards plus the
    small replicated parameters (biases, norms), and an optimizer built on it steps shards only.

    Forward: each such layer all-gathers its full weight just before it runs and frees it right
    after. Backward: a Linear all-gathers its weight again, computes its grads, frees it, and
    reduce-scatters the weight grad so each rank's shard ``.grad`` holds its chunk of the mean over
    ranks; an Embedding does not gather its table again (its weight grad needs only the indices: the
    output grad's rows added at them), it only reduce-scatters that grad. Replicated parameters' grads
    are all-reduced and averaged as they are produced. With ``compute_dtype`` (e.g. ``torch.bfloat16``)
    each shard is cast to it *before* it is all-gathered (the gather moves ``compute_dtype``: half of
    fp32's bytes in bf16), a Linear's input and bias are cast to it for the matmul and its output is
    cast back to the input's dtype; an Embedding's int64 indices are not cast: it picks rows of the
    ``compute_dtype`` table and returns them in the weight's storage dtype (fp32). Shards, grads (reduced
    in fp32) and optimizer state stay fp32. Tied weights are sharded once.

    ``units`` (Task 3.4): disjoint submodules of ``module`` (e.g. its transformer blocks; ``[module]``
    makes the whole model one unit). The trainable ``nn.Linear`` / ``nn.Embedding`` weights inside
    unit u, in ``u.modules()`` order (a weight tied within u once), are concatenated into one flat
    buffer of T elements, zero-padded at its end to ``N * ceil(T / N)``; rank r keeps chunk r as the
    parameter ``u.flat_shard`` (1-D, ``ceil(T / N)`` elements), and those layers' ``weight`` stops
    being a parameter. The padding holds zeros always: in the flat shards, in their ``.grad`` (pack zeros
    there before reducing) and after every optimizer step. The unit all-gathers its flat buffer once
    just before its forward (cast to ``compute_dtype`` first, as above) and frees it when the forward
    returns, all-gathers it once again before its backward (whatever its layers, Embeddings included)
    and frees it when its backward is done, then reduce-scatters its flat weight grad once (fp32): one
    message each way per unit instead of one per layer. From the end of its forward to the refill just
    before its backward, and after its backward, a unit holds no gathered bytes: what FSDP holds stays
    within its shards, replicated parameters and, after backward, their grads (2 x the shards). A unit
    holding no trainable ``nn.Linear`` / ``nn.Embedding`` weight (only norms, or frozen layers) is
    skipped: it gets no ``flat_shard`` and sends nothing of its own. Layers outside every unit (and
    frozen weights) are sharded one by one as above. A unit returns a tensor or a tuple or list of tensors (its backward
    starts from their gradients). On a sub-group, every average (units, single weights, replicated
    parameters) is over the group's ranks.

    Raises ``TypeError`` for a ``module`` that is not an ``nn.Module``, a ``compute_dtype`` that is
    not a floating-point ``torch.dtype``, or ``units`` not a list or tuple of ``nn.Module``;
    ``ValueError`` for a unit that is not a submodule of ``module``, units that overlap (one inside
    another, or the same twice), or a trainable weight tied across a unit's boundary; on every rank,
    before any communication.
    """

    def __init__(self, module: nn.Module, *, compute_dtype: torch.dtype | None = None, group=None, units=None) -> None:
        # BEGIN SOLUTION: Task 3.3 (FSDP)
        if not isinstance(module, nn.Module):
            raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
        if compute_dtype is not None and not (
            isinstance(compute_dtype, torch.dtype) and compute_dtype.is_floating_point
        ):
            raise TypeError(f"compute_dtype must be a floating-point torch.dtype or None, got {compute_dtype!r}")
        unit_layers = _check_units(module, units)  # Task 3.4: id(layer) -> its unit's index
        super().__init__()
        self.module = module
        self._group = group
        self._sync = _Sync()
        world, _, ranks = _group_size_rank(group)
        with torch.no_grad():
            for t in [*module.parameters(), *module.buffers()]:
                if world > 1:
                    dist.broadcast(t, src=ranks[0], group=group)
        self._keys = list(module.state_dict(keep_vars=True))  # gather_full_params returns these
        self._shards: dict[int, _Shard] = {}  # id(shard parameter) -> how it was split
        done: dict[int, nn.Parameter] = {}  # id(original weight) -> its shard (tied weights: once)
        for layer in module.modules():
            if not isinstance(layer, (nn.Linear, nn.Embedding)) or id(layer) in unit_layers:
                continue
            weight = layer.weight
            if id(weight) not in done:
                info = _Shard(weight.shape, group, compute_dtype, self._sync)
                done[id(weight)] = nn.Parameter(info.split(weight.detach()), requires_grad=weight.requires_grad)
                self._shards[id(done[id(weight)])] = info
            layer.weight = done[id(weight)]
            forward = _linear_forward if isinstance(layer, nn.Linear) else _embedding_forward
            layer.forward = functools.partial(forward, layer, self._shards[id(layer.weight)])
        self._units = self._shard_units(units or [], unit_layers, compute_dtype)
        flat = {id(u.flat_shard) for u in self._units}
        if world > 1:
            for p in module.parameters():
                if p.requires_grad and id(p) not in self._shards and id(p) not in flat:
                    p.register_post_accumulate_grad_hook(self._average_replicated_grad)
        # END SOLUTION

    # BEGIN SOLUTION
    def _average_replicated_grad(self, p: nn.Parameter) -> None:
        if not self._sync.enabled:  # p.grad keeps summing; the microbatch that syncs reduces the sum
            return
        dist.all_reduce(p.grad, group=self._group)
        p.grad.div_(dist.get_world_size(self._group))

    def _shard_units(self, units, unit_layers: dict[int, int], compute_dtype) -> list[_Unit]:
        """Task 3.4: one ``_Unit`` per unit holding trainable weights; its layers' weights leave the
        parameters, its flat shard joins them, and its hooks gather before and free after forward."""
        names = {id(m): name for name, m in self.module.named_modules(remove_duplicate=False)}
        made, self._unit_keys = [], {}  # state-dict key of a unit weight -> (unit, its slot)
        for i, unit_module in enumerate(units):
            layers = list({id(m): m for m in unit_module.modules() if unit_layers.get(id(m)) == i}.values())
            if not layers:
                continue
            unit = _Unit(unit_module, layers, self._group, compute_dtype, self._sync)
            for layer, slot in zip(layers, unit.index):
                self._unit_keys[f"{names[id(layer)]}.weight".lstrip(".")] = (unit, slot)
                del layer.weight  # no longer a parameter: the unit's pre-forward hook sets a gathered view
                if isinstance(layer, nn.Linear):
                    layer.forward = functools.partial(_unit_linear_forward, layer)
                else:
                    layer.forward = functools.partial(_unit_embedding_forward, layer, dtype=unit.flat_shard.dtype)
            unit_module.register_parameter("flat_shard", unit.flat_shard)
            unit_module.register_forward_pre_hook(functools.partial(_unit_pre_forward, unit))
            unit_module.register_forward_hook(functools.partial(_unit_post_forward, unit))
            made.append(unit)
        return made

    # END SOLUTION

    def forward(self, *args, **kwargs):
        """``self.module(*args, **kwargs)``; each sharded layer gathers its weight as it runs."""
        # BEGIN SOLUTION: Task 3.3 (FSDP)
        return self.module(*args, **kwargs)
        # END SOLUTION

    def set_requires_gradient_sync(self, requires_gradient_sync: bool) -> None:
        """Task 3.4: with ``False``, the following backwards reduce no gradient: every rank sums its
        unsharded weight grads (one fp32 buffer per unit, or per weight outside units: the full
        model's grads, kept until the sync) and its replicated grads locally, and the shards' ``.grad``
        stays as it was. With ``True`` (the default), the next backward reduces, in the same messages
        as ever (one reduce-scatter per unit or weight, one all-reduce per replicated parameter), its
        own grads plus everything summed since: the last microbatch of a step turns sync back on.

        Raises ``TypeError`` if ``requires_gradient_sync`` is not a bool, before any communication."""
        # BEGIN SOLUTION: Task 3.4 (FSDP units and deferred sync)
        if not isinstance(requires_gradient_sync, bool):
            raise TypeError(f"requires_gradient_sync must be a bool, got {type(requires_gradient_sync).__name__}")
        self._sync.enabled = requires_gradient_sync
        # END SOLUTION

    @torch.no_grad()
    def gather_full_params(self) -> dict[str, torch.Tensor]:
        """The wrapped module's full state dict (same keys as ``module.state_dict()``, no ``module.``
        prefix), sharded weights all-gathered in fp32 (their storage dtype), on every rank. Every
        rank must call it (it communicates). With ``units``, the keys are those of the module before
        wrapping (``block.fc1.weight``, not ``block.flat_shard``)."""
        # BEGIN SOLUTION: Task 3.3 (FSDP)
        out, gathered = {}, {}
        current = self.module.state_dict(keep_vars=True)
        for unit in self._units:
            full = _Shard(torch.Size([unit.world * unit.chunk]), self._group, None, self._sync)
            flat = full.gather(unit.flat_shard, dtype=unit.flat_shard.dtype)  # (N * chunk,) fp32
            for key, (u, i) in self._unit_keys.items():
                if u is unit:
                    out[key] = flat[unit.offsets[i] : unit.offsets[i + 1]].view(unit.shapes[i]).clone()
        for key in self._keys:
            if key in out:
                continue
            t = current[key]
            info = self._shards.get(id(t))
            if info is None:
                out[key] = t.detach().clone()
                continue
            if id(t) not in gathered:  # a tied weight appears under two keys: gather it once
                gathered[id(t)] = info.gather(t, dtype=t.dtype).clone()
            out[key] = gathered[id(t)]
        return {key: out[key] for key in self._keys}
        # END SOLUTION
