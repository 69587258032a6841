"""Staff mutants of Part 11 (the capstone, reference_solutions/parallelize.py): what the public tests must catch.

Collected by table.py (``_collect_area_tables``); run one with ``pytest tests/staff/mutants -k <id>``.
"""

from __future__ import annotations

from functools import partial

from tests.staff.mutants.table import RANK, Check, Mutant

# Tiny models, but a rank may spend seconds importing torch._dynamo (AdamW) on a loaded machine.
P11 = partial(Check, "tests/test_parallelize.py", deadline=60, within=300, names=RANK)
WRONG = ("one process on the whole batch", "elements differ")  # a loss or a parameter differs
BLOCKS, STAGES, COMPOSED = "parallel_blocks", "pipeline_stages", "composed_meshes"
TRAFFIC = "block_traffic"
BAD = "bad_input"
FSDP_UNDER = "fsdp_under_a_pipeline"
BAD_BATCH = ("returned normally", "communicated", "expected ValueError")  # accepted: trains, or fails after a message

HSDP_MICRO = "hsdp_under_microbatches_reduces_once_per_step"  # tests/test_mesh.py, Task 7.2

MUTANTS = [
    Mutant(
        "parallelize_rope_local_positions",
        "parallelize",
        "under CP each rank rotates its tokens by their local positions 0..s-1, not by their global ones",
        old="positions = context_parallel.shard_sequence(whole, self.cp_group, zigzag=self.zigzag, dim=0)",
        new="positions = whole[:s]",
        caught_by=P11(BLOCKS, WRONG, world_sizes="2"),
    ),
    Mutant(
        "parallelize_batch_contiguous_attention_zigzag",
        "parallelize",
        "the batch is cut into contiguous blocks while attention assumes the zigzag layout",
        old='t = context_parallel.shard_sequence(t, self.mesh.group("cp"), zigzag=self.zigzag, dim=1)',
        new='t = context_parallel.shard_sequence(t, self.mesh.group("cp"), zigzag=False, dim=1)',
        caught_by=P11(BLOCKS, WRONG, world_sizes="2"),
    ),
    Mutant(
        "parallelize_ring_not_causal",
        "parallelize",
        "ring attention is called without causal=True: every token sees the future",
        old="causal=True, zigzag=self.zigzag, group=self.cp_group)",
        new="causal=False, zigzag=self.zigzag, group=self.cp_group)",
        caught_by=P11(BLOCKS, WRONG, world_sizes="2"),
    ),
    Mutant(
        "parallelize_sdpa_not_causal",
        "parallelize",
        "without CP, attention forgets the causal mask",
        old="out = F.scaled_dot_product_attention(q, k, v, is_causal=True)",
        new="out = F.scaled_dot_product_attention(q, k, v)",
        caught_by=P11(BLOCKS, WRONG, world_sizes="1"),
    ),
    Mutant(
        "parallelize_gqa_repeat_not_interleave",
        "parallelize",
        "kv heads repeated as a block (kv head h % K) instead of interleaved (h // group)",
        old="k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (b, H/T, s, hd)",
        new="k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)",
        caught_by=P11(BLOCKS, WRONG, world_sizes="1"),
    ),
    Mutant(
        "parallelize_swiglu_silu_on_up",
        "parallelize",
        "SiLU applied to the up projection instead of the gate",
        old="return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))",
        new="return self.w_down(self.w_gate(x) * F.silu(self.w_up(x)))",
        caught_by=P11(BLOCKS, WRONG, world_sizes="2"),
    ),
    Mutant(
        "parallelize_no_tp_sum_of_replicated_grads",
        "parallelize",
        "norms, embedding and head saw only this rank's tokens but their grads are not summed over tp",
        old="if self.tp > 1 and self._tp_summed:",
        new="if False:",
        caught_by=P11(BLOCKS, WRONG, world_sizes="2"),
    ),
    Mutant(
        "parallelize_loss_not_divided_by_tp",
        "parallelize",
        "each tp rank's loss is the full mean of its tokens: TP-sharded weights get tp times their gradient",
        old="lambda logits, targets: lm_loss(logits, targets) / tp,",
        new="lambda logits, targets: lm_loss(logits, targets),",
        caught_by=P11(BLOCKS, WRONG, world_sizes="2"),
    ),
    Mutant(
        "parallelize_no_cp_average",
        "parallelize",
        "gradients are not averaged over cp (each cp rank steps with the gradient of its own tokens' path)",
        old='axes = ["ep", "cp"] + (["dp"] if not sharded else [])',
        new='axes = ["ep"] + (["dp"] if not sharded else [])',
        caught_by=P11(BLOCKS, WRONG, world_sizes="2"),
    ),
    Mutant(
        "parallelize_no_dp_average",
        "parallelize",
        "DDP's gradient averaging over dp is forgotten (the flat all-reduce DDP keeps under microbatches)",
        old='axes = ["ep", "cp"] + (["dp"] if not sharded else [])',
        new='axes = ["ep", "cp"]',
        caught_by=Check(
            "tests/staff/hidden/test_parallelize_hidden.py",
            "oracle_meshes and dp2xpp2-gpipe",
            WRONG,
            names=RANK,
            deadline=60,
            within=300,
        ),
    ),
    Mutant(
        "parallelize_ep_ranks_same_rows",
        "parallelize",
        "ep ranks are not counted as data replicas: both train on the same rows",
        old='replica = dp_rank * self.ep + (self.mesh.rank("ep") if self.ep > 1 else 0)',
        new="replica = dp_rank * self.ep",
        caught_by=P11(BLOCKS, WRONG, world_sizes="2"),
    ),
    Mutant(
        "parallelize_local_expert_names",
        "parallelize",
        "local_state_dict names expert i of ep rank q as global expert i",
        old='return f"{head}{first + int(index)}.{rest}"',
        new='return f"{head}{int(index)}.{rest}"',
        caught_by=P11(BLOCKS, ("elements differ", "no rank holds"), world_sizes="2"),
    ),
    Mutant(
        "parallelize_tp_tokens_first_chunk",
        "parallelize",
        "every tp rank takes the first 1/tp of the cp block's tokens",
        old='out.append(t.chunk(self.tp, dim=1)[self.mesh.rank("tp")].contiguous())',
        new="out.append(t.chunk(self.tp, dim=1)[0].contiguous())",
        caught_by=P11(BLOCKS, WRONG, world_sizes="2"),
    ),
    Mutant(
        "parallelize_loss_not_summed_over_tp",
        "parallelize",
        "the reported loss is one tp rank's loss / tp, not summed over tp",
        old='if self.tp > 1:\n            dist.all_reduce(t, group=self.mesh.group("tp"))',
        new='if False:\n            dist.all_reduce(t, group=self.mesh.group("tp"))',
        caught_by=P11(BLOCKS, "one process on the whole batch", world_sizes="2"),
    ),
    Mutant(
        "parallelize_interleaved_contiguous_chunks",
        "parallelize",
        "interleaving: rank s keeps chunks s*v .. s*v+v-1 instead of s, s+p, ...: the blocks run out of order",
        old="g = stage + k * self.pp",
        new="g = stage * num_chunks + k",
        caught_by=P11(STAGES, WRONG, world_sizes="4"),
    ),
    Mutant(
        "parallelize_all_reduce_instead_of_reduce_scatter",
        "parallelize",
        "the SwiGLU's output is all-reduced and cut instead of reduce-scattered (more bytes; wrong backward)",
        old="h = h + tensor_parallel.reduce_scatter_to_sp_region(self.ffn(f), tp)",
        new=(
            "h = h + tensor_parallel.reduce_from_tp_region(self.ffn(f), tp).chunk(dist.get_world_size(tp))"
            "[dist.get_rank(tp)]"
        ),
        caught_by=(
            P11(TRAFFIC, "one all-gather and one reduce-scatter per sub-layer", world_sizes="2"),
            P11(BLOCKS, WRONG, world_sizes="2"),
        ),
    ),
    Mutant(
        "parallelize_no_kv_heads_check",
        "parallelize",
        "the mesh is not checked against n_kv_heads: the error comes later and does not name the mesh",
        old='for name, n in [("n_heads", cfg.n_heads), ("n_kv_heads", cfg.n_kv_heads), ("d_ff", cfg.d_ff)]:',
        new='for name, n in [("n_heads", cfg.n_heads), ("d_ff", cfg.d_ff)]:',
        caught_by=P11(f"{BAD} and kv", "should name the argument 'mesh'", world_sizes="2"),
    ),
    Mutant(
        "parallelize_uneven_stages_accepted",
        "parallelize",
        "pp not dividing n_layers is accepted: stages of unequal depth",
        old="if cfg.n_layers % (pt.pp * num_chunks):",
        new="if False:",
        caught_by=P11(f"{BAD} and layers", "returned normally", world_sizes="2"),
    ),
    Mutant(
        "parallelize_pipeline_skips_a_stage",
        "parallelize",
        "the last stage's chunk is built without the blocks of its piece (only the head)",
        old="layers = list(pieces[g].named_children())",
        new="layers = list(pieces[g].named_children()) if g < total - 1 else []",
        caught_by=P11(STAGES, ("no rank holds", "one process on the whole batch"), world_sizes="2"),
    ),
    Mutant(
        "accounting_moe_experts_without_biases",
        "accounting",
        "the experts of an MoE block counted as two bias-free matrices (2hf), not models.MLP's 2hf + f + h",
        old="moe_blocks * (h * e + e * (2 * h * f + f + h))",
        new="moe_blocks * (h * e + e * 2 * h * f)",
        caught_by=Check(
            "tests/test_parallelize_accounting.py", "num_params", "parameters, got", world_sizes="1", deadline=30
        ),
    ),
    Mutant(
        "accounting_tp_bytes_forward_only",
        "accounting",
        "the tp traffic counts the forward pass only: 4 (t-1)/t A per block and microbatch",
        old='"tp": 8 * (tp - 1) / tp * act * blocks * m,',
        new='"tp": 4 * (tp - 1) / tp * act * blocks * m,',
        caught_by=Check(
            "tests/test_parallelize_accounting.py",
            "capstone_bytes",
            "capstone_bytes_per_rank['tp']",
            world_sizes="1",
            deadline=30,
        ),
    ),
    Mutant(
        "parallelize_fsdp_never_wraps",
        "parallelize",
        "data_parallel='fsdp' keeps every weight whole on every rank (and so never averages over dp)",
        old='self.wrapped = [fsdp.FSDP(c, group=groups["dp"], units=_units(c)) for c in chunks]',
        new="self.wrapped = chunks",
        caught_by=P11("share and fsdp2", "its share of the parameters", world_sizes="2"),
    ),
    Mutant(
        "parallelize_data_axes_sum_not_mean",
        "parallelize",
        "gradients summed over dp, ep and cp, not averaged: a constant factor AdamW nearly ignores (eps does not)",
        old="ddp.all_reduce_gradients_flat(dense, group=self.mesh.group(axis))",
        new=(
            "ddp.all_reduce_gradients_flat(dense, group=self.mesh.group(axis)); "
            "[p.grad.mul_(self.mesh.size(axis)) for p in dense.parameters()]"
        ),
        caught_by=P11(COMPOSED, WRONG, world_sizes="4"),  # dp2×ep2, cp2×tp2 (dp2's average is DDPBucketed's)
    ),
    # -- issue 44: what no public test caught, or only a hidden one (each killed by a public test now) --------------
    Mutant(
        "parallelize_experts_not_averaged_over_dp_under_ddp",
        "parallelize",
        "under DDP the expert-parallel MoE's gradients are averaged over ep only, never over dp",
        old='expert_parallel.all_reduce_moe_gradients(moe, None if sharded or self.dp == 1 else self.mesh.group("dp"))',
        new="expert_parallel.all_reduce_moe_gradients(moe, None)",
        caught_by=P11(COMPOSED, WRONG, world_sizes="4"),
    ),
    Mutant(
        "parallelize_layers_checked_against_pp_only",
        "parallelize",
        "n_layers is checked against pp, not pp·num_chunks: 6 blocks in 4 interleaved chunks of unequal depth",
        old="if cfg.n_layers % (pt.pp * num_chunks):",
        new="if cfg.n_layers % pt.pp:",
        caught_by=P11(f"{BAD} and chunks", "returned normally", world_sizes="2"),
    ),
    Mutant(
        "parallelize_batch_check_ignores_ep",
        "parallelize",
        "the batch is checked against dp·fsdp·num_microbatches, not ep: ep2 with 3 rows trains on uneven rows",
        old="if B % (replicas * self.num_microbatches):",
        new="if B % (self.dp * self.fsdp * self.num_microbatches):",
        caught_by=P11(f"{BAD} and ep", BAD_BATCH, world_sizes="2"),
    ),
    Mutant(
        "parallelize_ep_not_applied",
        "parallelize",
        "the MoE is copied whole on every ep rank (no ExpertParallelMoE): losses and parameters still match",
        old="elif ep_group is not None:",
        new="elif False:",
        caught_by=P11(BLOCKS, "holds experts", world_sizes="2"),
    ),
    Mutant(
        "parallelize_trains_the_callers_embedding",
        "parallelize",
        "the first chunk takes the caller's model.embed itself, not a copy: train_step changes the caller's model",
        old='layers.insert(0, ("embed", _copy(model.embed)))',
        new='layers.insert(0, ("embed", model.embed))',
        caught_by=P11(BLOCKS, "changed the caller's model", world_sizes="1"),
    ),
    Mutant(
        "parallelize_zero1_skips_the_dp_average",
        "parallelize",
        "with ZeRO-1 the gradients are not averaged over dp (as if the sharded optimizer did it, as FSDP does)",
        old='sharded = self.data_parallel in ("fsdp", "hsdp")',
        new='sharded = self.data_parallel in ("fsdp", "hsdp", "zero1")',
        caught_by=P11(STAGES, WRONG, world_sizes="4"),
    ),
    Mutant(
        "parallelize_zero1_over_the_world",
        "parallelize",
        "ZeRO-1's optimizer shards over the whole world, not the dp group: stages swap parameters they do not hold",
        old='self.optimizer = sharded_optimizer.ShardedOptimizer(params, optimizer_cls, group=groups["dp"],',
        new="self.optimizer = sharded_optimizer.ShardedOptimizer(params, optimizer_cls, group=None,",
        caught_by=P11(STAGES, ("one process on the whole batch", "elements differ", "Error", "hung"), world_sizes="4"),
    ),
    Mutant(
        "parallelize_hsdp_fsdp_ranks_same_rows",
        "parallelize",
        "under HSDP the fsdp ranks are not counted as data replicas: every f of (dp=d, fsdp=f) trains the same rows",
        old='dp_rank = self.mesh.rank("dp") * self.fsdp + (self.mesh.rank("fsdp") if self.fsdp > 1 else 0)',
        new='dp_rank = self.mesh.rank("dp") * self.fsdp',
        caught_by=P11(STAGES, WRONG, world_sizes="4"),
    ),
    Mutant(
        "parallelize_moe_not_summed_over_tp",
        "parallelize",
        "an MoE layer runs on this tp rank's tokens only, but its gradients are not summed over tp",
        old="kinds = (nn.Embedding, RMSNorm, LMHead, MoE, expert_parallel.ExpertParallelMoE)",
        new="kinds = (nn.Embedding, RMSNorm, LMHead)",
        caught_by=P11(BLOCKS, WRONG, world_sizes="2"),
    ),
    Mutant(
        "parallelize_experts_not_averaged_over_cp",
        "parallelize",
        "an expert-parallel MoE's gradients are not averaged over cp (the dense ones are)",
        old='if self.cp > 1:\n                ddp.all_reduce_gradients_flat(moe, group=self.mesh.group("cp"))',
        new='if False:\n                ddp.all_reduce_gradients_flat(moe, group=self.mesh.group("cp"))',
        caught_by=P11(BLOCKS, WRONG, world_sizes="4"),
    ),
    Mutant(
        "parallelize_experts_averaged_over_dp_under_fsdp",
        "parallelize",
        "under FSDP the MoE's gradients (FSDP shards, already averaged over dp) are all-reduced over dp again",
        old="None if sharded or self.dp == 1 else",
        new="None if self.dp == 1 else",
        caught_by=P11(COMPOSED, ("one process on the whole batch", "elements differ", "Error"), world_sizes="4"),
    ),
    Mutant(
        "parallelize_attention_ignores_zigzag_false",
        "parallelize",
        "ParallelAttention ignores zigzag=False: contiguous tokens rotated and masked as zigzag chunks",
        old="self.zigzag = bool(zigzag) and self.cp > 1\n        self.wq, self.wk, self.wv",
        new="self.zigzag = self.cp > 1\n        self.wq, self.wk, self.wv",
        caught_by=P11(BLOCKS, WRONG, world_sizes="2"),
    ),
    Mutant(
        "parallelize_fsdp_over_the_world",
        "parallelize",
        "FSDP shards over the whole world, not the dp group: dp2×ep2 averages shards across ep ranks",
        old='self.wrapped = [fsdp.FSDP(c, group=groups["dp"], units=_units(c)) for c in chunks]',
        new="self.wrapped = [fsdp.FSDP(c, units=_units(c)) for c in chunks]",
        caught_by=P11(COMPOSED, ("one process on the whole batch", "elements differ", "Error"), world_sizes="4"),
    ),
    Mutant(
        "accounting_capstone_seq_against_cp_only",
        "accounting",
        "capstone_bytes_per_rank checks seq against cp only: seq 4 on cp 2 × tp 4 returns numbers",
        old="if s % (cp * tp):",
        new="if s % cp:",
        caught_by=Check(
            "tests/test_parallelize_accounting.py",
            "bad_input and capstone and seq",
            "returned normally",
            world_sizes="1",
            deadline=30,
        ),
    ),
    Mutant(
        "accounting_capstone_seq_not_checked_for_zigzag",
        "accounting",
        "capstone_bytes_per_rank accepts a seq that 2·cp zigzag chunks do not divide (seq 6 on cp 2)",
        old="if cp > 1 and s % (2 * cp):",
        new="if False:",
        caught_by=Check(
            "tests/test_parallelize_accounting.py",
            "bad_input and capstone and seq",
            "returned normally",
            world_sizes="1",
            deadline=30,
        ),
    ),
    Mutant(
        "parallelize_zigzag_rule_at_cp1",
        "parallelize",
        "the trainer keeps zigzag on at cp = 1, so it demands a sequence divisible by 2 where no ring runs",
        old="self.zigzag = bool(zigzag) and self.cp > 1\n        groups = ",
        new="self.zigzag = bool(zigzag)\n        groups = ",
        caught_by=P11("odd_sequence", "must be divisible", world_sizes="1"),
    ),
    Mutant(
        "parallelize_fsdp_syncs_every_microbatch",
        "parallelize",
        "FSDP under a pipeline reduce-scatters every microbatch (sync never deferred): right values, 4x the traffic",
        old="deferred = self._deferred",
        new="deferred = False",
        caught_by=P11(FSDP_UNDER, "reduce-scatters over dp", world_sizes="4"),
    ),
    Mutant(
        "parallelize_fsdp_layer_by_layer",
        "parallelize",
        "FSDP shards layer by layer, without units: one reduce-scatter per linear layer, not per block",
        old='fsdp.FSDP(c, group=groups["dp"], units=_units(c))',
        new='fsdp.FSDP(c, group=groups["dp"])',
        caught_by=P11(FSDP_UNDER, "reduce-scatters over dp", world_sizes="4"),
    ),
    Mutant(
        "parallelize_fsdp_syncs_first_microbatch",
        "parallelize",
        "gradient sync turned on for the first microbatch, not the last: the later ones' grads are never reduced",
        old="last = self._forwards[i] == self.num_microbatches - 1",
        new="last = self._forwards[i] == 0",
        caught_by=P11(FSDP_UNDER, WRONG, world_sizes="4"),
    ),
    Mutant(
        "parallelize_ddp_all_reduces_after_backward",
        "parallelize",
        "under ddp the dp average stays one flat all-reduce after backward: right values, no overlap",
        old='if self.data_parallel != "ddp" or self.num_microbatches > 1 or self.dp == 1:',
        new="if True:",
        caught_by=P11("ddp_all_reduces_over_dp_during_backward", "must start during backward", world_sizes="2"),
    ),
    # -- issue 54: what only a world size of 8 caught, or nothing --------------------------------------------------
    Mutant(
        "parallelize_ddp_buckets_hold_the_moe",
        "parallelize",
        "under ddp DDPBucketed also averages the expert-parallel MoE's grads over dp, which all_reduce_moe_gradients "
        "averages over dp again: right values, the MoE's dp traffic doubled",
        old="dense = _Params([p for p in params if id(p) not in moe_ids])\n        return ddp.DDPBucketed(",
        new="dense = _Params(params)\n        return ddp.DDPBucketed(",
        caught_by=P11("ddp_beside_ep", "each averaged over dp once", world_sizes="4"),
    ),
    Mutant(
        "parallelize_fsdp_forwards_counted_per_rank",
        "parallelize",
        "FSDP under microbatches counts forwards per rank, not per chunk: with 2 interleaved chunks a chunk syncs on a "
        "wrong microbatch, the other never",
        old="last = self._forwards[i] == self.num_microbatches - 1\n        self._forwards[i] += 1",
        new="last = self._forwards[0] == self.num_microbatches - 1\n        self._forwards[0] += 1",
        caught_by=P11(f"{FSDP_UNDER} and interleaved", (*WRONG, "reduce-scatters over dp"), world_sizes="4"),
    ),
    Mutant(
        "parallelize_ddp_buckets_collected_after_tp_sum",
        "parallelize",
        "under ddp the bucketed dp averages are collected after the tp sum: they overwrite the summed grads",
        old=(
            "            self._bucketed.finish_gradient_synchronization()\n"
            '            axes.remove("dp")\n'
            "        params = [p for c in self.chunks for p in c.parameters()]\n"
            "        for p in params:  # an expert no token reached, or a chunk that saw no loss term: "
            "zeros, same layout\n"
            "            if p.grad is None:\n"
            "                p.grad = torch.zeros_like(p)\n"
            "        if self.tp > 1 and self._tp_summed:\n"
            "            flat = torch.cat([p.grad.reshape(-1) for p in self._tp_summed])\n"
            '            dist.all_reduce(flat, group=self.mesh.group("tp"))\n'
            "            for p, g in zip(self._tp_summed, flat.split([p.numel() for p in self._tp_summed])):\n"
            "                p.grad.copy_(g.view_as(p))\n"
        ),
        new=(
            '            axes.remove("dp")\n'
            "        params = [p for c in self.chunks for p in c.parameters()]\n"
            "        for p in params:\n"
            "            if p.grad is None:\n"
            "                p.grad = torch.zeros_like(p)\n"
            "        if self.tp > 1 and self._tp_summed:\n"
            "            flat = torch.cat([p.grad.reshape(-1) for p in self._tp_summed])\n"
            '            dist.all_reduce(flat, group=self.mesh.group("tp"))\n'
            "            for p, g in zip(self._tp_summed, flat.split([p.numel() for p in self._tp_summed])):\n"
            "                p.grad.copy_(g.view_as(p))\n"
            "        if self._bucketed is not None:  # collected last: its copy into .grad overwrites the tp sum\n"
            "            self._bucketed.finish_gradient_synchronization()\n"
        ),
        caught_by=P11(COMPOSED, WRONG, world_sizes="4"),
    ),
    # -- issue 54: HSDP under microbatches (Part 7's HSDP with units and deferred sync; the capstone uses them) --
    Mutant(
        "parallelize_hsdp_syncs_every_microbatch",
        "parallelize",
        "under hsdp with microbatches gradient sync is never deferred: each microbatch reduce-scatters and all-reduces",
        old='self._deferred = data_parallel in ("fsdp", "hsdp") and num_microbatches > 1',
        new='self._deferred = data_parallel == "fsdp" and num_microbatches > 1',
        caught_by=P11("hsdp_under_microbatches", "gradient all-reduces over dp", world_sizes="4"),
    ),
    Mutant(
        "parallelize_hsdp_without_units",
        "parallelize",
        "under hsdp each chunk is sharded layer by layer (no units): one reduce-scatter per linear, not per block",
        old='HSDP(c, mesh, "fsdp", "dp", units=_units(c))',
        new='HSDP(c, mesh, "fsdp", "dp")',
        caught_by=P11("hsdp_under_microbatches", "reduce-scatters over fsdp", world_sizes="4"),
    ),
    Mutant(
        "mesh_hsdp_replicas_ignore_sync",
        "mesh",
        "HSDP passes set_requires_gradient_sync to FSDP but all-reduces across replicas every grad it sees each "
        "microbatch (a deferred shard has none): right values, the biases and norms all-reduced every microbatch",
        old="        if not self._sync:  # FSDP keeps summing locally too; the backward that syncs reduces the sum\n",
        new="        if p.grad is None:  # Bug: skips only what FSDP deferred (no grad), not the replicated grads\n",
        caught_by=Check("tests/test_mesh.py", HSDP_MICRO, "ran with gradient sync off", names=RANK, world_sizes="2"),
    ),
    Mutant(
        "mesh_hsdp_sync_not_passed_to_fsdp",
        "mesh",
        "HSDP's set_requires_gradient_sync gates its own all-reduces only: FSDP reduce-scatters every microbatch",
        old="        self.fsdp.set_requires_gradient_sync(requires_gradient_sync)\n",
        new="",
        caught_by=Check("tests/test_mesh.py", HSDP_MICRO, "ran with gradient sync off", names=RANK, world_sizes="2"),
    ),
    Mutant(
        "mesh_hsdp_drops_units",
        "mesh",
        "HSDP accepts units but builds its FSDP without them: one reduce-scatter per layer, not per unit",
        old="group=mesh.group(shard_axis), units=units)",
        new="group=mesh.group(shard_axis))",
        caught_by=Check(
            "tests/test_mesh.py", HSDP_MICRO, "reduce-scatters in the shard slice", names=RANK, world_sizes="2"
        ),  # fmt: skip
    ),
    Mutant(
        "mesh_hsdp_broadcasts_before_fsdp",
        "mesh",
        "HSDP broadcasts across replicas before building its FSDP (the old order): units FSDP rejects are "
        "rejected only after a message",
        old=(
            "        self.fsdp = fsdp.FSDP(module, compute_dtype=compute_dtype, group=mesh.group(shard_axis), "
            "units=units)\n"
            "        self.module = module\n"
            "        if self.replicas > 1:\n"
            "            src = mesh.ranks(replicate_axis)[0]\n"
            "            with torch.no_grad():\n"
            "                for t in [*module.parameters(), *module.buffers()]:  "
            "# shards: (0, s) holds this rank's chunk s\n"
            "                    dist.broadcast(t, src=src, group=self.replicate_group)\n"
        ),
        new=(
            "        self.module = module\n"
            "        if self.replicas > 1:\n"
            "            src = mesh.ranks(replicate_axis)[0]\n"
            "            with torch.no_grad():\n"
            "                for t in [*module.parameters(), *module.buffers()]:\n"
            "                    dist.broadcast(t, src=src, group=self.replicate_group)\n"
            "        self.fsdp = fsdp.FSDP(module, compute_dtype=compute_dtype, group=mesh.group(shard_axis), "
            "units=units)\n"
            "        if self.replicas > 1:\n"
        ),
        caught_by=Check("tests/test_mesh.py", "bad_input and unit", "communicated", names=RANK, world_sizes="2"),
    ),
]
