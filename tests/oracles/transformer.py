"""The Part 11 oracles: one process training the given transformer, and a rank training it on a mesh.

    from tests.oracles.transformer import MESHES, check_training, dense_training, mesh_case, training_rank

``dense_training`` trains ``transformer.Transformer`` in one process on the whole batch (AdamW, or the
mesh's ``optimizer_cls``; float64) and returns the loss of every step and the final parameters.
``training_rank`` builds a ``ProcessMesh``, ``parallelize``s the same model on it, trains it on the same
batches and reports whether the caller's model was left untouched; ``expected_local`` is the slice of a
dense parameter a rank holds (the layout the docstrings of ``parallelize.py`` promise: TP rows or columns,
experts [e·E/ep, (e+1)·E/ep) on ep rank e), and ``check_training`` compares every rank with the oracle.
``MESHES``: the table of named meshes. Some train with plain SGD: AdamW divides each gradient by its own
scale, so a gradient summed where it should be averaged moves AdamW's parameters by ~1e-8 only; SGD's
move by the factor itself.

Used by tests/test_parallelize.py (and by the course staff's tests of other models and meshes).
"""

from __future__ import annotations

import re
from contextlib import nullcontext

import torch

from cs336_systems.transformer import Transformer, TransformerConfig, lm_loss
from tests.harness import assert_close, trace
from tests.harness.recorder import CommRecorder

# Tiny models: two blocks per stage at pp2 x 2 chunks, heads and kv heads for tp up to 4.
DENSE = TransformerConfig(vocab_size=16, d_model=32, n_layers=4, n_heads=8, n_kv_heads=4, d_ff=32)
MOE = TransformerConfig(vocab_size=16, d_model=32, n_layers=4, n_heads=8, n_kv_heads=4, d_ff=32, moe_every=2,
                        num_experts=4, top_k=2)  # fmt: skip
MODELS = {"dense": DENSE, "moe": MOE}
BATCH, SEQ, STEPS = 8, 16, 2
OPTIMIZER = {"lr": 1e-2, "weight_decay": 0.1}
SGD = {"optimizer_cls": torch.optim.SGD}  # an option: gradient-scale bugs move parameters by their factor

# name -> (mesh shape, model, parallelize options). Axes absent from a shape have size 1.
MESHES: dict[str, tuple[dict[str, int], str, dict]] = {
    "one": ({}, "dense", {}),
    "dp2": ({"dp": 2}, "dense", SGD),
    "tp2": ({"tp": 2}, "dense", SGD),
    "cp2": ({"cp": 2}, "dense", {}),
    "cp2-contiguous": ({"cp": 2}, "dense", {"zigzag": False}),
    "tp2-moe": ({"tp": 2}, "moe", {}),
    "pp2": ({"pp": 2}, "dense", {"num_microbatches": 2}),
    "fsdp2": ({"dp": 2}, "dense", {"data_parallel": "fsdp"}),
    "ep2": ({"ep": 2}, "moe", {}),
    "tp4": ({"tp": 4}, "dense", {}),
    "cp2xtp2": ({"cp": 2, "tp": 2}, "dense", {}),
    "dp2xtp2-zero1": ({"dp": 2, "tp": 2}, "dense", {"data_parallel": "zero1"}),
    "dp2xtp2": ({"dp": 2, "tp": 2}, "dense", SGD),
    "pp2xtp2": ({"pp": 2, "tp": 2}, "dense", {"num_microbatches": 2}),
    "pp2xcp2-interleaved": ({"pp": 2, "cp": 2}, "dense", {"num_microbatches": 2, "schedule": "interleaved",
                                                          "num_chunks": 2}),
    "dp2xpp2-gpipe": ({"dp": 2, "pp": 2}, "dense", {"num_microbatches": 2, "schedule": "gpipe"}),
    "ep2xtp2": ({"ep": 2, "tp": 2}, "moe", {}),
    "pp2xep2": ({"pp": 2, "ep": 2}, "moe", {"num_microbatches": 2}),
    "ep2xcp2": ({"ep": 2, "cp": 2}, "moe", SGD),
    "dp2xep2": ({"dp": 2, "ep": 2}, "moe", SGD),
    "dp2xep2-fsdp": ({"dp": 2, "ep": 2}, "moe", {"data_parallel": "fsdp"}),
    "dp2xpp2-zero1": ({"dp": 2, "pp": 2}, "dense", {"num_microbatches": 2, "data_parallel": "zero1"}),
    "dp2xfsdp2-hsdp": ({"dp": 2, "fsdp": 2}, "dense", {"data_parallel": "hsdp"}),
    "tp2xcp2xdp2": ({"dp": 2, "cp": 2, "tp": 2}, "dense", {}),
    "pp2xtp2xdp2": ({"dp": 2, "pp": 2, "tp": 2}, "dense", {"num_microbatches": 2}),
    "fsdp8": ({"dp": 8}, "dense", {"data_parallel": "fsdp"}),
    "pp2xep2xdp2": ({"dp": 2, "pp": 2, "ep": 2}, "moe", {"num_microbatches": 2}),
    "dp2xpp2xcp2": ({"dp": 2, "pp": 2, "cp": 2}, "dense", {"num_microbatches": 2}),
}  # fmt: skip

ROW_SHARDED = ("attn.wq.weight", "attn.wk.weight", "attn.wv.weight", "ffn.w_gate.weight", "ffn.w_up.weight")
COLUMN_SHARDED = ("attn.wo.weight", "ffn.w_down.weight")


def mesh_size(shape: dict[str, int]) -> int:
    size = 1
    for n in shape.values():
        size *= n
    return size


def full_shape(shape: dict[str, int]) -> dict[str, int]:
    """The mesh with every axis parallelize needs, outermost first (dp, [fsdp], pp, [ep], cp, tp)."""
    order = ("dp", "fsdp", "pp", "ep", "cp", "tp")
    return {axis: shape.get(axis, 1) for axis in order if axis in shape or axis in ("dp", "pp", "cp", "tp")}


def batches(cfg: TransformerConfig, steps: int = STEPS, batch: int = BATCH, seq: int = SEQ, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        rows = torch.randint(0, cfg.vocab_size, (batch, seq + 1), generator=g)
        out.append((rows[:, :-1].contiguous(), rows[:, 1:].contiguous()))
    return out


def dense_training(cfg: TransformerConfig, data, seed: int = 0,
                   options: dict | None = None) -> tuple[list[float], dict[str, torch.Tensor]]:  # fmt: skip
    """(loss of every step, final parameters): one process on the whole batch, float64, with the optimizer
    the mesh's ``options`` name (``optimizer_cls``, default AdamW) and ``OPTIMIZER``'s settings."""
    model = Transformer(cfg, seed=seed).double()
    opt = (options or {}).get("optimizer_cls", torch.optim.AdamW)(model.parameters(), **OPTIMIZER)
    losses = []
    for inputs, targets in data:
        opt.zero_grad(set_to_none=True)
        loss = lm_loss(model(inputs), targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}


def mesh_label(shape: dict[str, int], options: dict) -> str:
    """``"mesh dp=2,pp=1,cp=2,tp=2 ddp"``: how a training rank names its steps in a comm trace (the trace
    tool reads the axes back from it to say which axis each group is)."""
    axes = ",".join(f"{a}={n}" for a, n in full_shape(shape).items())
    return f"mesh {axes} {options.get('data_parallel', 'ddp')}"


def training_rank(ctx, shape, cfg, data, options, seed: int = 0):
    """Train the model parallelized on ``shape``; returns the mesh coordinates, each step's loss (None
    off the last stage), ``local_state_dict()`` after the last step, and the names of the caller's
    model's parameters that changed (``parallelize`` promises none). With a comm trace on (pytest
    --comm-trace DIR), each step is one recorded region, "mesh dp=2,... step i"."""
    M, P = ctx.load("mesh"), ctx.load("parallelize")
    mesh = M.ProcessMesh(full_shape(shape))
    model = Transformer(cfg, seed=seed).double().to(ctx.device)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    pt = P.parallelize(model, mesh, **options, **OPTIMIZER)
    losses = []
    for step, (x, y) in enumerate(data):
        with trace.labelled(f"{mesh_label(shape, options)} step {step}"):
            with CommRecorder() if trace.TRACE_DIR else nullcontext():
                losses.append(pt.train_step(x.to(ctx.device), y.to(ctx.device)))
    changed = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    return {"coords": mesh.coords(), "losses": losses, "state": pt.local_state_dict(), "changed": changed}


def expected_local(name: str, full: torch.Tensor, coords: dict[str, int], shape: dict[str, int]) -> torch.Tensor:
    """The slice of dense parameter ``name`` the rank at ``coords`` holds: TP rows or columns, else whole."""
    tp, t = shape.get("tp", 1), coords.get("tp", 0)
    if name.endswith(ROW_SHARDED):
        return full.chunk(tp, dim=0)[t]
    if name.endswith(COLUMN_SHARDED):
        return full.chunk(tp, dim=1)[t]
    return full


_EXPERT = re.compile(r"^(.*\.experts)\.(\d+)\.")


def check_experts(rank: int, held, want_state, coords, shape, label: str) -> None:
    """An ep rank holds exactly its E/ep experts of each MoE block it holds: [e·E/ep, (e+1)·E/ep) on ep rank e."""
    ep, e = shape.get("ep", 1), coords.get("ep", 0)
    every, mine = {}, {}
    for names, into in [(want_state, every), (held, mine)]:
        for name in names:
            if m := _EXPERT.match(name):
                into.setdefault(m.group(1), set()).add(int(m.group(2)))
    for block, got in mine.items():
        n = len(every.get(block, ()))
        want = set(range(e * n // ep, (e + 1) * n // ep))
        assert got == want, (
            f"{label}: rank {rank} {coords} holds experts {sorted(got)} of {block}; with {n} experts over ep = {ep}, "
            f"ep rank {e} holds E/ep = {n // ep} of them, global experts {sorted(want)}"
        )


def check_training(outs, shape, want_losses, want_state, label: str) -> None:
    """Every rank's losses (last stage) and parameters against the oracle; every parameter held somewhere, each
    expert on its ep rank only; the caller's model untouched."""
    seen = set()
    for rank, out in enumerate(outs):
        coords = out["coords"]
        assert not out["changed"], (
            f"{label}: rank {rank} {coords}: train_step changed the caller's model ({out['changed'][:3]}); "
            f"parallelize must train its own copies"
        )
        last = coords["pp"] == shape.get("pp", 1) - 1
        for step, (got, want) in enumerate(zip(out["losses"], want_losses)):
            if not last:
                assert got is None, f"{label}: rank {rank} (not the last stage) returned loss {got} at step {step}"
                continue
            assert got is not None and abs(got - want) <= 1e-9 * max(1.0, abs(want)), (
                f"{label}: rank {rank} {coords}, step {step}: loss {got}, one process on the whole batch: {want}"
            )
        for name, got in out["state"].items():
            assert name in want_state, f"{label}: rank {rank} holds {name!r}, which the dense model does not have"
            want = expected_local(name, want_state[name], coords, shape)
            assert_close(got, want, what=f"{label}: rank {rank} {coords}, {name} after {len(want_losses)} steps")
            seen.add(name)
        check_experts(rank, out["state"], want_state, coords, shape, label)
    missing = sorted(set(want_state) - seen)
    assert not missing, f"{label}: no rank holds {missing[:4]}{'...' if len(missing) > 4 else ''}"


def mesh_case(name: str):
    """(shape, cfg, options) of the named mesh."""
    shape, model, options = MESHES[name]
    return shape, MODELS[model], options
