"""Part 11: the given transformer trained on a mesh with your own parts (handouts/11-capstone.md).

    pytest tests/test_parallelize.py                        # world sizes 1, 2, 4
    pytest tests/test_parallelize.py --world-sizes 8        # tp2×cp2×dp2, pp2×tp2×dp2, fsdp8, pp2×ep2×dp2, dp2×pp2×cp2
    pytest tests/test_parallelize.py -m task11_1            # only the parallel block

Every mesh of tests/oracles/transformer.py's table whose size is the world size trains a tiny model
(4 blocks, 8 query and 4 key/value heads; an MoE every second block for the ep meshes) for two steps
in float64 (AdamW; plain SGD on the meshes where a gradient's scale must show), and every rank's loss
(last pipeline stage) and every parameter it holds are compared with one process training the dense
model on the whole batch, the parameters through the layout the docstrings promise (TP rows and
columns, experts by global index, exactly E/ep of them per ep rank); the caller's model must come back
untouched. The recorder shows one block's traffic (two all-gathers and two reduce-scatters over tp per
pass, ring neighbours over cp) and that the pipeline only talks to neighbouring stages. With
--comm-trace DIR every training step is a region of the test's trace, named after its mesh
(``python -m scripts.tools.trace DIR/<test>.json --summary "dp=2,pp=1,cp=2,tp=2 ddp step 0"``).
"""

from __future__ import annotations

import pytest
import torch

from cs336_systems.transformer import Transformer, TransformerConfig
from tests.harness import run_ranks
from tests.harness.bad_input import BadInput, assert_rejected_before_communicating, bad_input_params, bad_input_rank
from tests.harness.memory import storage_bytes
from tests.harness.recorder import CommRecorder, calls, format_events
from tests.oracles.transformer import (
    COLUMN_SHARDED,
    DENSE,
    MESHES,
    ROW_SHARDED,
    SEQ,
    SGD,
    batches,
    check_training,
    dense_training,
    full_shape,
    mesh_case,
    mesh_size,
    training_rank,
)

# Which meshes each task's test trains (the others' parts must work too: the whole step runs). At 2 and 4 ranks
# every feature meets the others it must compose with: contiguous CP beside zigzag, an MoE beside TP and CP,
# ZeRO-1 under a pipeline, HSDP (replica d·fsdp + f), FSDP over the dp group of a dp2×ep2 mesh, and the experts'
# dp average under DDP, DDP's bucketed dp average beside the tp sum (dp2×tp2, one microbatch). The table's other
# meshes (tp4, ZeRO-1 beside TP, GPipe) are the hidden tests'.
TASK_MESHES = {
    "task11_1": ["one", "tp2", "cp2", "cp2-contiguous", "ep2", "tp2-moe", "ep2xtp2", "ep2xcp2"],
    "task11_2": ["pp2", "fsdp2", "pp2xtp2", "pp2xcp2-interleaved", "pp2xep2", "dp2xpp2-zero1", "dp2xfsdp2-hsdp"],
    "task11_3": ["dp2", "cp2xtp2", "dp2xtp2", "dp2xep2", "dp2xep2-fsdp", "tp2xcp2xdp2", "pp2xtp2xdp2", "fsdp8",
                 "pp2xep2xdp2", "dp2xpp2xcp2"],
}  # fmt: skip


def _derived_mesh(world_size: int) -> dict[str, int]:
    """The composed test's mesh at a world size none of its named meshes has: tp 2 where 2 divides it (the
    model's 4 KV heads split), data parallelism over the rest (a batch of 2 rows per dp rank)."""
    return {"dp": world_size // 2, "tp": 2} if world_size % 2 == 0 else {"dp": world_size}


def _train_meshes(world_size: int, task: str) -> None:
    cases = [(n, *mesh_case(n), batches(mesh_case(n)[1])) for n in TASK_MESHES[task]
             if mesh_size(MESHES[n][0]) == world_size]  # fmt: skip
    if not cases and task == "task11_3":
        shape = _derived_mesh(world_size)
        cases = [("derived", shape, DENSE, {}, batches(DENSE, batch=2 * shape["dp"]))]
    if not cases:
        sizes = sorted({mesh_size(MESHES[n][0]) for n in TASK_MESHES[task]})
        pytest.skip(f"{task}'s meshes have {sizes} ranks, none has {world_size} (task11_3 trains one at any size)")
    for name, shape, cfg, options, data in cases:
        losses, state = dense_training(cfg, data, options=options)
        outs = run_ranks(world_size, training_rank, shape, cfg, data, options)
        check_training(outs, shape, losses, state, f"mesh {name} {full_shape(shape)} {options}")


@pytest.mark.task11_1
def test_parallel_blocks_train_like_one_process(world_size):
    """TP by heads and SwiGLU features, CP ring attention (zigzag and contiguous) with rotary positions, EP experts
    (beside TP and CP): equal to one process, each ep rank holding its E/ep experts, the caller's model untouched."""
    _train_meshes(world_size, "task11_1")


@pytest.mark.task11_2
def test_pipeline_stages_and_data_parallelism_train_like_one_process(world_size):
    """Stages of whole blocks (1F1B, interleaved), FSDP, ZeRO-1 under a pipeline, HSDP, with TP, CP, EP: as one
    process."""
    _train_meshes(world_size, "task11_2")


@pytest.mark.task11_3
def test_composed_meshes_train_like_one_process(world_size):
    """DP, CP×TP, DP×TP (DDP's buckets beside the tp sum), DP×EP (DDP, FSDP), 3-D meshes with PP, EP, FSDP (DP×TP at
    other sizes): every loss and parameter as one process."""
    _train_meshes(world_size, "task11_3")


@pytest.mark.task11_3
@pytest.mark.world_sizes(1, 2)
def test_an_odd_sequence_trains_without_cp(world_size):
    """Without CP (cp = 1) zigzag asks nothing of the sequence: 15 tokens train on dp (zigzag=True, the default)."""
    shape = {"dp": world_size}
    data = batches(DENSE, steps=1, batch=2 * world_size, seq=15)
    losses, state = dense_training(DENSE, data)
    outs = run_ranks(world_size, training_rank, shape, DENSE, data, {})
    check_training(outs, shape, losses, state, f"mesh dp{world_size} on sequences of 15 tokens (cp = 1)")


def kind(event) -> str:
    """all_reduce / all_gather / reduce_scatter / ... whatever API spelled the call."""
    op = event.op.lower().replace("_", "").removeprefix("pg.")
    for name, canonical in [("allreduce", "all_reduce"), ("allgather", "all_gather"),
                            ("reducescatter", "reduce_scatter")]:  # fmt: skip
        if name in op:
            return canonical
    return event.op


def block_traffic_rank(ctx, shape):
    M, P = ctx.load("mesh"), ctx.load("parallelize")
    mesh = M.ProcessMesh(full_shape(shape))
    block = Transformer(DENSE, seed=0).double().block0.to(ctx.device)
    pblock = P.ParallelBlock(block, tp_group=mesh.group("tp"), cp_group=mesh.group("cp"))
    local = SEQ // (mesh.size("cp") * mesh.size("tp"))
    x = torch.randn(2, local, DENSE.d_model, dtype=torch.float64, device=ctx.device, requires_grad=True)
    with CommRecorder() as rec:
        pblock(x).sum().backward()
    return {"events": calls(rec.events), "tp": mesh.ranks("tp"), "cp": mesh.ranks("cp")}


@pytest.mark.task11_1
@pytest.mark.world_sizes(2, 4)
def test_block_traffic_is_one_all_gather_and_one_reduce_scatter_per_sublayer_and_ring_neighbours(world_size):
    """One block, forward and backward: over tp 2 all-gathers + 2 reduce-scatters each way; over cp ring hops only."""
    shape = {"cp": 2, "tp": world_size // 2} if world_size == 4 else {"tp": 2}
    outs = run_ranks(world_size, block_traffic_rank, shape)
    for rank, out in enumerate(outs):
        log = format_events(out["events"])
        tp_ranks, cp_ranks = tuple(sorted(out["tp"])), out["cp"]
        for phase, backward in [("forward", False), ("backward", True)]:
            on_tp = [kind(e) for e in out["events"] if e.group_ranks == tp_ranks and e.in_backward == backward]
            # Forward: gather before each sub-layer, reduce-scatter after it. Backward runs the sub-layers in
            # reverse and each op's conjugate (an all-gather for a reduce-scatter): the same sequence.
            want = ["all_gather", "reduce_scatter"] * 2  # backward: reduce-scatter's conjugate first, in reverse
            assert on_tp == want, (
                f"rank {rank}, {phase} of one block on {shape}: over the tp group {list(tp_ranks)} expected one "
                f"all-gather and one reduce-scatter per sub-layer (attention, SwiGLU), {want}, got {on_tp} (an "
                f"all-reduce in backward: Part 4's ColumnParallelLinear kept? its copy_to_tp_region adds one; §11.1):"
                f"\n{log}"
            )
        me = cp_ranks.index(rank) if rank in cp_ranks else None
        neighbours = (
            {cp_ranks[(me + 1) % len(cp_ranks)], cp_ranks[(me - 1) % len(cp_ranks)]} if me is not None else set()
        )
        for e in out["events"]:
            if e.group_ranks == tp_ranks and len(tp_ranks) > 1:
                continue
            assert e.is_p2p and e.peer in neighbours, (
                f"rank {rank}: outside the tp collectives a block may only pass ring attention's blocks to its cp "
                f"neighbours {sorted(neighbours)}; it made {e.op} (peer {e.peer}, group {list(e.group_ranks)}):\n{log}"
            )


def pipeline_traffic_rank(ctx, shape, cfg, data, options):
    M, P = ctx.load("mesh"), ctx.load("parallelize")
    mesh = M.ProcessMesh(full_shape(shape))
    model = Transformer(cfg, seed=0).double().to(ctx.device)
    pt = P.parallelize(model, mesh, **options, lr=1e-2)
    x, y = data[0]
    with CommRecorder() as rec:
        pt.train_step(x.to(ctx.device), y.to(ctx.device))
    return {"events": calls(rec.events), "pp": mesh.ranks("pp"), "cp": mesh.ranks("cp"), "tp": mesh.ranks("tp")}


@pytest.mark.task11_2
@pytest.mark.world_sizes(2, 4)
def test_pipeline_sends_only_to_neighbouring_stages(world_size):
    """A training step's point-to-point messages go to the next or previous stage (or the cp ring's neighbours)."""
    name = "pp2xcp2-interleaved" if world_size == 4 else "pp2"
    shape, cfg, options = mesh_case(name)
    outs = run_ranks(world_size, pipeline_traffic_rank, shape, cfg, batches(cfg, steps=1), options)
    for rank, out in enumerate(outs):
        pp, cp = out["pp"], out["cp"]
        stage, c = pp.index(rank), cp.index(rank)
        allowed = {pp[s] for s in (stage - 1, stage + 1) if 0 <= s < len(pp)}
        allowed |= {cp[(c + 1) % len(cp)], cp[(c - 1) % len(cp)]} - {rank}
        p2p = [e for e in out["events"] if e.is_p2p]
        assert p2p, f"rank {rank} on {name}: the pipeline sent and received nothing:\n{format_events(out['events'])}"
        strangers = [e for e in p2p if e.peer not in allowed]
        assert not strangers, (
            f"rank {rank} (stage {stage}) on {name}: point-to-point messages may only go to neighbouring stages or "
            f"cp neighbours {sorted(allowed)}, got {[(e.op, e.peer) for e in strangers]}:\n"
            f"{format_events(out['events'])}"
        )
        sent = {e.peer for e in p2p if e.op in ("send", "isend") and e.peer in pp}
        want = {pp[s] for s in (stage - 1, stage + 1) if 0 <= s < len(pp)}
        assert sent == want, (
            f"rank {rank} (stage {stage}) on {name}: sent to stages' ranks {sorted(sent)}, expected {sorted(want)}"
        )


def memory_rank(ctx, shape, options):
    """Bytes this rank's ParallelTransformer holds after one step (parameters, grads, AdamW state)."""
    M, P = ctx.load("mesh"), ctx.load("parallelize")
    mesh = M.ProcessMesh(full_shape(shape))
    model = Transformer(DENSE, seed=0).double().to(ctx.device)
    dense = {p.untyped_storage().data_ptr() for p in model.parameters()}  # the caller's model is not the rank's
    pt = P.parallelize(model, mesh, **options, lr=1e-2)
    x, y = batches(DENSE, steps=1)[0]
    pt.train_step(x.to(ctx.device), y.to(ctx.device))
    return storage_bytes(pt, dense)


@pytest.mark.task11_2
@pytest.mark.world_sizes(2)
@pytest.mark.parametrize("name", ["tp2", "fsdp2"])
def test_each_rank_holds_its_share_of_the_model_states(world_size, name):
    """After a step a rank holds 1/2 of the sharded weights' parameters, grads and AdamW moments (tp2: the TP
    weights; fsdp2: every linear and embedding weight), the rest whole: within 10% of that, not the whole model."""
    shape, cfg, options = mesh_case(name)
    model = Transformer(cfg)
    sharded = sum(
        p.numel() for n, p in model.named_parameters()
        if (name == "fsdp2" and p.dim() == 2) or n.endswith(ROW_SHARDED + COLUMN_SHARDED)
    )  # fmt: skip
    whole = sum(p.numel() for p in model.parameters())
    want = 4 * 8 * (whole - sharded + sharded / 2)  # float64 parameter, grad, exp_avg, exp_avg_sq
    for rank, got in enumerate(run_ranks(world_size, memory_rank, shape, options)):
        assert got <= 1.1 * want, (
            f"rank {rank} on {name}: holds {got} bytes of tensors after a step; its share of the parameters, grads "
            f"and AdamW moments is {want:.0f} (the whole model's: {4 * 8 * whole}): are whole weights kept? (FSDP "
            f"shards only nn.Linear and nn.Embedding weights: a TP shard must be a plain nn.Linear, handout §11.1)"
        )


def recorded_step_rank(ctx, shape, data, options, cfg=DENSE):
    """Train ``data``'s steps on ``shape``, recording them: the training record plus the collectives and the dp
    group."""
    with CommRecorder() as rec:
        out = training_rank(ctx, shape, cfg, data, options)
    mesh = ctx.load("mesh").ProcessMesh(full_shape(shape))
    fsdp = mesh.ranks("fsdp") if "fsdp" in shape else [ctx.rank]
    return {**out, "events": calls(rec.events), "dp": mesh.ranks("dp"), "fsdp": fsdp}


@pytest.mark.task11_3
@pytest.mark.world_sizes(4)
@pytest.mark.parametrize("chunks", [1, 2], ids=["1f1b", "interleaved"])
def test_fsdp_under_a_pipeline_reduce_scatters_once_per_unit_per_step(world_size, chunks):
    """pp2×dp2 with FSDP and 4 microbatches (1F1B, or interleaved with 2 chunks per rank): each block is one FSDP
    unit, and gradient sync waits for each chunk's own last microbatch, so a step reduce-scatters once per block plus
    once per embedding/head weight over dp (not once per microbatch, not once per linear layer); trains like one
    process."""
    shape, options = {"dp": 2, "pp": 2}, {"data_parallel": "fsdp", "num_microbatches": 4}
    if chunks > 1:
        options |= {"schedule": "interleaved", "num_chunks": chunks}
    steps = 2 if chunks > 1 else 1  # interleaved: a chunk synced on a wrong microbatch shows in the second step
    data = batches(DENSE, steps=steps, batch=8)
    losses, state = dense_training(DENSE, data, options=options)
    outs = run_ranks(world_size, recorded_step_rank, shape, data, options)
    check_training(outs, shape, losses, state, f"mesh pp2×dp2 {options}")
    per_stage = DENSE.n_layers // 2 + 1  # this stage's blocks (one unit each), then embed (stage 0) or head.out
    for rank, out in enumerate(outs):
        dp = set(out["dp"])
        got = sum(kind(e) == "reduce_scatter" and set(e.group_ranks) == dp for e in out["events"])
        assert got == steps * per_stage, (
            f"rank {rank} (pp stage {out['coords']['pp']}): {steps} step(s) with 4 microbatches and {chunks} chunk(s) "
            f"per rank made {got} reduce-scatters over dp {sorted(dp)}; expected {per_stage} a step: one per block "
            f"(FSDP units), one for the embedding or head weight, each chunk on its own last microbatch only "
            f"(set_requires_gradient_sync, §11.2):\n{format_events(out['events'])}"
        )


@pytest.mark.task11_3
@pytest.mark.world_sizes(4)
def test_hsdp_under_microbatches_reduces_once_per_unit_per_step(world_size):
    """dp2×fsdp2 under "hsdp" with 2 microbatches: Part 7's HSDP with one unit per block and gradient sync deferred to
    the last microbatch, so a step reduce-scatters over fsdp once per block plus once per embedding and head weight,
    and all-reduces over dp once per parameter (each block's flat shard, the embedding's and head's shards, every
    norm), not once per microbatch or per linear layer; and it trains like one process."""
    shape, options = {"dp": 2, "fsdp": 2}, {"data_parallel": "hsdp", "num_microbatches": 2, **SGD}
    data = batches(DENSE, steps=1, batch=8)
    losses, state = dense_training(DENSE, data, options=options)
    outs = run_ranks(world_size, recorded_step_rank, shape, data, options)
    check_training(outs, shape, losses, state, f"mesh dp2×fsdp2 {options}")
    names = [n for n, _ in Transformer(DENSE).named_parameters()]
    per_block = sum(n.startswith("block0.") and n.endswith(ROW_SHARDED + COLUMN_SHARDED) for n in names)
    scattered = DENSE.n_layers + 2  # one per block (its unit), the embedding's weight, the head's output weight
    params = len(names) - DENSE.n_layers * (per_block - 1)  # a block's linear weights: one flat shard
    for rank, out in enumerate(outs):
        dp, fsdp = set(out["dp"]), set(out["fsdp"])
        got_rs = sum(kind(e) == "reduce_scatter" and set(e.group_ranks) == fsdp for e in out["events"])
        got_ar = sum(kind(e) == "all_reduce" and set(e.group_ranks) == dp and e.numel > 1 for e in out["events"])
        assert (got_rs, got_ar) == (scattered, params), (
            f"rank {rank}: one step with 2 microbatches made {got_rs} reduce-scatters over fsdp {sorted(fsdp)} and "
            f"{got_ar} gradient all-reduces over dp {sorted(dp)}; expected {scattered} (one per block: HSDP's units; "
            f"one for the embedding's and the head's weight) and {params} (one per parameter after wrapping), on "
            f"the last microbatch only (HSDP's set_requires_gradient_sync, §11.2, §7.2):\n"
            f"{format_events(out['events'])}"
        )


@pytest.mark.task11_3
@pytest.mark.world_sizes(2)
def test_ddp_all_reduces_over_dp_during_backward(world_size):
    """dp2 under "ddp", one microbatch: the gradients' dp all-reduces are Part 2's buckets, launched during backward
    (train_step's docstring), not one flat all-reduce after it; and the step still trains like one process."""
    shape = {"dp": 2}
    data = batches(DENSE, steps=1, batch=4)
    losses, state = dense_training(DENSE, data)
    outs = run_ranks(world_size, recorded_step_rank, shape, data, {})
    check_training(outs, shape, losses, state, "mesh dp2 (ddp)")
    for rank, out in enumerate(outs):
        dp = set(out["dp"])
        grads = [e for e in out["events"] if kind(e) == "all_reduce" and set(e.group_ranks) == dp and e.numel > 1]
        assert grads and all(e.in_backward for e in grads), (
            f"rank {rank}: the gradient all-reduces over dp {sorted(dp)} must start during backward (DDPBucketed's "
            f"hooks), got {[(e.numel, e.in_backward) for e in grads]}:\n{format_events(out['events'])}"
        )


@pytest.mark.task11_3
@pytest.mark.world_sizes(4)
def test_ddp_beside_ep_all_reduces_each_gradient_once_over_dp(world_size):
    """dp2×ep2 under "ddp", one microbatch: over dp a step all-reduces each gradient this rank holds once, the dense
    ones in DDPBucketed's buckets and the expert-parallel MoE's (router and this rank's experts) in
    ``all_reduce_moe_gradients`` (train_step's docstring): as many elements as the rank's parameters, not an MoE
    gradient twice; and it trains like one process."""
    shape, cfg, options = mesh_case("dp2xep2")
    data = batches(cfg, steps=1)
    losses, state = dense_training(cfg, data, options=options)
    outs = run_ranks(world_size, recorded_step_rank, shape, data, options, cfg)
    check_training(outs, shape, losses, state, f"mesh dp2×ep2 {options}")
    params = dict(Transformer(cfg).named_parameters())
    experts = sum(p.numel() for n, p in params.items() if ".experts." in n)
    held = sum(p.numel() for p in params.values()) - experts + experts // shape["ep"]  # E/ep experts each
    for rank, out in enumerate(outs):
        dp = set(out["dp"])
        grads = [e for e in out["events"] if kind(e) == "all_reduce" and set(e.group_ranks) == dp and e.numel > 1]
        got = sum(e.numel for e in grads)
        assert got == held, (
            f"rank {rank}: one step all-reduced {got} gradient elements over dp {sorted(dp)}; this rank holds {held} "
            f"parameter elements ({experts // shape['ep']} of them its experts'), each averaged over dp once: the "
            f"dense ones by DDPBucketed, the MoE's by all_reduce_moe_gradients alone (more: an MoE gradient "
            f"all-reduced twice, or a bucket holding the MoE's parameters? §11.3):\n{format_events(out['events'])}"
        )


# -- bad input -------------------------------------------------------------------------------------

_KV1 = TransformerConfig(vocab_size=16, d_model=16, n_layers=2, n_heads=4, n_kv_heads=1, d_ff=16)
_LAYERS3 = TransformerConfig(vocab_size=16, d_model=16, n_layers=3, n_heads=2, n_kv_heads=2, d_ff=16)
_LAYERS6 = TransformerConfig(vocab_size=16, d_model=16, n_layers=6, n_heads=2, n_kv_heads=2, d_ff=16)
_MOE4 = TransformerConfig(vocab_size=16, d_model=16, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=16, moe_every=1,
                          num_experts=4, top_k=1)  # fmt: skip
_EXPERTS3 = TransformerConfig(vocab_size=16, d_model=16, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=16, moe_every=1,
                              num_experts=3, top_k=1)  # fmt: skip


def _mesh(axis: str):
    """An arrange step: a mesh with all the world on ``axis``."""
    return lambda P, ctx: ctx.load("mesh").ProcessMesh(full_shape({axis: ctx.world_size}))


def _trainer(axis: str, cfg: TransformerConfig = DENSE, **options):
    """An arrange step: a ParallelTransformer of the tiny model ``cfg`` with all the world on ``axis``."""

    def arrange(P, ctx):
        mesh = ctx.load("mesh").ProcessMesh(full_shape({axis: ctx.world_size}))
        return P.parallelize(Transformer(cfg, seed=0).to(ctx.device), mesh, **options)

    return arrange


def _tokens(pt, batch: int, seq: int) -> torch.Tensor:
    """Token ids on the device of the ParallelTransformer ``pt``'s parameters."""
    return torch.zeros(batch, seq, dtype=torch.int64, device=next(pt.chunks[0].parameters()).device)


BAD_INPUT = [
    BadInput("tp-does-not-divide-kv-heads", lambda P, mesh: P.parallelize(Transformer(_KV1), mesh), "ValueError",
             names="mesh", task="task11_1", arrange=_mesh("tp")),
    BadInput("pp-does-not-divide-layers", lambda P, mesh: P.parallelize(Transformer(_LAYERS3), mesh), "ValueError",
             names="mesh", task="task11_2", arrange=_mesh("pp")),
    BadInput("ep-does-not-divide-experts", lambda P, mesh: P.parallelize(Transformer(_EXPERTS3), mesh), "ValueError",
             names="mesh", task="task11_2", arrange=lambda P, ctx: ctx.load("mesh").ProcessMesh(
                 {"dp": 1, "pp": 1, "ep": ctx.world_size, "cp": 1, "tp": 1})),
    BadInput("pp-times-chunks-does-not-divide-layers",
             lambda P, mesh: P.parallelize(Transformer(_LAYERS6), mesh, num_microbatches=2, schedule="interleaved",
                                           num_chunks=2),
             "ValueError", names="num_chunks", task="task11_2", arrange=_mesh("pp")),
    BadInput("model-not-a-transformer", lambda P, mesh: P.parallelize(torch.nn.Linear(2, 2), mesh), "TypeError",
             names="model", task="task11_2", arrange=_mesh("dp")),
    BadInput("unknown-schedule", lambda P, mesh: P.ParallelTransformer(Transformer(DENSE), mesh, schedule="zb-v"),
             "ValueError", names="schedule", task="task11_2", arrange=_mesh("pp")),
    BadInput("batch-not-divisible-by-dp", lambda P, pt: pt.train_step(_tokens(pt, 3, SEQ), _tokens(pt, 3, SEQ)),
             "ValueError", names="inputs", task="task11_3", arrange=_trainer("dp")),
    BadInput("batch-not-divisible-by-ep", lambda P, pt: pt.train_step(_tokens(pt, 3, SEQ), _tokens(pt, 3, SEQ)),
             "ValueError", names="inputs", task="task11_3", arrange=_trainer("ep", _MOE4)),
    BadInput("batch-not-divisible-by-fsdp", lambda P, pt: pt.train_step(_tokens(pt, 3, SEQ), _tokens(pt, 3, SEQ)),
             "ValueError", names="inputs", task="task11_3", arrange=_trainer("fsdp", data_parallel="hsdp")),
    BadInput("batch-not-divisible-by-dp-times-microbatches",
             lambda P, pt: pt.train_step(_tokens(pt, 2, SEQ), _tokens(pt, 2, SEQ)),
             "ValueError", names="inputs", task="task11_3", arrange=_trainer("dp", num_microbatches=2)),
    BadInput("sequence-not-divisible-by-tp", lambda P, pt: pt.train_step(_tokens(pt, 2, 5), _tokens(pt, 2, 5)),
             "ValueError", names="inputs", task="task11_3", arrange=_trainer("tp")),
    BadInput("sequence-not-divisible-by-2cp-zigzag",
             lambda P, pt: pt.train_step(_tokens(pt, 4, 6), _tokens(pt, 4, 6)),
             "ValueError", names="inputs", task="task11_3", arrange=_trainer("cp")),
    BadInput("targets-shape-not-inputs", lambda P, pt: pt.train_step(_tokens(pt, 4, SEQ), _tokens(pt, 4, SEQ // 2)),
             "ValueError", names="targets", task="task11_3", arrange=_trainer("tp")),
]  # fmt: skip


@pytest.mark.world_sizes(2)
@pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
def test_bad_input_raises_on_every_rank_before_communicating(world_size, case):
    """A mesh that does not divide heads, layers (pp·num_chunks) or experts; a batch dp·fsdp·ep·microbatches does not
    divide, a sequence cp·tp (or 2·cp, zigzag) does not: named, on every rank, before any message."""
    assert_rejected_before_communicating(run_ranks(world_size, bad_input_rank, "parallelize", case), case)
