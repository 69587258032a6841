"""Part 3: FSDP (ZeRO stage 3), ``fsdp.FSDP`` (handouts/03-zero.md §3.3).

    pytest tests/test_fsdp.py                  # your implementation
    pytest tests/test_fsdp.py -m task3_3
    pytest tests/test_fsdp.py -m task3_4      # units and deferred gradient sync (§3.4)

Ranks train with FSDP and send back losses, gathered parameters, the bytes the wrapper holds and
the communication of each step; the parent trains a plain model on the averaged grads (the oracle)
and judges every step on every rank. Memory is measured, not assumed: storage reachable from the
wrapper, weak references to every gathered weight, and the collectives around each layer.
"""

from __future__ import annotations

import pytest
import torch

from cs336_systems.models import DeepMLP
from cs336_systems.utils import random_batch
from tests.harness import assert_close, assert_ranks_close, run_ranks
from tests.harness.bad_input import BadInput, assert_rejected_before_communicating, bad_input_params, bad_input_rank
from tests.harness.memory import storage_bytes
from tests.harness.recorder import CommRecorder, calls, format_events
from tests.oracles.fsdp import (
    D_FF,
    D_MODEL,
    FSDP_LR,
    FSDP_OPTIMIZERS,
    FSDP_STEPS,
    UNITS,
    check_fsdp_groups,
    check_units_training,
    fsdp_batch,
    fsdp_group_train_rank,
    fsdp_oracle,
    make_fsdp_model,
    units_train_rank,
)

# bfloat16 keeps 8 bits of mantissa: losses and parameters are compared to the fp32 oracle with the
# table's bfloat16 tolerance (rtol 1.6e-2, atol 1e-2); with lr 1e-3, 3 AdamW steps move a weight by at
# most ~3e-3, so the parameter check mostly guards against bf16 leaking into the fp32 shards.
COMPUTE_DTYPES = {"fp32": None, "bf16": torch.bfloat16}


class _MatmulDtypes:
    """Records the dtypes of every matrix multiply dispatched (forward and backward) while active."""

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        recorder = self
        self.dtypes = set()

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm):
                    recorder.dtypes.add(str(args[-1].dtype).replace("torch.", ""))
                return func(*args, **(kwargs or {}))

        self.mode = Mode()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)


def fsdp_train_rank(ctx, name: str, dtype_name: str, opt_name: str):
    """FSDP_STEPS AdamW steps on the shards; per step the loss and the gathered full state dict."""
    fsdp_mod = ctx.load("fsdp")
    model = make_fsdp_model(name).to(ctx.device)
    fsdp = fsdp_mod.FSDP(model, compute_dtype=COMPUTE_DTYPES[dtype_name])
    cls, kwargs = FSDP_OPTIMIZERS[opt_name]
    opt = cls(fsdp.parameters(), **kwargs)
    history, matmuls = [], _MatmulDtypes()
    for step in range(FSDP_STEPS):
        x, y = (t.to(ctx.device) for t in fsdp_batch(name, step, ctx.rank))
        with matmuls:
            loss = torch.nn.functional.mse_loss(fsdp(x), y)
            loss.backward()
        opt.step()
        opt.zero_grad()
        history.append({"loss": loss.detach(), "state": fsdp.gather_full_params()})
    shard_dtypes = sorted({str(p.dtype).replace("torch.", "") for p in fsdp.parameters()})
    return history, sorted(matmuls.dtypes), shard_dtypes


@pytest.mark.task3_3
@pytest.mark.parametrize(
    "name, dtype_name, opt_name",
    [
        ("deep_mlp", "fp32", "adamw"),
        ("deep_mlp", "fp32", "sgd"),
        ("tied", "fp32", "adamw"),
        ("embedding", "fp32", "adamw"),
        ("deep_mlp", "bf16", "adamw"),
    ],  # fmt: skip
)
def test_fsdp_training_matches_a_plain_model_on_averaged_grads(world_size, name, dtype_name, opt_name):
    """FSDP training matches a plain model on averaged grads: losses and full parameters, every step, every rank.

    Every step, every rank's loss equals the plain model's on that rank's batch, and the gathered
    full state dict (the wrapped module's keys, fp32) equals the plain model's after the same optimizer
    on the mean grads. With compute_dtype=bfloat16 every matmul runs in bfloat16 while the shards stay
    fp32."""
    outs = run_ranks(world_size, fsdp_train_rank, name, dtype_name, opt_name)
    tol = {} if dtype_name == "fp32" else dict(zip(("rtol", "atol"), (1.6e-2, 1e-2)))
    for step, expected in enumerate(fsdp_oracle(name, world_size, opt_name)):
        got = [o[0][step]["loss"] for o in outs]
        assert_ranks_close(got, expected["losses"], what=f"{name} {dtype_name}, step {step}, loss", **tol)
        for rank, o in enumerate(outs):
            state = o[0][step]["state"]
            assert list(state) == list(expected["state"]), (
                f"rank {rank}: gather_full_params() keys {list(state)} != the module's state_dict keys "
                f"{list(expected['state'])}"
            )
        for key, value in expected["state"].items():
            got = [o[0][step]["state"][key] for o in outs]
            assert_ranks_close(got, value, what=f"{name} {dtype_name}, after step {step}, {key}", **tol)
    for rank, (_, matmuls, shard_dtypes) in enumerate(outs):
        assert shard_dtypes == ["float32"], f"rank {rank}: FSDP.parameters() dtypes {shard_dtypes}, expected fp32"
        want = ["float32"] if dtype_name == "fp32" else ["bfloat16"]
        assert matmuls == want, f"rank {rank}: matmuls ran in {matmuls}, expected {want} ({dtype_name})"


WIDE = (2, 128, 256)  # DeepMLP(layers, d_model, d_ff) whose weights (64-128 KiB) dwarf its activations


class _GatheredStorages:
    """While active: weak references to the storage of every all-gather or broadcast output, and the
    largest tensor autograd saves for backward that is not a parameter. ``alive()`` is what survived:
    a gathered weight still referenced anywhere (an attribute, a closure, autograd) keeps its storage."""

    def __init__(self, params) -> None:
        self.params = {p.untyped_storage().data_ptr() for p in params}
        self.refs, self.largest_saved = [], 0

    def __enter__(self):
        from torch.multiprocessing.reductions import StorageWeakRef
        from torch.utils._python_dispatch import TorchDispatchMode

        recorder = self

        def flat(x):
            return [x] if isinstance(x, torch.Tensor) else [t for y in x for t in flat(y)]

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if func.namespace == "c10d" and ("gather" in func.__name__ or "broadcast" in func.__name__):
                    recorder.refs += [(StorageWeakRef(t.untyped_storage()), t.numel()) for t in flat(args[0])]
                return out

        def pack(t):
            if t.untyped_storage().data_ptr() not in recorder.params:
                recorder.largest_saved = max(recorder.largest_saved, t.numel())
            return t

        self.mode, self.hooks = Mode(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        self.mode.__enter__()
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self.hooks.__exit__(*exc)
        self.mode.__exit__(*exc)

    def alive(self) -> list[int]:
        import gc

        gc.collect()
        return [numel for ref, numel in self.refs if not ref.expired()]


def fsdp_memory_rank(ctx):
    """Bytes reachable from the FSDP object after forward, after backward and between steps; which
    gathered buffers outlived forward and backward; the largest non-parameter tensor saved for backward."""
    fsdp_mod = ctx.load("fsdp")
    torch.manual_seed(0)
    fsdp = fsdp_mod.FSDP(DeepMLP(*WIDE).to(ctx.device))
    opt = torch.optim.AdamW(fsdp.parameters(), lr=FSDP_LR)
    x, y = (t.to(ctx.device) for t in random_batch(2, WIDE[1], WIDE[1], seed=ctx.rank))
    out = {}
    for _ in range(2):
        opt.zero_grad()
        with _GatheredStorages(fsdp.parameters()) as forward:
            loss = torch.nn.functional.mse_loss(fsdp(x), y)
        out["after forward"] = storage_bytes(fsdp, set())
        with _GatheredStorages(fsdp.parameters()) as backward:
            loss.backward()
        out["after backward"] = storage_bytes(fsdp, set())
        opt.step()
        out["between steps"] = storage_bytes(fsdp, set())
        out["alive"] = {"forward": forward.alive(), "backward": backward.alive()}
        out["gathered"] = (len(forward.refs), len(backward.refs))
        out["largest saved"] = forward.largest_saved
    return out


@pytest.mark.task3_3
@pytest.mark.world_sizes(4)
def test_fsdp_on_sub_groups_averages_over_its_own_group(world_size):
    """On a sub-group, FSDP averages every grad (sharded and replicated: biases, LayerNorms) over its group.

    World 4 as two groups of two ranks: each trains like a plain model on the mean of its own ranks' grads
    (SGD, whose step shows an average taken over the world instead of the group)."""
    groups = [[0, 1], [2, 3]]
    check_fsdp_groups(
        run_ranks(world_size, fsdp_group_train_rank, groups, "deep_mlp", "sgd"), groups, "deep_mlp", "sgd"
    )


@pytest.mark.task3_3
def test_fsdp_holds_one_nth_of_each_weight_and_frees_gathered_weights(world_size):
    """FSDP holds 1/N of each weight and frees every gathered weight once its layer has run.

    Measured on storage, not attributes: between steps, after forward and after backward, the
    tensors reachable from FSDP (shards, replicated params, their grads, anything cached) fit in
    ceil(numel/N) per sharded weight; no gathered buffer outlives forward or backward, and autograd
    saves no full weight for backward."""
    model = DeepMLP(*WIDE)
    weights = [m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)]
    replicated = sum(p.numel() for p in model.parameters()) - sum(weights)
    shard_bytes = 4 * (sum(-(-n // world_size) for n in weights) + replicated)
    for rank, out in enumerate(run_ranks(world_size, fsdp_memory_rank, deadline=60)):
        for when, copies in (("after forward", 1), ("after backward", 2), ("between steps", 2)):
            limit = copies * shard_bytes + 1024  # parameters, and their grads once backward made them
            assert out[when] <= limit, (
                f"rank {rank}, {when}: FSDP holds {out[when]} bytes of tensors; shards, replicated "
                f"parameters and their grads need at most {limit} at world size {world_size}. Something "
                "keeps full weights"
            )
        for phase, alive in out["alive"].items():
            assert not alive, (
                f"rank {rank}: after {phase}, gathered buffers of {alive} elements are still alive: each "
                "layer's gathered weight must be freed once the layer has run (FSDP gathers it again for "
                "backward)"
            )
        assert out["largest saved"] < min(weights), (
            f"rank {rank}: forward saved a {out['largest saved']}-element tensor for backward (smallest full "
            f"weight: {min(weights)}): saving the gathered weight keeps it alive until backward"
        )


def fsdp_comm_rank(ctx):
    """One forward and backward under the recorder; at each Linear's start, how many all-gathers ran."""
    fsdp_mod = ctx.load("fsdp")
    fsdp = fsdp_mod.FSDP(make_fsdp_model("deep_mlp").to(ctx.device))
    layers = [m for m in fsdp.module.modules() if isinstance(m, torch.nn.Linear)]
    x, y = (t.to(ctx.device) for t in fsdp_batch("deep_mlp", 0, ctx.rank))
    gathers_at_start = []
    with CommRecorder() as rec:
        for layer in layers:
            layer.register_forward_pre_hook(
                lambda *_: gathers_at_start.append(sum("gather" in e.op for e in calls(rec.events)))
            )
        torch.nn.functional.mse_loss(fsdp(x), y).backward()
    return rec.events, gathers_at_start


@pytest.mark.task3_3
@pytest.mark.world_sizes(2, 4)
def test_fsdp_gathers_each_layer_just_before_it_runs_and_reduce_scatters_its_grad(world_size):
    """FSDP all-gathers each layer's weight just before it runs and reduce-scatters its grad in backward.

    Forward: layer i starts after i or i+1 all-gathers (its own weight, at most one prefetched),
    each moving one shard (ceil(numel/N) elements). Backward: every layer is gathered again, in
    reverse order, and its weight grad is reduce-scattered (N * ceil(numel/N) elements in)."""
    model = make_fsdp_model("deep_mlp")
    chunks = [-(-m.weight.numel() // world_size) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    for rank, (events, starts) in enumerate(run_ranks(world_size, fsdp_comm_rank)):
        log = f"\nrank {rank}'s calls:\n{format_events(events, limit=60)}"
        assert len(starts) == len(chunks), f"rank {rank}: {len(starts)} of {len(chunks)} Linear layers ran{log}"
        for i, count in enumerate(starts):
            assert i <= count <= i + 1, (
                f"rank {rank}: Linear layer {i} started after {count} all-gathers; FSDP gathers each "
                f"layer's weight just before it runs (expected {i}, or {i + 1} with one prefetch), not all "
                f"at once{log}"
            )
        ops = calls(events)
        forward = [e.numel for e in ops if "gather" in e.op and not e.in_backward]
        backward = [e.numel for e in ops if "gather" in e.op and e.in_backward]
        scattered = [e.numel for e in ops if "reduce_scatter" in e.op and e.in_backward]
        assert forward == chunks, f"rank {rank}: forward all-gathered {forward} elements, expected {chunks}{log}"
        assert backward == chunks[::-1], (
            f"rank {rank}: backward all-gathered {backward} elements, expected every layer again in reverse "
            f"order {chunks[::-1]} (the gathered weights were freed after forward){log}"
        )
        assert scattered == [world_size * c for c in chunks[::-1]], (
            f"rank {rank}: backward reduce-scattered {scattered} elements, expected one reduce-scatter per "
            f"layer's weight grad {[world_size * c for c in chunks[::-1]]}{log}"
        )


# -- Task 3.4: units and deferred gradient sync ------------------------------------------------------


@pytest.mark.task3_4
@pytest.mark.parametrize(
    "name, num_microbatches",
    [("deep_mlp", 1), ("deep_mlp", 3), ("tied", 2), ("embedding", 2)],
)
def test_fsdp_units_with_deferred_sync_match_one_process_on_every_microbatch(world_size, name, num_microbatches):
    """FSDP with units, gradient sync off for all but the last microbatch, trains like one process on every batch.

    Each rank runs M microbatches per step (loss / M each), sync on only for the last, then SGD (whose step
    shows a grad summed instead of averaged, or left out): losses and gathered full parameters, keyed as the
    module was before wrapping, equal a plain model's on the mean grad over every rank's microbatches. The
    tied model's flat buffer (1350 elements) is padded at world sizes 4, 7 and 8."""
    outs = run_ranks(world_size, units_train_rank, name, num_microbatches)
    check_units_training(outs, name, num_microbatches)


def units_comm_rank(ctx, num_microbatches: int):
    """DeepMLP's blocks as units, sync on the last microbatch only; each microbatch's calls, recorded apart."""
    fsdp_mod = ctx.load("fsdp")
    model = make_fsdp_model("deep_mlp").to(ctx.device)
    fsdp = fsdp_mod.FSDP(model, units=UNITS["deep_mlp"](model))
    per_microbatch = []
    for m in range(num_microbatches):
        fsdp.set_requires_gradient_sync(m == num_microbatches - 1)
        x, y = (t.to(ctx.device) for t in fsdp_batch("deep_mlp", 0, m))
        with CommRecorder() as rec:
            torch.nn.functional.mse_loss(fsdp(x), y).backward()
        per_microbatch.append(rec.events)
    return per_microbatch


@pytest.mark.task3_4
@pytest.mark.world_sizes(2, 3, 4, 5, 6, 7, 8, reason="at world size 1 FSDP sends nothing")
def test_fsdp_units_gather_once_per_unit_and_reduce_scatter_once_per_step(world_size):
    """Each unit all-gathers once before its forward and once before its backward, every microbatch, and
    reduce-scatters its whole flat grad once per step, on the microbatch that syncs.

    DeepMLP(2 blocks) with units = the two blocks (the head outside: one layer as in §3.3), 3 microbatches. A
    block's flat buffer is its two Linear weights, T elements, so each gather moves ceil(T/N) and each
    reduce-scatter N·ceil(T/N) elements, over the FSDP group. The first two microbatches reduce nothing (no
    reduce-scatter, no all-reduce of the replicated biases and norms); the last reduces everything, once."""
    model = make_fsdp_model("deep_mlp")
    block = sum(m.weight.numel() for m in model[0].modules() if isinstance(m, torch.nn.Linear))
    unit, head = -(-block // world_size), -(-model[2].weight.numel() // world_size)
    replicated = len([p for m in model.modules() for p in m.parameters(recurse=False)
                      if not (isinstance(m, torch.nn.Linear) and p is m.weight)])  # fmt: skip
    group = tuple(range(world_size))
    for rank, per_microbatch in enumerate(run_ranks(world_size, units_comm_rank, 3)):
        for m, events in enumerate(per_microbatch):
            where = f"rank {rank}, microbatch {m} of 3 (sync {'on' if m == 2 else 'off'})"
            log = f"\n{where}'s calls:\n{format_events(events, limit=60)}"
            ops = calls(events)
            forward = [e.numel for e in ops if "gather" in e.op and not e.in_backward]
            backward = [e.numel for e in ops if "gather" in e.op and e.in_backward]
            scattered = [e.numel for e in ops if "reduce_scatter" in e.op]
            reduced = [e.numel for e in ops if "all_reduce" in e.op or "allreduce" in e.op]
            assert forward == [unit, unit, head], (
                f"{where}: forward all-gathered {forward} elements; expected one gather per unit (each block's "
                f"flat buffer: {unit} = ceil({block}/{world_size})) and one for the head: {[unit, unit, head]}{log}"
            )
            assert backward == [head, unit, unit], (
                f"{where}: backward all-gathered {backward} elements; expected the head, then each unit once "
                f"again in reverse order: {[head, unit, unit]}{log}"
            )
            want = [world_size * head, world_size * unit, world_size * unit] if m == 2 else []
            assert scattered == want, (
                f"{where}: reduce-scattered {scattered} elements; expected {want or 'nothing'}: "
                + ("one reduce-scatter of each unit's whole flat grad (and the head's), on the microbatch that "
                   "syncs, carrying the sum of every microbatch" if m == 2 else
                   "with gradient sync off, grads are summed locally, not reduced")
                + log
            )  # fmt: skip
            assert len(reduced) == (replicated if m == 2 else 0), (
                f"{where}: {len(reduced)} all-reduces; expected {replicated if m == 2 else 0} (one per replicated "
                f"parameter, on the microbatch that syncs only){log}"
            )
            others = [e for e in ops if e.group_ranks != group]
            assert not others, f"{where}: calls outside the FSDP group {group}{log}"


def units_memory_rank(ctx):
    """WIDE DeepMLP, its blocks as units, one step: the bytes of the tensors autograd saved for backward as
    they stand after forward (a view of a freed buffer holds 0), and the bytes reachable from FSDP."""
    fsdp_mod = ctx.load("fsdp")
    torch.manual_seed(0)
    model = DeepMLP(*WIDE).to(ctx.device)
    fsdp = fsdp_mod.FSDP(model, units=[model[0], model[1]])
    params = {p.untyped_storage().data_ptr() for p in fsdp.parameters()}
    x, y = (t.to(ctx.device) for t in random_batch(2, WIDE[1], WIDE[1], seed=ctx.rank))
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = torch.nn.functional.mse_loss(fsdp(x), y)
    held = [t.untyped_storage().nbytes() for t in saved if t.untyped_storage().data_ptr() not in params]
    out = {"saved after forward": max(held, default=0), "after forward": storage_bytes(fsdp, set())}
    saved.clear()  # the views hold nothing now; let backward free its graph as usual
    loss.backward()
    out["after backward"] = storage_bytes(fsdp, set())
    return out


@pytest.mark.task3_4
def test_fsdp_units_free_their_gathered_buffer_after_forward(world_size):
    """A unit's gathered flat buffer is freed when its forward returns, though autograd saved views of it.

    With a unit, the layers' weights are views of one gathered buffer and autograd saves them for backward;
    the buffer must give back its memory when the unit's forward returns (resize its storage to 0 and refill
    it before backward, or save none of it) and after backward: the tensors autograd saved hold less than
    the smallest weight, and FSDP holds at most its shards, replicated parameters and their grads."""
    model = DeepMLP(*WIDE)
    weights = [m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)]
    replicated = sum(p.numel() for p in model.parameters()) - sum(weights)
    blocks = [
        sum(m.weight.numel() for m in b.modules() if isinstance(m, torch.nn.Linear)) for b in (model[0], model[1])
    ]
    shards = 4 * (sum(-(-n // world_size) for n in [*blocks, weights[-1]]) + replicated)
    for rank, out in enumerate(run_ranks(world_size, units_memory_rank, deadline=60)):
        assert out["saved after forward"] < 4 * min(weights), (
            f"rank {rank}: after forward, a tensor autograd saved for backward holds {out['saved after forward']} "
            f"bytes (smallest full weight: {4 * min(weights)}): the unit's gathered buffer outlived its forward"
        )
        for when, copies in (("after forward", 1), ("after backward", 2)):
            assert out[when] <= copies * shards + 1024, (
                f"rank {rank}, {when}: FSDP holds {out[when]} bytes; shards, replicated parameters and their "
                f"grads need at most {copies * shards + 1024} at world size {world_size}. Something keeps a "
                "gathered buffer"
            )


class TiedUnitModel(torch.nn.Module):
    """One unit's worth of Linears: fc4 reuses fc2's weight (tied within the unit), fc2 has a bias (replicated).

    Its trainable weights in ``modules()`` order, the tied one once: fc1 (7, 5), fc2 (9, 7), fc3 (7, 9),
    fc5 (2, 9), T = 179 elements, a prime: the flat buffer is padded at every world size from 2 to 8."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(5, 7, bias=False)
        self.fc2 = torch.nn.Linear(7, 9)
        self.fc3 = torch.nn.Linear(9, 7, bias=False)
        self.fc4 = torch.nn.Linear(7, 9, bias=False)
        self.fc4.weight = self.fc2.weight
        self.fc5 = torch.nn.Linear(9, 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.fc2(torch.tanh(self.fc1(x))))
        return self.fc5(torch.tanh(self.fc4(torch.tanh(self.fc3(x)))))


LAYOUT_STEPS, LAYOUT_LR = 2, 0.1


def layout_batch(step: int, rank: int):
    gen = torch.Generator().manual_seed(9000 + 100 * step + rank)
    return torch.randn(3, 5, generator=gen), torch.randn(3, 2, generator=gen)


def unit_weights(model: torch.nn.Module) -> list[torch.Tensor]:
    """The trainable Linear/Embedding weights of ``model`` in ``modules()`` order, a tied one once."""
    layers = (m for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)))
    return list({id(m.weight): m.weight for m in layers if m.weight.requires_grad}.values())


def layout_rank(ctx):
    """The whole TiedUnitModel as one unit, SGD: ``flat_shard`` as built, then per step its grad and itself."""
    fsdp_mod = ctx.load("fsdp")
    torch.manual_seed(0)
    model = TiedUnitModel().to(ctx.device)
    fsdp = fsdp_mod.FSDP(model, units=[model])
    opt = torch.optim.SGD(fsdp.parameters(), lr=LAYOUT_LR)
    out = {"built": model.flat_shard.detach().clone(), "steps": []}
    for step in range(LAYOUT_STEPS):
        x, y = (t.to(ctx.device) for t in layout_batch(step, ctx.rank))
        torch.nn.functional.mse_loss(fsdp(x), y).backward()
        grad = model.flat_shard.grad.detach().clone()
        opt.step()
        opt.zero_grad()
        out["steps"].append({"grad": grad, "shard": model.flat_shard.detach().clone()})
    return out


@pytest.mark.task3_4
def test_fsdp_unit_flat_shard_is_its_weights_in_order_tied_once_zero_padded_at_the_end(world_size):
    """A unit's flat_shards, concatenated over ranks, are its weights in modules() order, a tied weight once,
    then zeros: as built, as its grad and after every step.

    The whole TiedUnitModel is one unit: T = 179 elements (fc4's weight is fc2's, packed once), so each rank's
    flat_shard has ceil(T/N) elements and the concatenation N*ceil(T/N), padded at every world size from 2 to
    8. As built it holds rank 0's weights (the seeded model) then zeros; after each backward the
    concatenated grads hold the mean grads over ranks in the same layout, zeros in the padding (what is
    reduce-scattered there must be zeros: anything else lands in the last rank's shard and the optimizer
    steps it); after each SGD step, the plain model's weights on those mean grads, and zeros."""
    torch.manual_seed(0)
    model = TiedUnitModel()
    weights = unit_weights(model)
    total = sum(w.numel() for w in weights)
    chunk = -(-total // world_size)
    opt = torch.optim.SGD(model.parameters(), lr=LAYOUT_LR)

    def flat(tensors):
        return torch.cat([t.detach().reshape(-1) for t in tensors])

    expected = [("as built", "flat_shard", flat(weights))]
    for step in range(LAYOUT_STEPS):
        opt.zero_grad()
        for rank in range(world_size):
            x, y = layout_batch(step, rank)
            (torch.nn.functional.mse_loss(model(x), y) / world_size).backward()
        expected.append((f"after backward {step}", "flat_shard.grad", flat(w.grad for w in weights)))
        opt.step()
        expected.append((f"after step {step}", "flat_shard", flat(weights)))
    outs = run_ranks(world_size, layout_rank)
    for rank, out in enumerate(outs):
        assert out["built"].shape == (chunk,), (
            f"rank {rank}: flat_shard has shape {tuple(out['built'].shape)}; expected ({chunk},) = ceil(T/N) with "
            f"T = {total}: the unit's trainable weights, fc4's weight tied to fc2's packed once, at world size "
            f"{world_size}"
        )
    got = [torch.cat([o["built"] for o in outs])]
    for step in range(LAYOUT_STEPS):
        got += [torch.cat([o["steps"][step][k] for o in outs]) for k in ("grad", "shard")]
    for (when, what, want), have in zip(expected, got):
        assert_close(have[:total], want, what=f"{what} over ranks 0..{world_size - 1}, {when}, elements [0, {total})")
        pad = have[total:]
        assert torch.equal(pad, torch.zeros_like(pad)), (
            f"{what} over ranks 0..{world_size - 1}, {when}: the padding [{total}, {world_size * chunk}) holds "
            f"{pad.tolist()}; it must stay zeros (pad at the end, and pack zeros there in the flat grad)"
        )


def bf16_comm_rank(ctx, name: str, with_units: bool):
    """compute_dtype=bfloat16, ``UNITS[name]`` (or none), one forward and backward with sync on: the calls, the
    matmuls' dtypes and the output dtype of every Linear and Embedding layer."""
    fsdp_mod = ctx.load("fsdp")
    model = make_fsdp_model(name).to(ctx.device)
    layers = [m for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Embedding))]
    fsdp = fsdp_mod.FSDP(model, compute_dtype=torch.bfloat16, units=UNITS[name](model) if with_units else None)
    outputs = []
    for layer in layers:
        layer.register_forward_hook(lambda m, args, out: outputs.append((type(m).__name__, str(out.dtype))))
    x, y = (t.to(ctx.device) for t in fsdp_batch(name, 0, ctx.rank))
    with CommRecorder() as rec, _MatmulDtypes() as matmuls:
        torch.nn.functional.mse_loss(fsdp(x), y).backward()
    return rec.events, sorted(matmuls.dtypes), outputs


def check_bf16_traffic(outs, name: str, with_units: bool) -> None:
    """Every all-gather moved bfloat16, every reduction float32, matmuls ran in bfloat16, layers returned float32."""
    for rank, (events, matmuls, outputs) in enumerate(outs):
        where = f"rank {rank}, {name} {'with units' if with_units else 'without units'}, compute_dtype=bfloat16"
        log = f"\n{where}, calls:\n{format_events(events, limit=60)}"
        ops = calls(events)
        gathers = [e.dtype for e in ops if "gather" in e.op]
        reduced = [e.dtype for e in ops if "reduce" in e.op]
        assert gathers and set(gathers) == {"bfloat16"}, (
            f"{where}: all-gathers moved {gathers}; cast the shard to compute_dtype before gathering it, so each "
            f"gather moves bfloat16 (half fp32's bytes){log}"
        )
        assert reduced and set(reduced) == {"float32"}, (
            f"{where}: reduce-scatters and all-reduces moved {reduced}; grads are reduced in the shards' dtype, "
            f"float32{log}"
        )
        assert matmuls == ["bfloat16"], f"{where}: matmuls ran in {matmuls}, expected ['bfloat16']"
        wrong = [(kind, dtype) for kind, dtype in outputs if dtype != "torch.float32"]
        assert not wrong, (
            f"{where}: layers returned {wrong}; an Embedding returns its weight's storage dtype (float32), a Linear "
            "its input's (float32 here)"
        )


@pytest.mark.task3_3
@pytest.mark.world_sizes(2, 3, 4, 5, 6, 7, 8, reason="at world size 1 FSDP sends nothing")
@pytest.mark.parametrize("name", ["deep_mlp", "embedding"])
def test_fsdp_bf16_gathers_bf16_reduces_fp32_and_returns_fp32(world_size, name):
    """With compute_dtype=bfloat16, each layer's all-gathers (forward and backward) move bfloat16, its
    reduce-scatters and the replicated all-reduces float32; matmuls run in bfloat16; every layer returns float32.

    The shard is cast before it is gathered (half the bytes of fp32 on the wire), and the grads are reduced in
    the shards' dtype. The embedding model: the Embedding's int64 indices are not cast, and its output (rows
    of the bf16 table) comes back in the weight's storage dtype, float32, as a Linear's comes back in its
    input's."""
    check_bf16_traffic(run_ranks(world_size, bf16_comm_rank, name, False), name, False)


@pytest.mark.task3_4
@pytest.mark.world_sizes(2, 3, 4, 5, 6, 7, 8, reason="at world size 1 FSDP sends nothing")
@pytest.mark.parametrize("name", ["deep_mlp", "embedding"])
def test_fsdp_bf16_units_gather_bf16_reduce_fp32_and_return_fp32(world_size, name):
    """With compute_dtype=bfloat16, a unit's all-gathers (forward and backward) move bfloat16, its flat grad's
    reduce-scatter float32; matmuls run in bfloat16; every layer returns float32.

    DeepMLP's blocks as units (its head a single layer, as in §3.3); the embedding model as one unit (an
    Embedding and a Linear in one flat buffer: the Embedding's rows come back in float32)."""
    check_bf16_traffic(run_ranks(world_size, bf16_comm_rank, name, True), name, True)


@pytest.mark.task3_4
@pytest.mark.world_sizes(2, 3, 4, 5, 6, 7, 8, reason="bf16 units at N >= 2: world size 1 reduces nothing")
def test_fsdp_bf16_units_with_deferred_sync_match_one_process(world_size):
    """compute_dtype=bfloat16 with units and 2 microbatches (sync on the last) trains like one process in fp32.

    DeepMLP's blocks as units, SGD: losses and gathered full parameters within bfloat16's tolerance (rtol
    1.6e-2, atol 1e-2) of one fp32 process on every microbatch of every rank; the unit's flat grad and shard
    stay fp32, so the sum over microbatches and ranks loses nothing to bfloat16."""
    outs = run_ranks(world_size, units_train_rank, "deep_mlp", 2, torch.bfloat16)
    check_units_training(outs, "deep_mlp", 2, rtol=1.6e-2, atol=1e-2)


def units_group_rank(ctx, groups: list[list[int]], num_microbatches: int):
    """Every rank seeds its own DeepMLP (its parameters differ per rank), then FSDP over its group of
    ``groups`` with the blocks as units, SGD, sync on the last microbatch: per step the loss and full state."""
    fsdp_mod = ctx.load("fsdp")
    made = [torch.distributed.new_group(g) for g in groups]
    group = next(pg for pg, g in zip(made, groups) if ctx.rank in g)
    torch.manual_seed(100 + ctx.rank)
    model = DeepMLP(2, D_MODEL, D_FF).to(ctx.device)
    fsdp = fsdp_mod.FSDP(model, units=UNITS["deep_mlp"](model), group=group)
    cls, kwargs = FSDP_OPTIMIZERS["sgd"]
    opt = cls(fsdp.parameters(), **kwargs)
    history = []
    for step in range(FSDP_STEPS):
        loss = 0
        for m in range(num_microbatches):
            fsdp.set_requires_gradient_sync(m == num_microbatches - 1)
            x, y = (t.to(ctx.device) for t in fsdp_batch("deep_mlp", step, ctx.rank * num_microbatches + m))
            part = torch.nn.functional.mse_loss(fsdp(x), y) / num_microbatches
            part.backward()
            loss += part.detach()
        opt.step()
        opt.zero_grad()
        history.append({"loss": loss, "state": fsdp.gather_full_params()})
    return history


def group_oracle(members: list[int], num_microbatches: int):
    """One process from the group's first rank's model (seed 100 + members[0]): per step each member's loss
    and the state after SGD on the mean grad over the members' microbatches."""
    torch.manual_seed(100 + members[0])
    model = DeepMLP(2, D_MODEL, D_FF)
    cls, kwargs = FSDP_OPTIMIZERS["sgd"]
    opt = cls(model.parameters(), **kwargs)
    history = []
    for step in range(FSDP_STEPS):
        opt.zero_grad()
        losses = []
        for rank in members:
            loss = 0
            for m in range(num_microbatches):
                x, y = fsdp_batch("deep_mlp", step, rank * num_microbatches + m)
                part = torch.nn.functional.mse_loss(model(x), y) / num_microbatches
                (part / len(members)).backward()
                loss += part.detach()
            losses.append(loss)
        opt.step()
        history.append({"losses": losses, "state": {k: v.clone() for k, v in model.state_dict().items()}})
    return history


@pytest.mark.task3_4
@pytest.mark.world_sizes(2, 3, 4, 5, 6, 7, 8, reason="a sub-group needs at least 2 ranks")
def test_fsdp_units_on_a_sub_group_start_from_its_first_rank_and_average_over_it(world_size):
    """FSDP with units on a sub-group broadcasts the group's first rank's parameters and averages over the group.

    The even and the odd ranks form two groups; every rank seeds its own model, so each group must start from
    its first rank's (global rank 0 and 1: ``src`` is a global rank) and train, with the blocks as units, 2
    microbatches and SGD, like one process on the mean grad over its own ranks' microbatches, divided by the
    group's size, not the world's."""
    groups = [list(range(0, world_size, 2)), list(range(1, world_size, 2))]
    outs = run_ranks(world_size, units_group_rank, groups, 2)
    for members in groups:
        for step, expected in enumerate(group_oracle(members, 2)):
            for i, r in enumerate(members):
                where = f"rank {r} (FSDP group {members}, first rank {members[0]}), step {step}"
                assert_close(outs[r][step]["loss"], expected["losses"][i], what=f"{where}: loss")
                for key, value in expected["state"].items():
                    assert_close(outs[r][step]["state"][key], value, what=f"{where}: {key} after the step")


def embedding_comm_rank(ctx):
    """The embedding model without units: one forward and backward under the recorder."""
    fsdp_mod = ctx.load("fsdp")
    fsdp = fsdp_mod.FSDP(make_fsdp_model("embedding").to(ctx.device))
    x, y = (t.to(ctx.device) for t in fsdp_batch("embedding", 0, ctx.rank))
    with CommRecorder() as rec:
        torch.nn.functional.mse_loss(fsdp(x), y).backward()
    return rec.events


@pytest.mark.task3_3
@pytest.mark.world_sizes(2, 3, 4, 5, 6, 7, 8, reason="at world size 1 FSDP sends nothing")
def test_fsdp_embedding_is_gathered_in_forward_only(world_size):
    """An Embedding's table is all-gathered for its forward but not again in backward: its weight grad needs only
    the indices (rows of the output grad added at them), so backward just reduce-scatters it.

    Embedding(13, 16) then Linear(16, 16), no units: forward gathers the table, then the Linear's weight;
    backward gathers the Linear's weight again (its input grad needs it) and reduce-scatters both weight grads,
    the Linear's first."""
    model = make_fsdp_model("embedding")
    emb, lin = (-(-m.weight.numel() // world_size) for m in (model[0], model[1]))
    for rank, events in enumerate(run_ranks(world_size, embedding_comm_rank)):
        log = f"\nrank {rank}'s calls:\n{format_events(events, limit=60)}"
        ops = calls(events)
        forward = [e.numel for e in ops if "gather" in e.op and not e.in_backward]
        backward = [e.numel for e in ops if "gather" in e.op and e.in_backward]
        scattered = [e.numel for e in ops if "reduce_scatter" in e.op]
        assert forward == [emb, lin], f"rank {rank}: forward all-gathered {forward}, expected {[emb, lin]}{log}"
        assert backward == [lin], (
            f"rank {rank}: backward all-gathered {backward}, expected {[lin]}: the Linear's weight again, not the "
            f"Embedding's table (its weight grad needs only the indices){log}"
        )
        want = [world_size * lin, world_size * emb]
        assert scattered == want, f"rank {rank}: reduce-scattered {scattered} elements, expected {want}{log}"


def weightless_unit_rank(ctx):
    """DeepMLP with units [block 0, block 1's LayerNorm, block 1's MLP]: the LayerNorm holds no Linear or
    Embedding weight. Whether that unit got a flat_shard, the calls of the first forward and backward, and per
    SGD step the loss and the full state."""
    fsdp_mod = ctx.load("fsdp")
    model = make_fsdp_model("deep_mlp").to(ctx.device)
    fsdp = fsdp_mod.FSDP(model, units=[model[0], model[1].norm, model[1].mlp])
    opt = torch.optim.SGD(fsdp.parameters(), **FSDP_OPTIMIZERS["sgd"][1])
    history, events = [], None
    for step in range(FSDP_STEPS):
        x, y = (t.to(ctx.device) for t in fsdp_batch("deep_mlp", step, ctx.rank))
        with CommRecorder() as rec:
            loss = torch.nn.functional.mse_loss(fsdp(x), y)
            loss.backward()
        events = rec.events if events is None else events
        opt.step()
        opt.zero_grad()
        history.append({"loss": loss.detach(), "state": fsdp.gather_full_params()})
    return {"flat_shard": hasattr(model[1].norm, "flat_shard"), "events": events, "history": history}


@pytest.mark.task3_4
def test_fsdp_unit_without_trainable_weights_is_skipped(world_size):
    """A unit holding no trainable Linear or Embedding weight is skipped: no flat_shard, no collective of its own.

    DeepMLP with units = [block 0, block 1's LayerNorm, block 1's MLP]: the LayerNorm unit gets no flat_shard
    and its parameters stay replicated (one all-reduce each); each step sends, per forward, one gather per
    unit with weights and one for the head, none of zero elements; and training (SGD) matches one process."""
    model = make_fsdp_model("deep_mlp")
    sizes = [sum(m.weight.numel() for m in u.modules() if isinstance(m, torch.nn.Linear)) for u in (model[0], model[1])]
    want = [-(-n // world_size) for n in [*sizes, model[2].weight.numel()]]
    outs = run_ranks(world_size, weightless_unit_rank)
    for rank, out in enumerate(outs):
        assert not out["flat_shard"], (
            f"rank {rank}: the unit model[1].norm (a LayerNorm: no Linear or Embedding weight) has a flat_shard; a "
            "unit without trainable weights is skipped"
        )
        if world_size > 1:
            ops = calls(out["events"])
            forward = [e.numel for e in ops if "gather" in e.op and not e.in_backward]
            assert forward == want, (
                f"rank {rank}: forward all-gathered {forward} elements; expected one gather per unit with weights "
                f"and one for the head, {want}, none for the LayerNorm unit"
                f"\n{format_events(out['events'], limit=60)}"
            )
    check_units_training([o["history"] for o in outs], "deep_mlp", 1)


# -- bad input ----------------------------------------------------------------------------------------

BAD_INPUT = [
    BadInput("module-as-a-list-of-parameters",
             lambda F, ctx: F.FSDP(list(make_fsdp_model("deep_mlp").to(ctx.device).parameters())),
             "TypeError", names="module", task="task3_3"),
    BadInput("integer-compute_dtype",
             lambda F, ctx: F.FSDP(make_fsdp_model("deep_mlp").to(ctx.device), compute_dtype=torch.int64),
             "TypeError", names="compute_dtype", task="task3_3"),
    BadInput("units-a-module-not-a-list",
             lambda F, ctx: F.FSDP((m := make_fsdp_model("deep_mlp").to(ctx.device)), units=m[0]),
             "TypeError", names="units", task="task3_4"),
    BadInput("units-not-a-submodule",
             lambda F, ctx: F.FSDP(make_fsdp_model("deep_mlp").to(ctx.device), units=[torch.nn.Linear(2, 2)]),
             "ValueError", names="units", task="task3_4"),
    BadInput("units-one-inside-another",
             lambda F, ctx: F.FSDP((m := make_fsdp_model("deep_mlp").to(ctx.device)), units=[m, m[0]]),
             "ValueError", names="units", task="task3_4"),
    BadInput("requires_gradient_sync-not-a-bool",
             lambda F, fsdp: fsdp.set_requires_gradient_sync(0),
             "TypeError", names="requires_gradient_sync", task="task3_4",
             arrange=lambda F, ctx: F.FSDP(make_fsdp_model("deep_mlp").to(ctx.device))),
]  # fmt: skip


@pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
def test_bad_input_raises_on_every_rank_before_communicating(world_size, case):
    """Bad input raises the promised TypeError naming the argument, on every rank, before any message."""
    assert_rejected_before_communicating(run_ranks(world_size, bad_input_rank, "fsdp", case), case)
