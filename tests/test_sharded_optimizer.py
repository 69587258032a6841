"""Part 3: ZeRO stages 1 and 2, ``ShardedOptimizer`` (handouts/03-zero.md §3.1-3.2).

    pytest tests/test_sharded_optimizer.py                  # your implementation
    pytest tests/test_sharded_optimizer.py -m task3_2       # only stage 2

Ranks train a small model with the sharded optimizer and send back parameters, grads, the bytes the
optimizer object holds and the communication of ``step``; the parent replays the same steps in one
process with the plain optimizer on the averaged grads (the oracle: "data parallel with a sharded
optimizer is data parallel") and judges every step on every rank. FSDP (stage 3, §3.3) is tested
at the end of this file the same way, against a plain model trained on the averaged grads.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from cs336_systems.models import DeepMLP
from cs336_systems.utils import random_batch
from tests.harness import assert_ranks_close, run_ranks
from tests.harness.bad_input import assert_rejected_before_communicating, rejection
from tests.harness.recorder import CommRecorder, calls, format_events

D_MODEL, D_FF, LAYERS, BATCH, STEPS = 16, 32, 3, 4, 4
ADD_GROUP_AT = 2  # the head joins the optimizer (add_param_group) before this step
OPTIMIZERS = {  # name -> (class, kwargs); each param group below overrides some of them
    "adamw": (torch.optim.AdamW, {"lr": 1e-2, "weight_decay": 0.1}),
    "sgd_momentum": (torch.optim.SGD, {"lr": 5e-2, "momentum": 0.9}),
}


def make_model() -> DeepMLP:
    torch.manual_seed(0)  # every rank and the oracle build the same weights
    return DeepMLP(LAYERS, D_MODEL, D_FF)


def param_groups(model: DeepMLP) -> tuple[list[dict], dict]:
    """Two groups from the start (matrices with weight decay, vectors without, another lr) and the
    head's group, added mid-training."""
    body = [(n, p) for n, p in model.named_parameters() if not n.startswith(f"{LAYERS}.")]
    matrices = {"params": [p for n, p in body if p.ndim == 2]}
    vectors = {"params": [p for n, p in body if p.ndim < 2], "lr": 2e-2, "weight_decay": 0.0}
    head = {"params": list(model[LAYERS].parameters()), "lr": 3e-2}
    return [matrices, vectors], head


def rank_batch(step: int, rank: int):
    return random_batch(BATCH, D_MODEL, D_MODEL, seed=1000 * step + rank)


def loss_of(model, x, y) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(x), y)


# -- rank functions ---------------------------------------------------------------------------------


def train_rank(ctx, opt_name: str, stage: int):
    """STEPS steps of data-parallel training; per step, every parameter and which grads survive."""
    zero = ctx.load("sharded_optimizer")
    model = make_model().to(ctx.device)
    groups, head = param_groups(model)
    cls, kwargs = OPTIMIZERS[opt_name]
    opt = zero.ShardedOptimizer(groups, cls, shard_gradients=stage == 2, **kwargs)
    history = []
    for step in range(STEPS):
        if step == ADD_GROUP_AT:
            opt.add_param_group(head)
        opt.zero_grad()
        x, y = (t.to(ctx.device) for t in rank_batch(step, ctx.rank))
        loss_of(model, x, y).backward()
        if stage == 1:  # stage 1 takes averaged grads, as DDP would leave them
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad.div_(ctx.world_size)
        opt.step()
        owned = {id(p) for p in opt.owned_parameters()}
        managed = {id(p) for g in opt.param_groups for p in g["params"]}
        history.append(
            {
                "params": {n: p.detach().clone() for n, p in model.named_parameters()},
                "owned": sorted(n for n, p in model.named_parameters() if id(p) in owned),
                "has_grad": sorted(n for n, p in model.named_parameters() if id(p) in managed and p.grad is not None),
            }
        )
    return history


def oracle_history(world_size: int, opt_name: str) -> list[dict[str, torch.Tensor]]:
    """The plain optimizer on one process, stepping on the mean of the ranks' gradients."""
    model = make_model()
    groups, head = param_groups(model)
    cls, kwargs = OPTIMIZERS[opt_name]
    opt = cls(groups, **kwargs)
    history = []
    for step in range(STEPS):
        if step == ADD_GROUP_AT:
            opt.add_param_group(head)
        grads = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
        for rank in range(world_size):
            model.zero_grad()
            loss_of(model, *rank_batch(step, rank)).backward()
            for n, p in model.named_parameters():
                grads[n] += p.grad / world_size
        for n, p in model.named_parameters():
            p.grad = grads[n]
        opt.step()
        history.append({n: p.detach().clone() for n, p in model.named_parameters()})
    return history


# -- tests: equivalence ------------------------------------------------------------------------------


@pytest.mark.task3_1
@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
def test_stage1_matches_the_unsharded_optimizer_on_averaged_grads_on_every_rank(world_size, opt_name):
    """Every step, every rank's parameters equal the plain optimizer's (two param groups, a third
    added with add_param_group at step 2): owners update, then every rank receives the update."""
    outs = run_ranks(world_size, train_rank, opt_name, 1)
    for step, expected in enumerate(oracle_history(world_size, opt_name)):
        for name, value in expected.items():
            got = [o[step]["params"][name] for o in outs]
            assert_ranks_close(got, value, what=f"stage 1, {opt_name}, after step {step}, {name}")


@pytest.mark.task3_2
@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
def test_stage2_averages_local_grads_itself_and_matches_the_unsharded_optimizer(world_size, opt_name):
    """With shard_gradients=True the grads given to step are each rank's own: step must average
    them (reduce-scatter, then divide by the world size) and still match the plain optimizer."""
    outs = run_ranks(world_size, train_rank, opt_name, 2)
    for step, expected in enumerate(oracle_history(world_size, opt_name)):
        for name, value in expected.items():
            got = [o[step]["params"][name] for o in outs]
            assert_ranks_close(got, value, what=f"stage 2, {opt_name}, after step {step}, {name}")


@pytest.mark.task3_2
def test_stage2_keeps_only_the_owned_grads_after_step(world_size):
    """After step a rank holds the grads of its own parameters and None for every other one of the
    optimizer's parameters."""
    outs = run_ranks(world_size, train_rank, "sgd_momentum", 2)
    for rank, history in enumerate(outs):
        for step, record in enumerate(history):
            assert record["has_grad"] == record["owned"], (
                f"rank {rank}, after step {step}: parameters with a grad {record['has_grad']} should be "
                f"exactly the owned ones {record['owned']} (stage 2 frees the grads a rank does not own)"
            )


# -- tests: ownership, memory, communication --------------------------------------------------------

SHAPE_SETS = {
    "mixed": [(64, 32), (7,), (32,), (1,), (0,), (16, 16), (5, 3), (128,), (3, 3, 3), (2,)],
    "equal": [(10, 10)] * 9,
}


def assignment_rank(ctx, shapes):
    """Which parameter indices this rank owns, for two constructions (groups added in two steps)."""
    zero = ctx.load("sharded_optimizer")
    owned = []
    for _ in range(2):
        params = [torch.nn.Parameter(torch.zeros(s, device=ctx.device)) for s in shapes]
        half = len(params) // 2
        opt = zero.ShardedOptimizer(params[:half], torch.optim.SGD, lr=0.1)
        opt.add_param_group({"params": params[half:], "lr": 0.2})
        mine = {id(p) for p in opt.owned_parameters()}
        owned.append([i for i, p in enumerate(params) if id(p) in mine])
    return owned


@pytest.mark.task3_1
@pytest.mark.parametrize("shapes", list(SHAPE_SETS))
def test_every_parameter_has_exactly_one_owner_and_ownership_is_balanced(world_size, shapes):
    """The ranks agree (without talking) on one owner per parameter, the same every time; no rank
    owns more than P/N + the largest parameter's numel."""
    shapes = SHAPE_SETS[shapes]
    outs = run_ranks(world_size, assignment_rank, shapes)
    for rank, (first, second) in enumerate(outs):
        assert first == second, (
            f"rank {rank}: ownership changed between two identical constructions ({first} vs {second}); it "
            "must be computed the same way every time and on every rank (from sizes and order, not ids, "
            "hashes or random)"
        )
    owners = {i: [r for r, o in enumerate(outs) if i in o[0]] for i in range(len(shapes))}
    bad = {i: rs for i, rs in owners.items() if len(rs) != 1}
    assert not bad, (
        f"parameter index -> ranks owning it: {bad}; each must have exactly one owner. The assignment "
        "must be computed identically on every rank (from sizes and order, not ids, hashes or random)"
    )
    numels = [torch.Size(s).numel() for s in shapes]
    loads = [sum(numels[i] for i in o[0]) for o in outs]
    limit = sum(numels) / world_size + max(numels)
    assert max(loads) <= limit, f"numel owned per rank {loads}: the largest exceeds P/N + max numel = {limit}"


def _storage_bytes(root, skip: set[int]) -> int:
    """Bytes of the distinct tensor storages reachable from ``root`` through attributes, containers,
    closures and ``.grad``, except storages whose data_ptr is in ``skip``. Measures what an object
    really holds, whatever its attribute names (a view's whole storage counts)."""
    import functools
    import types

    seen, storages, stack = set(), {}, [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType, str, bytes, int, float)):
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            if storage.data_ptr() not in skip:
                storages[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
                stack.append(obj.grad)
        elif isinstance(obj, dict):
            stack.extend([*obj.keys(), *obj.values()])
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif isinstance(obj, functools.partial):
            stack.extend([obj.func, obj.args, obj.keywords])
        elif isinstance(obj, types.FunctionType):
            stack.extend(c.cell_contents for c in obj.__closure__ or () if c.cell_contents is not None)
        elif isinstance(obj, types.MethodType):
            stack.extend([obj.__func__, obj.__self__])
        elif hasattr(obj, "__dict__"):
            stack.append(vars(obj))
    return sum(storages.values())


def optimizer_memory_rank(ctx, opt_name: str, stage: int):
    """Bytes held by the sharded optimizer and by the plain one after 2 steps (params, grads excluded)."""
    zero = ctx.load("sharded_optimizer")
    cls, kwargs = OPTIMIZERS[opt_name]
    sharded_model, plain_model = make_model().to(ctx.device), make_model().to(ctx.device)
    sharded = zero.ShardedOptimizer(sharded_model.parameters(), cls, shard_gradients=stage == 2, **kwargs)
    plain = cls(plain_model.parameters(), **kwargs)
    for step in range(2):
        for model, opt in ((sharded_model, sharded), (plain_model, plain)):
            opt.zero_grad()
            loss_of(model, *(t.to(ctx.device) for t in rank_batch(step, ctx.rank))).backward()
            opt.step()  # unaveraged grads: only the bytes matter here
    params = [*sharded_model.parameters(), *plain_model.parameters()]
    skip = {t.untyped_storage().data_ptr() for p in params for t in (p, p.grad) if t is not None}
    per_param = max(_storage_bytes(plain.state[p], skip) for p in plain_model.parameters())
    return _storage_bytes(sharded, skip), _storage_bytes(plain, skip), per_param


@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
@pytest.mark.parametrize(
    "stage", [pytest.param(1, marks=pytest.mark.task3_1), pytest.param(2, marks=pytest.mark.task3_2)]
)
def test_each_rank_holds_about_one_nth_of_the_optimizer_state(world_size, opt_name, stage):
    """Measured, not assumed: the tensors reachable from the sharded optimizer (its state, any
    buffers it keeps) take at most 1/N of the plain optimizer's bytes plus one parameter's state."""
    outs = run_ranks(world_size, optimizer_memory_rank, opt_name, stage)
    for rank, (sharded, plain, per_param) in enumerate(outs):
        limit = plain / world_size + per_param + 64
        assert sharded <= limit, (
            f"rank {rank}, stage {stage}, {opt_name}: the optimizer holds {sharded} bytes of tensors; "
            f"the unsharded optimizer holds {plain}, so at most {plain}/{world_size} + {per_param} (one "
            "parameter's state) was expected. Build the inner optimizer over the owned parameters only"
        )


def step_comm_rank(ctx, stage: int):
    """The communication of the second ``step`` (grads averaged beforehand for stage 1)."""
    zero = ctx.load("sharded_optimizer")
    model = make_model().to(ctx.device)
    opt = zero.ShardedOptimizer(model.parameters(), torch.optim.AdamW, shard_gradients=stage == 2, lr=1e-2)
    for step in range(2):
        opt.zero_grad()
        loss_of(model, *(t.to(ctx.device) for t in rank_batch(step, ctx.rank))).backward()
        if stage == 1:
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad.div_(ctx.world_size)
        with CommRecorder() as rec:
            opt.step()
    return rec.events


@pytest.mark.world_sizes(2, 4)
@pytest.mark.parametrize(
    "stage", [pytest.param(1, marks=pytest.mark.task3_1), pytest.param(2, marks=pytest.mark.task3_2)]
)
def test_step_sends_each_updated_parameter_once_and_stage2_reduce_scatters(world_size, stage):
    """In step: no all-reduce; one all-gather (or broadcasts) moving each updated parameter once
    (P elements, plus padding of at most one parameter per rank); stage 2 also reduce-scatters the
    grads (P elements in), which with the all-gather costs exactly one all-reduce: no more than DDP."""
    numels = [p.numel() for p in make_model().parameters()]
    total, slack = sum(numels), world_size * max(numels)
    for rank, events in enumerate(run_ranks(world_size, step_comm_rank, stage)):
        ops = calls(events)
        log = f"\nrank {rank}'s calls in step:\n{format_events(events)}"
        assert not [e for e in ops if "all_reduce" in e.op or "allreduce" in e.op], f"step all-reduced{log}"
        moved = sum(
            e.numel * (world_size if "gather" in e.op else 1) for e in ops if "gather" in e.op or "broadcast" in e.op
        )
        assert total <= moved <= total + slack, (
            f"rank {rank}, stage {stage}: the parameter all-gather/broadcasts in step moved {moved} "
            f"elements; every updated parameter must reach every rank once ({total} elements, up to "
            f"{total + slack} with padding){log}"
        )
        scattered = sum(e.numel for e in ops if "reduce_scatter" in e.op)
        if stage == 1:
            assert scattered == 0, f"rank {rank}: stage 1 gets averaged grads; step must not reduce them{log}"
        else:
            assert total <= scattered <= total + slack, (
                f"rank {rank}, stage 2: step must average the grads with a reduce-scatter of all {total} "
                f"grad elements (up to {total + slack} with padding); it reduce-scattered {scattered}{log}"
            )


# -- tests: FSDP (ZeRO stage 3) ----------------------------------------------------------------------

FSDP_STEPS, FSDP_LR = 3, 1e-3
# Adam is blind to the scale of the gradient (a sum instead of a mean steps the same), so SGD, which
# is not, also runs: together they check both the averaging and the optimizer on shards.
FSDP_OPTIMIZERS = {"adamw": (torch.optim.AdamW, {"lr": FSDP_LR}), "sgd": (torch.optim.SGD, {"lr": 0.05})}
# bfloat16 keeps 8 bits of mantissa: losses and parameters are compared to the fp32 oracle with the
# table's bfloat16 tolerance (rtol 1.6e-2, atol 1e-2); with lr 1e-3, 3 AdamW steps move a weight by at
# most ~3e-3, so the parameter check mostly guards against bf16 leaking into the fp32 shards.
COMPUTE_DTYPES = {"fp32": None, "bf16": torch.bfloat16}


def make_fsdp_model(name: str) -> torch.nn.Module:
    """deep_mlp: residual blocks and LayerNorms; tied: a weight used by two Linears plus a frozen
    parameter; embedding: an Embedding feeding a Linear (indices in, no grad for the input)."""
    from cs336_systems.models import ToyModelWithTiedWeights

    torch.manual_seed(0)
    if name == "deep_mlp":
        return DeepMLP(2, D_MODEL, D_FF)
    if name == "tied":
        return ToyModelWithTiedWeights(10, 5)
    return torch.nn.Sequential(torch.nn.Embedding(13, D_MODEL), torch.nn.Linear(D_MODEL, D_MODEL))


def fsdp_batch(name: str, step: int, rank: int):
    gen = torch.Generator().manual_seed(7000 + 100 * step + rank)
    if name == "embedding":
        return torch.randint(0, 13, (BATCH, 3), generator=gen), torch.randn(BATCH, 3, D_MODEL, generator=gen)
    d_in, d_out = (10, 5) if name == "tied" else (D_MODEL, D_MODEL)
    return torch.randn(BATCH, d_in, generator=gen), torch.randn(BATCH, d_out, generator=gen)


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
    zero = ctx.load("sharded_optimizer")
    model = make_fsdp_model(name).to(ctx.device)
    fsdp = zero.FSDP(model, compute_dtype=COMPUTE_DTYPES[dtype_name])
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


def fsdp_oracle(name: str, world_size: int, opt_name: str):
    """Per step: each rank's loss before the step, and the state dict after it (plain model, AdamW
    on the mean of the ranks' grads)."""
    model = make_fsdp_model(name)
    cls, kwargs = FSDP_OPTIMIZERS[opt_name]
    opt = cls([p for p in model.parameters() if p.requires_grad], **kwargs)
    history = []
    for step in range(FSDP_STEPS):
        grads = {id(p): torch.zeros_like(p) for p in model.parameters()}
        losses = []
        for rank in range(world_size):
            model.zero_grad()
            x, y = fsdp_batch(name, step, rank)
            losses.append(torch.nn.functional.mse_loss(model(x), y))
            losses[-1].backward()
            for p in model.parameters():
                if p.grad is not None:
                    grads[id(p)] += p.grad / world_size
        for p in model.parameters():
            p.grad = grads[id(p)] if p.requires_grad else None
        opt.step()
        history.append(
            {
                "losses": [loss.detach() for loss in losses],
                "state": {k: v.clone() for k, v in model.state_dict().items()},
            }
        )
    return history


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
    """Every step, every rank's loss equals the plain model's on that rank's batch, and the gathered
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
    zero = ctx.load("sharded_optimizer")
    torch.manual_seed(0)
    fsdp = zero.FSDP(DeepMLP(*WIDE).to(ctx.device))
    opt = torch.optim.AdamW(fsdp.parameters(), lr=FSDP_LR)
    x, y = (t.to(ctx.device) for t in random_batch(2, WIDE[1], WIDE[1], seed=ctx.rank))
    out = {}
    for _ in range(2):
        opt.zero_grad()
        with _GatheredStorages(fsdp.parameters()) as forward:
            loss = torch.nn.functional.mse_loss(fsdp(x), y)
        out["after forward"] = _storage_bytes(fsdp, set())
        with _GatheredStorages(fsdp.parameters()) as backward:
            loss.backward()
        out["after backward"] = _storage_bytes(fsdp, set())
        opt.step()
        out["between steps"] = _storage_bytes(fsdp, set())
        out["alive"] = {"forward": forward.alive(), "backward": backward.alive()}
        out["gathered"] = (len(forward.refs), len(backward.refs))
        out["largest saved"] = forward.largest_saved
    return out


@pytest.mark.task3_3
def test_fsdp_holds_one_nth_of_each_weight_and_frees_gathered_weights(world_size):
    """Measured on storage, not attributes: between steps, after forward and after backward, the
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
    zero = ctx.load("sharded_optimizer")
    fsdp = zero.FSDP(make_fsdp_model("deep_mlp").to(ctx.device))
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
    """Forward: layer i starts after i or i+1 all-gathers (its own weight, at most one prefetched),
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


# -- tests: bad input -------------------------------------------------------------------------------

BAD_INPUT = {  # case -> (the argument the message must name, task); all are TypeErrors
    "optimizer_cls_name": ("optimizer_cls", "task3_1"),
    "optimizer_instance": ("optimizer_cls", "task3_1"),
    "fsdp_module": ("module", "task3_3"),
    "fsdp_compute_dtype": ("compute_dtype", "task3_3"),
}


def bad_input_rank(ctx, case: str):
    zero = ctx.load("sharded_optimizer")
    model = make_model().to(ctx.device)
    build = {
        "optimizer_cls_name": lambda: zero.ShardedOptimizer(model.parameters(), "AdamW", lr=1e-3),
        "optimizer_instance": lambda: zero.ShardedOptimizer(
            model.parameters(), torch.optim.SGD(model.parameters(), lr=0.1), lr=1e-3
        ),
        "fsdp_module": lambda: zero.FSDP(list(model.parameters())),
        "fsdp_compute_dtype": lambda: zero.FSDP(model, compute_dtype=torch.int64),
    }[case]
    return rejection(build)


@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=getattr(pytest.mark, task)) for c, (_, task) in BAD_INPUT.items()]
)
def test_bad_arguments_raise_naming_the_argument_before_any_communication(world_size, case):
    """A TypeError naming the argument, on every rank, with nothing sent first."""
    outs = run_ranks(world_size, bad_input_rank, case)
    assert_rejected_before_communicating(outs, case, "TypeError", BAD_INPUT[case][0])
