"""The Part 11 oracles: one process training the given transformer, and a rank training it on a mesh.

    from tests.oracles.transformer import MESHES, check_training, dense_training, mesh_case, training_rank

``dense_training`` trains ``transformer.Transformer`` in one process on the whole batch (AdamW, float64)
and returns the loss of every step and the final parameters. ``training_rank`` builds a ``ProcessMesh``,
``parallelize``s the same model on it and trains it on the same batches; ``expected_local`` is the slice
of a dense parameter a rank holds (the layout the docstrings of ``parallelize.py`` promise), and
``check_training`` compares every rank with the oracle. ``MESHES``: the table of named meshes.

Used by tests/test_parallelize.py, tests/staff/hidden/test_parallelize_hidden.py and scripts/tools/train.py.
"""

from __future__ import annotations

import torch

from cs336_systems.transformer import Transformer, TransformerConfig, lm_loss
from tests.harness import assert_close

# Tiny models: two blocks per stage at pp2 x 2 chunks, heads and kv heads for tp up to 4.
DENSE = TransformerConfig(vocab_size=16, d_model=32, n_layers=4, n_heads=8, n_kv_heads=4, d_ff=32)
MOE = TransformerConfig(vocab_size=16, d_model=32, n_layers=4, n_heads=8, n_kv_heads=4, d_ff=32, moe_every=2,
                        num_experts=4, top_k=2)  # fmt: skip
MODELS = {"dense": DENSE, "moe": MOE}
BATCH, SEQ, STEPS = 8, 16, 2
OPTIMIZER = {"lr": 1e-2, "weight_decay": 0.1}

# name -> (mesh shape, model, parallelize options). Axes absent from a shape have size 1.
MESHES: dict[str, tuple[dict[str, int], str, dict]] = {
    "one": ({}, "dense", {}),
    "dp2": ({"dp": 2}, "dense", {}),
    "tp2": ({"tp": 2}, "dense", {}),
    "cp2": ({"cp": 2}, "dense", {}),
    "pp2": ({"pp": 2}, "dense", {"num_microbatches": 2}),
    "fsdp2": ({"dp": 2}, "dense", {"data_parallel": "fsdp"}),
    "ep2": ({"ep": 2}, "moe", {}),
    "tp4": ({"tp": 4}, "dense", {}),
    "cp2xtp2": ({"cp": 2, "tp": 2}, "dense", {}),
    "dp2xtp2-zero1": ({"dp": 2, "tp": 2}, "dense", {"data_parallel": "zero1"}),
    "pp2xtp2": ({"pp": 2, "tp": 2}, "dense", {"num_microbatches": 2}),
    "pp2xcp2-interleaved": ({"pp": 2, "cp": 2}, "dense", {"num_microbatches": 2, "schedule": "interleaved",
                                                          "num_chunks": 2}),
    "dp2xpp2-gpipe": ({"dp": 2, "pp": 2}, "dense", {"num_microbatches": 2, "schedule": "gpipe"}),
    "ep2xtp2": ({"ep": 2, "tp": 2}, "moe", {}),
    "pp2xep2": ({"pp": 2, "ep": 2}, "moe", {"num_microbatches": 2}),
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


def dense_training(cfg: TransformerConfig, data, seed: int = 0) -> tuple[list[float], dict[str, torch.Tensor]]:
    """(loss of every step, final parameters): AdamW on the whole batch, float64, one process."""
    model = Transformer(cfg, seed=seed).double()
    opt = torch.optim.AdamW(model.parameters(), **OPTIMIZER)
    losses = []
    for inputs, targets in data:
        opt.zero_grad(set_to_none=True)
        loss = lm_loss(model(inputs), targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}


def training_rank(ctx, shape, cfg, data, options, seed: int = 0):
    """Train the model parallelized on ``shape``; returns the mesh coordinates, each step's loss (None
    off the last stage) and ``local_state_dict()`` after the last step."""
    M, P = ctx.load("mesh"), ctx.load("parallelize")
    mesh = M.ProcessMesh(full_shape(shape))
    model = Transformer(cfg, seed=seed).double().to(ctx.device)
    pt = P.parallelize(model, mesh, **options, **OPTIMIZER)
    losses = [pt.train_step(x.to(ctx.device), y.to(ctx.device)) for x, y in data]
    return {"coords": mesh.coords(), "losses": losses, "state": pt.local_state_dict()}


def expected_local(name: str, full: torch.Tensor, coords: dict[str, int], shape: dict[str, int]) -> torch.Tensor:
    """The slice of dense parameter ``name`` the rank at ``coords`` holds: TP rows or columns, else whole."""
    tp, t = shape.get("tp", 1), coords.get("tp", 0)
    if name.endswith(ROW_SHARDED):
        return full.chunk(tp, dim=0)[t]
    if name.endswith(COLUMN_SHARDED):
        return full.chunk(tp, dim=1)[t]
    return full


def check_training(outs, shape, want_losses, want_state, label: str) -> None:
    """Every rank's losses (last stage) and parameters against the oracle; every parameter held somewhere."""
    seen = set()
    for rank, out in enumerate(outs):
        coords = out["coords"]
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
    missing = sorted(set(want_state) - seen)
    assert not missing, f"{label}: no rank holds {missing[:4]}{'...' if len(missing) > 4 else ''}"


def mesh_case(name: str):
    """(shape, cfg, options) of the named mesh."""
    shape, model, options = MESHES[name]
    return shape, MODELS[model], options
