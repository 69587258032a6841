"""The catalogue of staff mutants: realistic student bugs, each one textual edit of the reference (staff only).

A row is a ``Mutant``: its id, the module of ``reference_solutions`` it edits, the bug in one line, the
edit (``old`` must occur exactly ``count`` times in ``reference_solutions/<module>.py``; each occurrence
becomes ``new``) and the slice(s) of the suite that must catch it (``Check``: a suite file with a ``-k``
expression or a ``::test[case]`` selection, the world sizes, and the text the failure must show).

To add a mutant, add one row here. ``pytest tests/staff/mutants -k <id>`` then checks that the edit
applies (in milliseconds) and that its slice of the suite kills it. Nothing is written to disk:
``--impl tests.staff.mutants.<id>`` imports the reference with the edit applied, in every process
(tests/staff/mutants/loader.py).

Old texts are best kept to one code line (``new`` may span several): an old text that spans several
statements, comments or a docstring breaks when the reference is reformatted or annotated. When it does,
the fast test names the mutant and the text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial


@dataclass(frozen=True)
class Check:
    """``pytest <suite><select> --impl tests.staff.mutants.<id>`` must FAIL within ``within`` seconds and
    print ``expect`` (a tuple: any one of them, for a bug whose symptom depends on timing) and, when
    ``names`` is given, one of ``names`` (where it went wrong: "rank ", "stage"...). ``passes=True``: this
    slice must PASS instead (the public tests miss the bug; another check shows who catches it)."""

    suite: str  # a test file
    select: str  # a -k expression, or "::test_name[case-id]" for one case of the suite file
    expect: str | tuple[str, ...] = ""  # text the failure output must show: the part of the message that teaches
    world_sizes: str = "2"
    deadline: float = 10  # --deadline: seconds a rank function may take before it counts as hung
    within: float = 120  # seconds the whole slice may take to fail
    names: tuple[str, ...] = ()
    passes: bool = False
    options: tuple[str, ...] = ()  # more pytest options for this slice, e.g. ("--device-faithful",)


@dataclass(frozen=True)
class Mutant:
    """The reference with one edit of ``reference_solutions/<module>.py``, and the checks that catch it."""

    id: str  # the package name: --impl tests.staff.mutants.<id>
    module: str  # the module of reference_solutions it edits; every other module is the reference's own
    bug: str  # what the student got wrong, in one line
    old: str
    new: str
    caught_by: Check | tuple[Check, ...]
    count: int = 1  # how many times ``old`` occurs (all occurrences are replaced)
    checks: tuple[Check, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        checks = self.caught_by if isinstance(self.caught_by, tuple) else (self.caught_by,)
        object.__setattr__(self, "checks", checks)

    def __str__(self) -> str:  # the pytest id
        return self.id


# The suite slices, with the settings their rows share (a deadline of 20 s where a loaded machine can spend
# 10 s importing torch._dynamo in a rank; "names": what each failure must say about where it happened).
RANK = ("rank ",)
COLLECTIVES = partial(Check, "tests/test_collectives.py", names=RANK)
ALGORITHMS = partial(Check, "tests/test_all_reduce_algorithms.py", names=RANK)
ALGORITHMS_MODEL = partial(
    Check, "tests/test_all_reduce_algorithms.py", names=("all_reduce_time(",)
)  # pure: names the call
ALGORITHMS_HIDDEN = partial(Check, "tests/staff/hidden/test_all_reduce_algorithms_hidden.py", names=RANK)
DDP = partial(Check, "tests/test_ddp.py", deadline=20)
DDP_HIDDEN = partial(Check, "tests/staff/hidden/test_ddp_hidden.py", deadline=20)
ZERO = partial(Check, "tests/test_sharded_optimizer.py", deadline=20)
ZERO_HIDDEN = partial(Check, "tests/staff/hidden/test_sharded_optimizer_hidden.py", deadline=20)
FSDP = partial(Check, "tests/test_fsdp.py", deadline=20)
FSDP_HIDDEN = partial(Check, "tests/staff/hidden/test_fsdp_hidden.py", deadline=20)
TP = partial(Check, "tests/test_tensor_parallel.py", names=RANK, within=60)  # CI runs mutants beside other steps
TP_HIDDEN = partial(Check, "tests/staff/hidden/test_tensor_parallel_hidden.py", deadline=20)
PIPELINE = partial(Check, "tests/test_pipeline.py", names=("rank", "stage"))
SCHEDULES = partial(Check, "tests/test_pipeline_schedules.py", names=("rank", "stage"))  # Tasks 5.4-5.6
PIPELINE_HIDDEN = partial(Check, "tests/staff/hidden/test_pipeline_hidden.py", names=("rank", "stage"))
PIPELINE_V = partial(Check, "tests/test_pipeline_v.py", world_sizes="2,4", names=("rank", "p="))  # Tasks 5.7-5.8
ACCOUNTING = partial(Check, "tests/test_accounting.py", deadline=20)
ACCOUNTING_HIDDEN = partial(Check, "tests/staff/hidden/test_accounting_hidden.py", deadline=20)
MESH = partial(Check, "tests/test_mesh.py", world_sizes="4", deadline=20)
MESH_SUBGROUPS = partial(Check, "tests/test_mesh_subgroups.py", world_sizes="4", deadline=20)
MESH_HIDDEN = partial(Check, "tests/staff/hidden/test_mesh_hidden.py", world_sizes="4", deadline=20)
PLANNER = partial(Check, "tests/test_mesh_accounting.py", world_sizes="4", deadline=20)
EP = partial(Check, "tests/test_expert_parallel.py", names=RANK)
EP_HIDDEN = partial(Check, "tests/staff/hidden/test_expert_parallel_hidden.py", deadline=20)
CP = partial(Check, "tests/test_context_parallel.py", deadline=15, names=RANK)
CP_HIDDEN = partial(Check, "tests/staff/hidden/test_context_parallel_hidden.py", deadline=15, names=RANK)
CP_ACCOUNTING = partial(Check, "tests/test_context_parallel_accounting.py", deadline=15)
FAILURE_ACCOUNTING = partial(Check, "tests/test_checkpoint_accounting.py", deadline=15)
CKPT = partial(Check, "tests/test_checkpoint.py", deadline=15, world_sizes="1,2")
CKPT_HIDDEN = partial(Check, "tests/staff/hidden/test_checkpoint_hidden.py", deadline=20, world_sizes="1,2")
FT = partial(Check, "tests/test_fault_tolerance.py", deadline=60, world_sizes="1,2", names=RANK)  # Tasks 10.5-10.6
FT_HIDDEN = partial(Check, "tests/staff/hidden/test_fault_tolerance_hidden.py", deadline=60, world_sizes="2",
                    names=RANK)  # fmt: skip

# Recurring selections.
SUMS = "::test_every_algorithm_sums_exactly_in_place"
DDP_TRAIN = "::test_sgd_steps_match_one_process_on_the_whole_batch"
DDP_OVERLAP = "::test_each_bucket_is_all_reduced_once_asynchronously_as_soon_as_it_is_full"
DDP_LAYOUT = "::test_bucket_layout_follows_the_reverse_order_cap_rule[deep]"
MESH_SLICES = "::test_mesh_slices_match_row_major_order_and_init_device_mesh[w4]"
HSDP_TRAIN = "::test_hsdp_training_matches_one_process_on_the_whole_batch[w4-sgd]"
HSDP_TRAFFIC = "::test_hsdp_gathers_within_shard_slices_and_averages_across_replicas[w4]"
MESH_TRAIN = "::test_mesh_training_matches_one_process_on_the_whole_batch[w4-sgd]"
EP_MATCH = "::test_moe_matches_the_dense_moe_on_the_concatenated_tokens"
CP_FORWARD = "::test_ring_attention_forward_matches_attention_on_the_whole_sequence"
CP_RING = "::test_forward_ring_sends_n_minus_1_hops_to_the_next_rank_overlapped_with_compute"


MUTANTS = [
    # -- Part 1: collectives from send/recv; recursive doubling and the choice by size (Task 1.7) ------------
    Mutant(
        "collectives_fold_wrong_partner",
        "collectives",
        "core ranks look for their extra rank at me + (N - p), not me + p (a deadlock unless N = 2**k)",
        old="partner = me - p if extra else me + p",
        new="partner = me - p if extra else me + (n - p)",
        caught_by=ALGORITHMS(f"{SUMS}[w3-recursive_doubling]", "hung: no answer within", world_sizes="3"),
    ),
    Mutant(
        "collectives_fold_left_out",
        "collectives",
        "recursive doubling never folds the extra ranks' tensors in (they still receive the result)",
        old="        _exchange_and_add(group, send, ranks[partner], target, ranks[partner])",
        new="        pass  # the extra rank's tensor never reaches the core",
        caught_by=ALGORITHMS(
            f"{SUMS}[w3-recursive_doubling]", "all_reduce(algorithm='recursive_doubling') of float32", world_sizes="3"
        ),
    ),
    Mutant(
        "collectives_auto_always_ring",
        "collectives",
        'the model is computed, but algorithm="auto" always picks the ring',
        old='    return "recursive_doubling" if t_doubling < t_ring else "ring"',
        new='    return "ring"',
        caught_by=ALGORITHMS(
            "::test_auto_runs_the_algorithm_the_model_picks_on_each_side_of_the_crossover",
            "so auto must run 'recursive_doubling'",
        ),
    ),
    Mutant(
        "collectives_doubling_avg_every_step",
        "collectives",
        "recursive doubling divides by N after every exchange step instead of once at the end",
        old='            mask <<= 1\n        if op == "avg":\n            flat.div_(n)\n',
        new='            if op == "avg":\n                flat.div_(n)\n            mask <<= 1\n',
        caught_by=ALGORITHMS(
            "::test_avg_divides_by_world_size_once[w4-recursive_doubling]",
            "all_reduce(avg, 'recursive_doubling')",
            world_sizes="4",
        ),
    ),
    Mutant(
        "collectives_doubling_half_exchanged",
        "collectives",
        "recursive doubling exchanges (and adds) only the first half of the tensor at each step",
        old="            _exchange_and_add(group, flat, ranks[me ^ mask], flat, ranks[me ^ mask])",
        new=(
            "            half = flat[: flat.numel() // 2]\n"
            "            _exchange_and_add(group, half, ranks[me ^ mask], half, ranks[me ^ mask])"
        ),
        caught_by=ALGORITHMS(
            "::test_each_algorithm_sends_the_steps_and_bytes_it_promises[w2-recursive_doubling]",
            "recursive doubling at group position",
        ),
    ),
    Mutant(
        "collectives_algorithm_unchecked",
        "collectives",
        "an unknown algorithm is not rejected: it silently runs the ring",
        old="    if algorithm not in ALL_REDUCE_ALGORITHMS:",
        new="    if algorithm is None:",
        caught_by=ALGORITHMS(
            "::test_bad_input_raises_on_every_rank_before_communicating[w2-all_reduce-unknown-algorithm]",
            "expected ValueError, but the call returned normally",
        ),
    ),
    Mutant(
        "accounting_doubling_ceil_log2",
        "accounting",
        "recursive doubling modelled as ceil(log2 N) steps: the fold in and out counted as one step",
        old="    return (p.bit_length() - 1) + (2 if world_size != p else 0)",
        new="    return (p.bit_length() - 1) + (1 if world_size != p else 0)",
        caught_by=ALGORITHMS_MODEL(
            "::test_all_reduce_time_is_the_alpha_beta_model", "steps for recursive doubling at N = 3"
        ),
    ),
    Mutant(
        "collectives_fold_one_extra_only",
        "collectives",
        "the fold assumes a single extra rank (N = p + 1): only rank N - 1 folds in (hidden tests catch it)",
        old="    extra = me >= p\n",
        new="    extra = me == n - 1 and n != p  # 'the' extra rank\n",
        caught_by=(
            ALGORITHMS(
                "not alpha_beta_model and not crossover_is and not fit_alpha_beta and not bad_model",
                world_sizes="2,3,4,8",
                passes=True,
            ),
            ALGORITHMS_HIDDEN("::test_every_algorithm_at_world_sizes_with_several_extra_ranks", "rank "),
            # the public file at the world sizes its docstring suggests (--world-sizes 3,5,6,7): 6 folds 2 ranks
            ALGORITHMS(f"{SUMS}[w6-recursive_doubling]", "hung: no answer within", world_sizes="6", deadline=5),
        ),
    ),
    Mutant(
        "collectives_auto_by_world_size",
        "collectives",
        "algorithm=\"auto\" on a sub-group chooses by the world's size (dist.get_world_size()), not the group's",
        old="choose_all_reduce_algorithm(tensor.numel() * tensor.element_size(), n, alpha=alpha, beta=beta)",
        new="choose_all_reduce_algorithm(tensor.numel() * tensor.element_size(), dist.get_world_size(), alpha=alpha, beta=beta)",  # noqa: E501
        caught_by=(
            ALGORITHMS("::test_every_algorithm_works_inside_a_subgroup", world_sizes="2,4", passes=True),
            ALGORITHMS(
                "::test_auto_inside_a_subgroup_chooses_by_the_groups_size[w4]",
                "a ring sends only to the next rank",
                world_sizes="4",
            ),
            ALGORITHMS_HIDDEN(
                "::test_auto_inside_sub_groups_chooses_by_the_groups_size", "a ring sends only to the next rank"
            ),
        ),
    ),
    Mutant(
        "collectives_ring_off_by_one",
        "collectives",
        "the ring's all-gather phase forwards the wrong chunk (off by one)",
        old="chunks[(me - step) % n], nxt",
        new="chunks[(me - step + 1) % n], nxt",
        caught_by=COLLECTIVES("all_reduce_sums and int64", "collective_rank failed"),
    ),
    Mutant(
        "collectives_skip_send",
        "collectives",
        "the last rank skips its first send of the reduce-scatter (a deadlock)",
        old="        _exchange_and_add(group, chunks[(me - step - 1) % n], nxt,",
        new=(
            "        skip = step == 0 and me == n - 1  # this rank 'forgets' its first send\n"
            "        _exchange_and_add(group, chunks[(me - step - 1) % n][:0] if skip else chunks[(me - step - 1) % n], nxt,"  # noqa: E501
        ),
        caught_by=COLLECTIVES("all_reduce_sums and float32", "hung: no answer within"),
    ),
    Mutant(
        "collectives_builtin",
        "collectives",
        "all_reduce calls the built-in dist.all_reduce",
        old="    flat = tensor.view(-1) if tensor.is_contiguous()",
        new=(
            "    dist.all_reduce(tensor, group=group)\n"
            "    if op == 'avg':\n"
            "        tensor.div_(n)\n"
            "    return\n"
            "    flat = tensor.view(-1) if tensor.is_contiguous()"
        ),
        caught_by=COLLECTIVES("all_reduce_sums and int64", "only send/recv/isend/irecv"),
    ),
    Mutant(
        "collectives_avg_forgotten",
        "collectives",
        'all_reduce(op="avg") sums but never divides',
        old="        chunks[me].div_(n)",
        new="        pass",
        caught_by=COLLECTIVES("all_reduce_avg and float32", "all_reduce(avg)"),
    ),
    Mutant(
        "collectives_even_all_to_all",
        "collectives",
        "all_to_all assumes every piece has the size of the one it sends",
        old="(int(size_in.item()), *rest)",
        new="(tensors[to].shape[0], *rest)",
        caught_by=COLLECTIVES("all_to_all_delivers and float32", "all_to_all"),
    ),
    Mutant(
        "collectives_group_rank_src",
        "collectives",
        "broadcast treats src as a rank within the group instead of a global rank",
        old='    root = _check_member(src, ranks, "src")',
        new='    root = src if 0 <= src < len(ranks) else _check_member(src, ranks, "src")',
        caught_by=COLLECTIVES("subgroup", "broadcast src=", world_sizes="4"),
    ),
    Mutant(
        "collectives_no_validation",
        "collectives",
        "reduce_scatter does not check that dim 0 divides by the world size",
        old="    if tensor.dim() == 0 or tensor.shape[0] % n != 0:",
        new="    if tensor.dim() == 0:",
        caught_by=COLLECTIVES("bad_input and reduce_scatter-dim", "expected ValueError"),
    ),
    Mutant(
        "collectives_reduce_clobbers",
        "collectives",
        "reduce accumulates into every rank's tensor, not only dst's",
        old="    partial = tensor.contiguous().clone() if rel != 0 else None",
        new="    partial = None",
        caught_by=COLLECTIVES("reduce_sums and float32 and first", "reduce to 0", world_sizes="4"),
    ),
    Mutant(
        "collectives_gather_reversed",
        "collectives",
        "all_gather concatenates in reverse rank order",
        old="    chunks[me].copy_(piece)",
        new="    chunks.reverse()\n    chunks[me].copy_(piece)",
        caught_by=COLLECTIVES("all_gather and int64", "all_gather"),
    ),
    # -- Part 2: DDP -----------------------------------------------------------------------------------------
    Mutant(
        "ddp_bucket_buffer_on_cpu",
        "ddp",
        "DDPBucketed makes its bucket buffers with torch.zeros(n) and no device=: right on gloo, a CPU buffer "
        "all-reduced by NCCL fails",
        old="buffer = torch.zeros(offsets[-1], dtype=params[0].dtype, device=params[0].device)",
        new="buffer = torch.zeros(offsets[-1], dtype=params[0].dtype)",
        caught_by=(
            DDP(DDP_TRAIN, passes=True, options=("--no-device-faithful",)),  # plain gloo cannot tell: all on the CPU
            DDP(DDP_TRAIN, expect="stray CPU tensor", names=("ddp.py",), options=("--device-faithful",)),
        ),
    ),
    Mutant(
        "ddp_stale_ready",
        "ddp",
        "DDPBucketed never resets which grads are ready, so later steps launch buckets too early",
        old="            b.ready.clear()\n",
        new="",
        caught_by=(
            DDP_HIDDEN("::test_five_adamw_steps_on_three_ranks_match_one_process[bucketed-0.002MiB]", "step 1"),
            DDP(
                "::test_repeated_steps_work_with_either_kind_of_zero_grad[w2-bucketed-0.002MiB-zero_grad-zeros]",
                "step 1",
            ),
        ),
    ),
    Mutant(
        "ddp_avg_twice",
        "ddp",
        "DDPBucketed divides each bucket by the world size before the all-reduce and again after",
        old="        bucket.work = dist.all_reduce(",
        new="        bucket.buffer.div_(self.world_size)\n        bucket.work = dist.all_reduce(",
        caught_by=DDP(f"{DDP_TRAIN}[w2-bucketed-inf-deep]", "the average divided by 2 again: average only once"),
    ),
    Mutant(
        "ddp_no_avg",
        "ddp",
        "all_reduce_gradients sums the gradients but never divides by the world size",
        old="            p.grad.div_(world_size)\n",
        new="",
        caught_by=DDP(f"{DDP_TRAIN}[w2-naive-toy]", "this is the SUM over ranks: divide by the world size (2)"),
    ),
    Mutant(
        "ddp_flat_no_copy_back",
        "ddp",
        "all_reduce_gradients_flat reduces the flat buffer but never copies it back into .grad",
        old="            grad.copy_(synced)",
        new="            pass",
        caught_by=DDP(f"{DDP_TRAIN}[w2-flat-toy]", "(flat, toy, sgd)"),
    ),
    Mutant(
        "ddp_wait_in_hook",
        "ddp",
        "DDPIndividualParameters waits for each all-reduce inside its hook: no overlap with backward",
        old="        self._pending.append((dist.all_reduce(p.grad, group=self.group, async_op=True), p))",
        new=(
            "        work = dist.all_reduce(p.grad, group=self.group, async_op=True)\n"
            "        work.wait()\n"
            "        self._pending.append((work, p))"
        ),
        caught_by=DDP(f"{DDP_OVERLAP}[w2-deep-individual]", "waiting during backward serializes communication"),
    ),
    Mutant(
        "ddp_launch_at_finish",
        "ddp",
        "DDPBucketed only marks grads ready during backward and launches every bucket in finish",
        old="        if len(bucket.ready) == len(bucket.params):\n            self._launch(bucket)",
        new="        pass",
        caught_by=DDP(f"{DDP_OVERLAP}[w2-deep-bucketed-0.002MiB]", "async_op=True from a hook during backward"),
    ),
    Mutant(
        "ddp_tied_twice",
        "ddp",
        "hooks registered per name (named_parameters(remove_duplicate=False)): a tied weight is reduced twice",
        old=(
            "            for p in _trainable_parameters(module):\n"
            "                p.register_post_accumulate_grad_hook(self._launch_all_reduce)"
        ),
        new=(
            "            for _, p in module.named_parameters(remove_duplicate=False):\n"
            "                if p.requires_grad:\n"
            "                    p.register_post_accumulate_grad_hook(self._launch_all_reduce)"
        ),
        caught_by=DDP(f"{DDP_OVERLAP}[w2-tied-individual]", "expected one all_reduce per gradient"),
    ),
    Mutant(
        "ddp_bucket_ignores_cap",
        "ddp",
        "the bucket check looks at the new parameter alone, not the bucket's total: few, huge buckets",
        old="size + nbytes > cap_bytes",
        new="nbytes > cap_bytes",
        caught_by=DDP(DDP_LAYOUT, "deep, bucket_size_mb=0.00030517578125: expected buckets"),
    ),
    Mutant(
        "ddp_bucket_megabytes",
        "ddp",
        "the cap is bucket_size_mb * 10**6 bytes instead of bucket_size_mb * 2**20",
        old="bucket_size_mb * 2**20)",
        new="bucket_size_mb * 10**6)",
        caught_by=DDP(DDP_LAYOUT, "expected buckets"),
    ),
    Mutant(
        "ddp_last_bucket_unflushed",
        "ddp",
        "the bucket being filled when the loop ends is never appended (first parameters unsynced)",
        old="    return buckets\n",
        new="    return buckets[:-1]\n",
        caught_by=DDP(f"{DDP_TRAIN}[w2-bucketed-0.002MiB-deep]", "0.norm.weight.grad (bucketed-0.002MiB"),
    ),
    Mutant(
        "ddp_no_broadcast",
        "ddp",
        "the wrappers never broadcast rank 0's weights, so ranks train from different ones",
        old="        _broadcast_from_first_rank(module, group)\n",
        new="",
        caught_by=DDP(
            "::test_construction_broadcasts_rank_0_parameters_and_buffers[w2-bucketed-0MiB]", "(must be rank 0's)"
        ),
        count=2,
    ),
    Mutant(
        "ddp_partial_bucket_dropped",
        "ddp",
        "finish never launches a bucket whose parameters did not all get a grad this step",
        old="            if b.work is None and b.ready:",
        new="            if False:",
        caught_by=DDP(
            "::test_a_parameter_without_grad_in_a_step_keeps_none_and_nothing_hangs[w2-bucketed-inf]", "step 1"
        ),
    ),
    Mutant(
        "ddp_no_validation",
        "ddp",
        "DDPBucketed accepts a negative bucket size (it silently acts like 0)",
        old="math.isnan(bucket_size_mb) or bucket_size_mb < 0",
        new="math.isnan(bucket_size_mb)",
        caught_by=DDP(
            "::test_bad_input_raises_on_every_rank_before_communicating[w2-negative-bucket-size]",
            "expected ValueError, but the call returned normally",
        ),
    ),
    # -- Part 3: ZeRO stages 1-2 (sharded optimizer) and FSDP ------------------------------------------------
    Mutant(
        "fsdp_keeps_gathered_weights",
        "fsdp",
        "FSDP keeps each layer's gathered weight after forward (as if to reuse it in backward): every full "
        "weight stays alive, so sharding saves no memory",
        old="        del weight  # the only reference: the gathered storage is released here",
        new="        info.full = weight  # Bug: kept after forward instead of freed",
        caught_by=FSDP("fsdp_holds", "Something keeps full weights"),
    ),
    Mutant(
        "fsdp_autograd_gather",
        "fsdp",
        "FSDP gathers the weight with an autograd-aware all-gather and calls F.linear on it: autograd saves "
        "the gathered weight for backward, so it lives from forward to backward",
        old="return _ShardedLinearFunction.apply(x, layer.weight, layer.bias, info)",
        new=(
            "class Gather(torch.autograd.Function):\n"
            "        @staticmethod\n"
            "        def forward(ctx, shard):\n"
            "            return info.gather(shard)\n"
            "\n"
            "        @staticmethod\n"
            "        def backward(ctx, grad_weight):\n"
            "            return info.reduce_scatter(grad_weight, layer.weight.dtype)\n"
            "\n"
            "    dtype = info.compute_dtype or x.dtype\n"
            "    bias = None if layer.bias is None else layer.bias.to(dtype)\n"
            "    return F.linear(x.to(dtype), Gather.apply(layer.weight), bias).to(x.dtype)"
        ),
        caught_by=FSDP("fsdp_holds", "must be freed once the layer has run"),
    ),
    Mutant(
        "fsdp_grad_not_averaged",
        "fsdp",
        "FSDP reduce-scatters the weight grads but does not divide by the world size",
        old="        return chunk.div_(self.world)",
        new="        return chunk  # Bug: the sum over ranks, not the mean.",
        caught_by=FSDP("fsdp_training and deep_mlp-fp32-sgd", "deep_mlp fp32, after step 0"),
    ),
    Mutant(
        "fsdp_ignores_compute_dtype",
        "fsdp",
        "FSDP accepts compute_dtype but computes in fp32 anyway",
        old="info = _Shard(weight.shape, group, compute_dtype, self._sync)",
        new="info = _Shard(weight.shape, group, None, self._sync)",
        caught_by=FSDP("fsdp_training and bf16", "matmuls ran in ['float32']"),
    ),
    Mutant(
        "fsdp_gathers_everything_first",
        "fsdp",
        "FSDP all-gathers every layer's weight at the start of forward ('prefetch it all'), then again per "
        "layer: the full model is materialised at once",
        old="return self.module(*args, **kwargs)",
        new=(
            "full = [info.gather(p) for p in self.parameters() if (info := self._shards.get(id(p)))]\n"
            "        return self.module(*args, **kwargs)"
        ),
        caught_by=FSDP("fsdp_gathers", "not all at once"),
    ),
    Mutant(
        "sharded_optimizer_add_group_ignored",
        "sharded_optimizer",
        "add_param_group once training has started (the inner optimizer has state) records the group but never "
        "gives it to the inner optimizer: parameters added mid-training are never updated",
        old="if not owned:",
        new="if not owned or (self._local is not None and self._local.state):",
        caught_by=(ZERO_HIDDEN("stage1 and adamw", "after step 2"), ZERO("stage1_matches and sgd", "after step 2, 3.")),
    ),
    Mutant(
        "sharded_optimizer_unsharded_optimizer",
        "sharded_optimizer",
        "Stage 1 that is not sharded: every rank builds the inner optimizer over all parameters, so every "
        "rank keeps the whole optimizer state (the results are still right)",
        old='owned = [p for p in group["params"] if self._owner[p] == self._rank]',
        new='owned = list(group["params"])',
        caught_by=ZERO("one_nth_of_the_optimizer_state and 1-adamw", "owned parameters only"),
    ),
    Mutant(
        "sharded_optimizer_no_param_sync",
        "sharded_optimizer",
        "Owners update their parameters but never send them: the other ranks keep stale copies",
        old="self._all_gather_params(*bucket)",
        new="pass",
        caught_by=ZERO("stage1_matches and adamw", "stage 1, adamw, after step 0"),
    ),
    Mutant(
        "sharded_optimizer_random_assignment",
        "sharded_optimizer",
        "Parameters assigned to ranks at random: each rank draws its own assignment (torch is seeded "
        "differently on each rank), so some parameters have two owners and some none",
        old="            self._owner[p] = owner",
        new="            self._owner[p] = int(torch.randint(self._world, (), device='cpu'))  # Bug: differs per rank.",
        caught_by=ZERO("exactly_one_owner", "not ids, hashes or random"),
    ),
    Mutant(
        "sharded_optimizer_stage2_sum_not_mean",
        "sharded_optimizer",
        "Stage 2 reduce-scatters the grads but forgets to divide by the world size (sum, not mean)",
        old="chunk.div_(self._world)",
        new="pass",
        caught_by=ZERO("stage2_averages and sgd", "stage 2, sgd_momentum, after step 0"),
    ),
    Mutant(
        "sharded_optimizer_stage2_all_reduce",
        "sharded_optimizer",
        "Stage 2 averages every grad with an all-reduce (as DDP does) and then drops the non-owned ones: "
        "right values, but it moves the whole gradient to every rank",
        old="_reduce_scatter_tensor(chunk, full, group=self._group)",
        new=(
            "dist.all_reduce(full, group=self._group)\n"
            "            chunk.copy_(full[self._rank * slot : (self._rank + 1) * slot])"
        ),
        caught_by=ZERO("step_sends_each", "step all-reduced"),
    ),
    Mutant(
        "sharded_optimizer_stage2_keeps_grads",
        "sharded_optimizer",
        "Stage 2 averages the owned grads but leaves every other grad in place: no memory saved",
        old="p.grad = None",
        new="pass",
        caught_by=ZERO("keeps_only_the_owned", "frees the grads a rank does not own"),
    ),
    Mutant(
        "fsdp_hidden_replicated_average_by_world",
        "fsdp",
        "FSDP averages the replicated parameters' grads (biases, norms) over the world, not its group",
        old="p.grad.div_(dist.get_world_size(self._group))",
        new="p.grad.div_(dist.get_world_size())",
        caught_by=(
            FSDP(
                "::test_fsdp_on_sub_groups_averages_over_its_own_group[w4]",
                "(FSDP group [0, 1]), deep_mlp, step 0",
                world_sizes="4",
            ),  # fmt: skip
            FSDP_HIDDEN(
                "::test_two_fsdp_groups_each_train_like_a_plain_model_on_their_own_batches[w4-deep_mlp]",
                "(FSDP group [0, 2]), deep_mlp, step 0",
                world_sizes="4",
            ),
        ),
    ),
    Mutant(
        "fsdp_units_sync_drops_earlier_microbatches",
        "fsdp",
        "FSDP with deferred sync reduces only the last microbatch's grads: what earlier microbatches summed "
        "locally is thrown away when sync comes back on",
        old="full, owner.pending = full.add_(owner.pending), None",
        new="owner.pending = None  # Bug: the sum of the earlier microbatches dropped",
        caught_by=FSDP("units_with_deferred_sync and deep_mlp-3", "3 microbatches, step 0: "),
    ),
    Mutant(
        "fsdp_units_reduce_every_microbatch",
        "fsdp",
        "FSDP ignores set_requires_gradient_sync(False) for sharded weights: it reduce-scatters every "
        "microbatch (same values, a reduce-scatter per unit per microbatch)",
        old="    if not owner.sync.enabled:",
        new="    if False:  # Bug: the sync flag never consulted",
        caught_by=FSDP("units_gather_once", "with gradient sync off, grads are summed locally"),
    ),
    Mutant(
        "fsdp_units_replicated_all_reduce_every_microbatch",
        "fsdp",
        "FSDP defers the units' reduce-scatters but all-reduces the replicated grads (biases, norms) every microbatch",
        old="        if not self._sync.enabled:  # p.grad keeps summing; the microbatch that syncs reduces the sum",
        new="        if False:  # Bug: replicated grads reduced every microbatch",
        caught_by=FSDP("units_gather_once", "on the microbatch that syncs only"),
    ),
    Mutant(
        "fsdp_units_grad_not_averaged",
        "fsdp",
        "a unit's reduce-scattered flat grad is the sum over ranks, not the mean",
        old="return mine.div_(self.world)",
        new="return mine  # Bug: not divided by the group's size",
        caught_by=FSDP("units_with_deferred_sync and deep_mlp-1", "1 microbatches, step 0: "),
    ),
    Mutant(
        "fsdp_units_padding_first",
        "fsdp",
        "a unit's flat grad puts the padding first while its shards put it last: every weight's grad lands "
        "shifted (only where N does not divide the unit's size)",
        old="segment = flat[self.offsets[i] : self.offsets[i + 1]]",
        new=(
            "pad = len(flat) - self.total  # Bug: padding first, unlike the shards\n"
            "            segment = flat[pad + self.offsets[i] : pad + self.offsets[i + 1]]"
        ),
        caught_by=FSDP(
            "::test_fsdp_units_with_deferred_sync_match_one_process_on_every_microbatch[w4-tied-2]",
            "tied, 2 microbatches, step 0: ",
            world_sizes="4",
        ),  # fmt: skip
    ),
    Mutant(
        "fsdp_units_keep_gathered_buffer",
        "fsdp",
        "a unit keeps its gathered flat buffer from forward to backward (autograd saved views of it), so "
        "every unit's full weights are alive at the end of forward",
        old="    unit.free()  # autograd keeps views of it: the refill before backward brings the bytes back",
        new="    pass  # Bug: kept for backward",
        caught_by=FSDP("units_free", "the unit's gathered buffer outlived its forward"),
    ),
    Mutant(
        "fsdp_hidden_units_average_by_world",
        "fsdp",
        "a unit divides its reduce-scattered grad by the world size, not its group's",
        old="return mine.div_(self.world)",
        new="return mine.div_(dist.get_world_size())",
        caught_by=(
            FSDP("units_on_a_sub_group", "(FSDP group [0, 2], first rank 0), step 0", world_sizes="4"),
            FSDP_HIDDEN(
                "two_fsdp_groups_with_units and deep_mlp", "of [0, 2], deep_mlp, 3 microbatches", world_sizes="4"
            ),
        ),  # fmt: skip
    ),
    Mutant(
        "fsdp_units_reverse_order",
        "fsdp",
        "a unit packs its weights in reverse order (the last layer's first): consistent, so every number is "
        "right, but flat_shard is not the promised layout",
        old="weights = list(dict.fromkeys(layer.weight for layer in layers))  # tied within a unit: once; not kept",
        new="weights = list(dict.fromkeys(layer.weight for layer in layers))[::-1]  # Bug: reverse order",
        caught_by=FSDP("unit_flat_shard_is", "flat_shard over ranks 0..1, as built"),
    ),
    Mutant(
        "fsdp_units_padding_at_front",
        "fsdp",
        "a unit pads its flat buffer at the front, consistently (weights, views, grads and gather_full_params all "
        "shifted): every number is right, but flat_shard is not the promised layout",
        old="torch.cat([w.detach().reshape(-1) for w in weights], out=flat[: self.total])",
        new=(
            "pad = self.world * self.chunk - self.total  # Bug: the padding at the front\n"
            "            self.offsets = [o + pad for o in self.offsets]\n"
            "            self.total = self.world * self.chunk\n"
            "            torch.cat([w.detach().reshape(-1) for w in weights], out=flat[pad:])"
        ),
        caught_by=(
            FSDP("unit_flat_shard_is", "flat_shard over ranks 0..1, as built", world_sizes="2"),
            FSDP("units_with_deferred_sync and tied", "", world_sizes="4", passes=True),
        ),
    ),
    Mutant(
        "fsdp_units_tied_packed_twice",
        "fsdp",
        "a unit packs a weight tied within it twice (one slot per layer): the numbers are right, but T and "
        "every gather and reduce-scatter of the unit are larger",
        old="weights = list(dict.fromkeys(layer.weight for layer in layers))  # tied within a unit: once; not kept",
        new="weights = [layer.weight for layer in layers]  # Bug: a tied weight packed once per layer",
        caught_by=(
            FSDP("unit_flat_shard_is", "packed once"),
            FSDP_HIDDEN("tied_embedding_unit", "(the tied table once)"),
        ),
    ),
    Mutant(
        "fsdp_units_grad_padding_garbage",
        "fsdp",
        "a unit packs its grads into a torch.empty buffer and never zeroes the padding: whatever memory held "
        "is reduce-scattered into the last rank's padding, and the optimizer steps it",
        old="flat[self.total :].zero_()  # the padding: every rank sums zeros there",
        new="flat[self.total :].fill_(float(self.rank + 1))  # Bug: the padding left as found (stale bytes)",
        caught_by=FSDP("unit_flat_shard_is", "the padding"),
    ),
    Mutant(
        "fsdp_units_gather_fp32",
        "fsdp",
        "a unit ignores compute_dtype: it gathers its flat buffer in fp32 (twice the bytes on the wire) and "
        "multiplies in fp32",
        old="self.dtype = compute_dtype or shard.dtype",
        new="self.dtype = shard.dtype  # Bug: compute_dtype ignored by units",
        caught_by=FSDP("bf16_units_gather and deep_mlp", "cast the shard to compute_dtype before gathering it"),
    ),
    Mutant(
        "fsdp_units_matmul_fp32",
        "fsdp",
        "a unit gathers in bf16 but casts the weight back up to the input's fp32 for the matmul",
        old="return F.linear(x.to(w.dtype), w, bias).to(x.dtype)",
        new="return F.linear(x, w.to(x.dtype), None if bias is None else bias.to(x.dtype))  # Bug: fp32 matmul",
        caught_by=FSDP("bf16_units_gather and deep_mlp", "matmuls ran in ['bfloat16', 'float32']"),
    ),
    Mutant(
        "fsdp_units_reduce_in_bf16",
        "fsdp",
        "a unit packs and reduce-scatters its flat grad in compute_dtype (bf16), and sums microbatches in bf16",
        old="dtype=shard.dtype, device=shard.device)",
        new="dtype=self.dtype, device=shard.device)  # Bug: grads in compute dtype",
        count=2,
        caught_by=FSDP("bf16_units_gather and deep_mlp", "grads are reduced in the shards' dtype"),
    ),
    Mutant(
        "fsdp_units_bf16_flat_grad_in_compute_dtype",
        "fsdp",
        "a unit packs its grads into a buffer of the gathered weights' dtype (bf16) and reduce-scatters it into an "
        "fp32 chunk: fine at world size 1 (no collective), broken at N >= 2",
        old="flat = torch.empty(self.world * self.chunk, dtype=shard.dtype, device=shard.device)",
        new="flat = torch.empty(self.world * self.chunk, dtype=self.dtype, device=shard.device)  # Bug: compute dtype",
        caught_by=FSDP("bf16_units_with_deferred_sync", "bf16_units_with_deferred_sync_match_one_process[w2]"),
    ),
    Mutant(
        "fsdp_units_embedding_output_bf16",
        "fsdp",
        "an Embedding inside a unit returns its rows in compute_dtype (bf16) instead of the weight's fp32",
        old="return F.embedding(indices, layer.weight, layer.padding_idx).to(dtype)",
        new="return F.embedding(indices, layer.weight, layer.padding_idx)  # Bug: left in compute dtype",
        caught_by=FSDP("bf16_units_gather and embedding", "layers returned [('Embedding', 'torch.bfloat16')"),
    ),
    Mutant(
        "fsdp_gathers_fp32_then_casts",
        "fsdp",
        "FSDP under compute_dtype=bf16 all-gathers each weight in fp32 and casts the gathered weight (the matmul "
        "runs in bf16, but the wire carries twice the bytes)",
        old="local = shard.detach().to(dtype)  # cast before gathering: bf16 halves the bytes on the wire",
        new=(
            "local = shard.detach()  # Bug: gathered in the shard's fp32, cast after\n"
            "        if self.world > 1:\n"
            "            full = torch.empty(self.world * self.chunk, dtype=local.dtype, device=shard.device)\n"
            "            _all_gather_tensor(full, local, group=self.group)\n"
            "            return full[: self.numel].view(self.shape).to(dtype)\n"
            "        local = local.to(dtype)"
        ),
        caught_by=FSDP("bf16_gathers_bf16_reduces and deep_mlp", "cast the shard to compute_dtype before gathering"),
    ),
    Mutant(
        "fsdp_embedding_output_bf16",
        "fsdp",
        "FSDP's Embedding under compute_dtype=bf16 returns its rows in bf16 instead of the weight's fp32",
        old="y = F.embedding(indices, weight, padding_idx).to(shard.dtype)  # (..., dim)",
        new="y = F.embedding(indices, weight, padding_idx)  # Bug: left in compute dtype",
        caught_by=FSDP("bf16_gathers_bf16_reduces and embedding", "layers returned [('Embedding', 'torch.bfloat16')"),
    ),
    Mutant(
        "fsdp_embedding_gathered_in_backward",
        "fsdp",
        "FSDP's Embedding backward gathers the table again, as a Linear's does, though its weight grad needs only "
        "the indices: one all-gather too many per Embedding per step",
        old="grad_w = torch.zeros(info.shape, dtype=ctx.dtype, device=grad_y.device)",
        new=(
            "info.gather(torch.zeros(info.chunk, dtype=ctx.dtype, device=grad_y.device))  # Bug: gathered, unused\n"
            "        grad_w = torch.zeros(info.shape, dtype=ctx.dtype, device=grad_y.device)"
        ),
        caught_by=FSDP("embedding_is_gathered_in_forward_only", "not the Embedding's table"),
    ),
    Mutant(
        "fsdp_units_weightless_unit",
        "fsdp",
        "FSDP builds a unit for a submodule with no trainable Linear or Embedding weight (a LayerNorm) and fails "
        "on its empty list of weights",
        old="if not layers:",
        new="if False:  # Bug: a unit without weights is not skipped",
        caught_by=FSDP("unit_without_trainable_weights", "IndexError"),
    ),
    Mutant(
        "fsdp_units_kept_after_backward",
        "fsdp",
        "a unit frees its gathered buffer after forward but not after its backward: every unit's full weights "
        "stay allocated from backward to the next forward",
        old="unit.free()  # the unit's backward is done: nothing reads the gathered buffer any more",
        new="pass  # Bug: the refilled buffer kept after backward",
        caught_by=FSDP("units_free", "after backward: FSDP holds"),
    ),
    Mutant(
        "fsdp_broadcast_from_global_rank_0",
        "fsdp",
        "FSDP broadcasts from src=0 whatever its group: a group without global rank 0 fails (src is a global rank)",
        old="dist.broadcast(t, src=ranks[0], group=group)",
        new="dist.broadcast(t, src=0, group=group)  # Bug: global rank 0, not the group's first rank",
        caught_by=FSDP("units_on_a_sub_group", "rank 1", world_sizes="4"),
    ),
    # -- Part 4: tensor parallelism --------------------------------------------------------------------------
    Mutant(
        "tensor_parallel_hidden_sp_bias_unguarded",
        "tensor_parallel",
        "the sequence-parallel MLP adds fc2's shared bias even when the MLP has no bias",
        old="if self.fc2.bias is not None:",
        new="if True:  # the guard forgotten",
        caught_by=(
            TP("::test_sequence_parallel_mlp_matches_the_dense_rows[w2-no-bias]", "rank 0"),
            TP_HIDDEN("::test_sequence_parallel_mlp_without_biases_matches_the_dense_rows[w2]", "rank 0"),
        ),
    ),
    Mutant(
        "tensor_parallel_column_split_by_input",
        "tensor_parallel",
        "ColumnParallelLinear.from_dense shards the weight on the input dim (the row-parallel split)",
        old="layer.weight = _shard(dense.weight, 0, group)",
        new="layer.weight = _shard(dense.weight, 1, group)",
        caught_by=TP("column_parallel and sharded-output and no-bias", "cannot be multiplied"),
    ),
    Mutant(
        "tensor_parallel_row_bias_every_rank",
        "tensor_parallel",
        "RowParallelLinear adds the bias on every rank before the all-reduce (so T times)",
        old="y = reduce_from_tp_region(F.linear(x, self.weight), self.group)",
        new="return reduce_from_tp_region(F.linear(x, self.weight, self.bias), self.group)",
        caught_by=TP("row_parallel and parallel-input and not no-bias", "the bias must be added once"),
    ),
    Mutant(
        "tensor_parallel_no_backward_all_reduce",
        "tensor_parallel",
        "f (copy_to_tp_region) is the identity in backward too: the input gradient is never summed",
        old="return _all_reduce(grad, ctx.group), None",
        new="return grad, None",
        caught_by=TP("conjugate and forward_backward and copy_to", "backward: gradient of x"),
    ),
    Mutant(
        "tensor_parallel_all_reduce_both_ways",
        "tensor_parallel",
        "g (reduce_from_tp_region) all-reduces in backward as well as in forward",
        old="        return grad, None\n\n\nclass _ScatterToTPRegion",
        new="        return _all_reduce(grad, None), None\n\n\nclass _ScatterToTPRegion",
        caught_by=TP("conjugate and forward_backward and reduce_from", "backward: gradient of x"),
    ),
    Mutant(
        "tensor_parallel_average_not_sum",
        "tensor_parallel",
        "the all-reduce averages (the DDP habit) where tensor parallelism needs a plain sum",
        old="    dist.all_reduce(out, group=group)\n    return out",
        new="    dist.all_reduce(out, group=group)\n    return out / _world(group)",
        caught_by=TP("tp_mlp_matches and not no-bias", "TP MLP output"),
    ),
    Mutant(
        "tensor_parallel_sp_bias_unscaled",
        "tensor_parallel",
        "with sequence parallelism every rank adds the whole fc2 bias before the reduce-scatter",
        old="return bias / world",
        new="return bias.clone()",
        caught_by=TP("sequence_parallel_mlp_matches", "sequence-parallel output"),
    ),
    Mutant(
        "tensor_parallel_row_init_shard_fan_in",
        "tensor_parallel",
        "RowParallelLinear draws its shard with the shard's fan-in (in/T), too wide by sqrt(T)",
        old="in_features // world))  # (out, in/T)\n        _init_weight(self.weight, in_features)",
        new="in_features // world))  # (out, in/T)\n        _init_weight(self.weight, in_features // world)",
        caught_by=TP("fresh_layers", "initialize with the full layer's fan-in"),
    ),
    Mutant(
        "tensor_parallel_scatter_wrong_dim",
        "tensor_parallel",
        "scatter_to_tp_region (and the gather's backward) split dim 0 instead of the last dim",
        old="x.chunk(_world(group), dim=-1)",
        new="x.chunk(_world(group), dim=0)",
        caught_by=TP("conjugate and forward_backward and scatter_to", "forward output: shape"),
    ),
    Mutant(
        "tensor_parallel_sp_all_reduce",
        "tensor_parallel",
        "the sequence-parallel reduce-scatter is an all-reduce followed by a chunk (right values, 2x traffic)",
        old="        return _reduce_scatter_first(x, group)",
        new="        return _all_reduce(x, group).chunk(_world(group))[_rank(group)].contiguous()",
        caught_by=TP("swaps_each_all_reduce", "should make exactly ['all_gather', 'reduce_scatter']"),
    ),
    Mutant(
        "tensor_parallel_mlp_extra_gather",
        "tensor_parallel",
        "the TP MLP gathers fc1's output and re-scatters it for fc2 (right values, extra collectives)",
        old="return self.fc2(self.act(self.fc1(x)))",
        new="return self.fc2(scatter_to_tp_region(gather_from_tp_region(self.act(self.fc1(x)), self.group), self.group))",  # noqa: E501
        caught_by=TP("one_all_reduce_per_pass", "should make exactly ['all_reduce']"),
    ),
    Mutant(
        "tensor_parallel_no_validation",
        "tensor_parallel",
        "ColumnParallelLinear does not check that out_features divides by the TP size",
        old='_check_divisible(out_features, world, "out_features")',
        new="pass",
        caught_by=TP("bad_input and column-out_features", "expected ValueError, but the call returned"),
    ),
    Mutant(
        "tensor_parallel_gather_grad_first_chunk",
        "tensor_parallel",
        "gather_from_tp_region's backward hands every rank the first chunk of the gradient",
        old="        return _split_last(grad, ctx.group), None",
        new="        return grad.chunk(_world(ctx.group), dim=-1)[0].contiguous(), None",
        caught_by=TP("conjugate and forward_backward and gather_from", "rank 1, gather_from"),
    ),
    Mutant(
        "tensor_parallel_ignores_group",
        "tensor_parallel",
        "the all-reduce forgets ``group`` and sums over every rank of WORLD",
        old="dist.all_reduce(out, group=group)",
        new="dist.all_reduce(out)",
        caught_by=TP("stays_inside_its_group and reduce_from", "in group [0, 1], forward output", world_sizes="4"),
    ),
    # -- Part 5: pipeline parallelism ------------------------------------------------------------------------
    Mutant(
        "pipeline_split_extra_last",
        "pipeline",
        "split_into_stages gives the extra layers to the last stages instead of the first",
        old="(1 if s < extra else 0)",
        new="(1 if s >= num_stages - extra else 0)",
        caught_by=PIPELINE("split_into_stages", "first stages take the extra"),
    ),
    Mutant(
        "pipeline_warmup_off_by_one",
        "pipeline",
        "1F1B runs one warm-up forward too many (min(p - s, m) instead of min(p - s - 1, m))",
        old=(
            "    warmup = min(num_stages - stage - 1, m)\n"
            '    actions = [Action("F", i) for i in range(warmup)]\n'
            "    for i"
        ),
        new=(
            '    warmup = min(num_stages - stage, m)\n    actions = [Action("F", i) for i in range(warmup)]\n    for i'
        ),
        caught_by=PIPELINE("warms_up", "warm-up forwards; got"),
    ),
    Mutant(
        "pipeline_backward_first",
        "pipeline",
        "1F1B's steady state runs the backward before the forward of each pair",
        old='[Action("F", warmup + i), Action("B", i)]',
        new='[Action("B", i), Action("F", warmup + i)]',
        caught_by=PIPELINE("one_forward_then_one_backward and 1f1b", "B0 runs before F0"),
    ),
    Mutant(
        "pipeline_gpipe_as_1f1b",
        "pipeline",
        "train_step runs GPipe's order when asked for 1F1B (same bubble, m activations held)",
        old='"1f1b": one_f_one_b_schedule,',
        new='"1f1b": gpipe_schedule,',
        caught_by=PIPELINE("peak_activations and 1f1b and m-above-p", "activations were alive at once"),
    ),
    Mutant(
        "pipeline_activations_kept",
        "pipeline",
        "a stage never releases a microbatch's stashed activations after its backward",
        old="else step.stash.pop((i, k))",
        new="else step.stash[(i, k)]",
        caught_by=PIPELINE("peak_activations and 1f1b and m-above-p", ".peak_activations is"),
    ),
    Mutant(
        "pipeline_loss_not_averaged",
        "pipeline",
        "microbatch losses are not divided by the number of microbatches (grads m times too big)",
        old="out = self.loss_fn(out, step.targets[i]) / step.num_microbatches",
        new="out = self.loss_fn(out, step.targets[i])",
        caught_by=PIPELINE("training_matches and deep and m-equal-p", "loss"),
    ),
    Mutant(
        "pipeline_group_rank_as_global",
        "pipeline",
        "neighbours are group ranks passed to send/recv as global ranks (wrong in a subgroup)",
        old="return self._ranks[self._place(g + 1)[0]]",
        new="return self._place(g + 1)[0]",
        caught_by=PIPELINE("subgroups", "is not part of group", world_sizes="4"),
    ),
    Mutant(
        "pipeline_grad_to_next",
        "pipeline",
        "input gradients are sent to the next stage instead of the previous one",
        old="dist.P2POp(dist.isend, grad_x.contiguous(), self._prev_rank(k), self.group)",
        new="dist.P2POp(dist.isend, grad_x.contiguous(), self._next_rank(k), self.group)",
        caught_by=PIPELINE("training_matches and deep and m-equal-p and 1f1b", "train_rank", world_sizes="4"),
    ),
    Mutant(
        "pipeline_zeroes_grads",
        "pipeline",
        "train_step zeroes the stage's grads itself, so gradient accumulation is lost",
        old="        self.timeline, self.peak_activations = [], 0\n",
        new="        self.module.zero_grad()\n        self.timeline, self.peak_activations = [], 0\n",
        caught_by=PIPELINE("adds_to_grad and 1f1b", "two train steps per step"),
    ),
    Mutant(
        "pipeline_no_validation",
        "pipeline",
        "no check that the batch divides into microbatches (chunk() silently makes uneven ones)",
        old="            if tensor.shape[0] < m or tensor.shape[0] % m:",
        new="            if False:",
        caught_by=PIPELINE("bad_input and divisible", "batch-not-divisible-by-microbatches"),
    ),
    Mutant(
        "pipeline_interleaved_chunk_per_microbatch",
        "pipeline",
        "interleaved forwards switch chunk every microbatch instead of every group of p microbatches",
        old='return Action("F", (j // (p * v)) * p + j % p, (j // p) % v)',
        new='return Action("F", (j // (p * v)) * p + j % p, j % v)',
        caught_by=SCHEDULES("follows_megatron_order", "interleaved_1f1b_schedule(p="),
    ),
    Mutant(
        "pipeline_interleaved_warmup_as_1f1b",
        "pipeline",
        "interleaved warm-up uses 1F1B's p - s - 1 in place of 2(p - s - 1) (one short per later stage)",
        old="warmup = min(2 * (p - stage - 1) + (v - 1) * p, total)",
        new="warmup = min((p - stage - 1) + (v - 1) * p, total)",
        caught_by=SCHEDULES("follows_megatron_order", "forwards before the first backward"),
    ),
    Mutant(
        "pipeline_interleaved_backward_chunks_not_reversed",
        "pipeline",
        "interleaved backwards run the chunks in forward order (chunk 0 first) instead of reversed",
        old='return Action("B", (j // (p * v)) * p + j % p, v - 1 - (j // p) % v)',
        new='return Action("B", (j // (p * v)) * p + j % p, (j // p) % v)',
        caught_by=SCHEDULES("never_deadlocks_and_idles_exactly", "interleaved, p="),
    ),
    Mutant(
        "pipeline_zb_w_before_b",
        "pipeline",
        "ZB-H1 runs each round's W before its B (a weight gradient before the input gradient it needs)",
        old=(
            '        actions.append(Action("B", i))\n'
            "        if i >= stage:\n"
            '            actions.append(Action("W", weights))\n'
            "            weights += 1\n"
        ),
        new=(
            "        if i >= stage:\n"
            '            actions.append(Action("W", weights))\n'
            "            weights += 1\n"
            '        actions.append(Action("B", i))\n'
        ),
        caught_by=SCHEDULES("f_then_b_then_w", "then B, then W"),
    ),
    Mutant(
        "pipeline_zb_deadlocks",
        "pipeline",
        "ZB-H1's steady state runs B(i) before F(w + i): the last stage waits on its own forward, every stage"
        " above waits on it (a schedule that deadlocks)",
        old=(
            "        if warmup + i < m:\n"
            '            actions.append(Action("F", warmup + i))\n'
            '        actions.append(Action("B", i))\n'
        ),
        new=(
            '        actions.append(Action("B", i))\n'
            "        if warmup + i < m:\n"
            '            actions.append(Action("F", warmup + i))\n'
        ),
        caught_by=SCHEDULES("idles_a_third", "wait on each other forever"),
    ),
    Mutant(
        "pipeline_zb_w_late",
        "pipeline",
        "ZB-H1 delays stage s's first W by s + 1 rounds instead of s (more activations held, later Ws)",
        old="        if i >= stage:\n",
        new="        if i > stage:\n",
        caught_by=SCHEDULES("idles_a_third", "zb-h1, p="),
    ),
    Mutant(
        "pipeline_zb_b_accumulates_weight_grads",
        "pipeline",
        "ZB-H1's B runs a whole backward (weight grads included) and W adds them again: grads doubled",
        old="(grad_x,) = torch.autograd.grad(out, x, grad_out, retain_graph=True, allow_unused=True)",
        new="out.backward(grad_out, retain_graph=True); grad_x = x.grad",
        caught_by=SCHEDULES("trains_like_one_process and zb-h1 and not checkpoint", ".grad"),
    ),
    Mutant(
        "pipeline_checkpoint_keeps_activations",
        "pipeline",
        "with checkpoint=True the forward still builds and keeps its graph (recomputes, but saves nothing)",
        old="keep_graph = not step.checkpoint",
        new="keep_graph = True",
        caught_by=SCHEDULES(
            "activations_held and 1f1b-checkpoint", "checkpointing keeps only each microbatch's stage input"
        ),
    ),
    Mutant(
        "pipeline_recompute_without_rng_state",
        "pipeline",
        "the recomputation does not restore the forward's RNG state, so dropout draws other masks",
        old="                _set_rng_state(saved.rng, step.device)\n",
        new="",
        caught_by=SCHEDULES("recomputes_with_the_forward_rng_state and 1f1b", "draws other dropout masks"),
    ),
    Mutant(
        "pipeline_accounting_zb_bubble_as_1f1b",
        "accounting",
        "ZB-H1's bubble counted as 1F1B's, (p - 1)(F + B + W) idle, as if the Ws filled nothing",
        old="idle = (p - 1) * (f + b - w)",
        new="idle = (p - 1) * (f + b + w)",
        caught_by=SCHEDULES("accounting_bubble", "simulated"),
    ),
    Mutant(
        "pipeline_shape_of_first_chunk",
        "pipeline",
        "a rank allocates every chunk's incoming activations with the first shape it learned (right while all"
        " chunk boundaries have the same width, wrong when they differ)",
        old='shape, dtype = step.act_meta[k] if kind == "act" else step.stash[(i, k)].out_meta',
        new='shape, dtype = next(iter(step.act_meta.values())) if kind == "act" else step.stash[(i, k)].out_meta',
        caught_by=(
            SCHEDULES("differ_in_width and keep", "train_rank", world_sizes="2"),
            PIPELINE_HIDDEN("keep", "train_rank"),
        ),
    ),
    Mutant(
        "pipeline_zb_skips_stage0_b",
        "pipeline",
        "ZB-H1's B computes no input gradient on stage 0 (\"stage 0's input needs none\"): a batch that requires"
        " grad gets no .grad",
        old="            if x.requires_grad:",
        new="            if x.requires_grad and self.stage > 0:",
        caught_by=SCHEDULES("stage_0_input and zb", "requires grad but its .grad is None"),
    ),
    Mutant(
        "pipeline_relies_on_tags",
        "pipeline",
        "every message is tagged by kind (headers 2, payloads 1) and each action's sends go payload first: gloo's"
        " tag matching sorts them out, NCCL (and the harness's tag-blind matching) hands the header's receive"
        " the payload",
        old="from torch import nn\n",
        new=(
            "from torch import nn\n\n\n"
            "class _TaggedDist:  # the student's torch.distributed: tags by kind, payload posted before its header\n"
            "    def __getattr__(self, name):\n"
            "        return getattr(torch.distributed, name)\n\n"
            "    @staticmethod\n"
            "    def P2POp(op, tensor, peer, group=None):\n"
            "        return torch.distributed.P2POp(op, tensor, peer, group, tag=2 if tensor.dtype == torch.int64 else 1)\n\n"  # noqa: E501
            "    @staticmethod\n"
            "    def recv(tensor, src, group=None):\n"
            "        return torch.distributed.recv(tensor, src, group=group, tag=2 if tensor.dtype == torch.int64 else 1)\n\n"  # noqa: E501
            "    @staticmethod\n"
            "    def batch_isend_irecv(ops):\n"
            "        sends = [o for o in ops if o.op is torch.distributed.isend]\n"
            "        return torch.distributed.batch_isend_irecv(sends[::-1] + [o for o in ops if o not in sends])\n\n\n"
            "dist = _TaggedDist()\n"
        ),
        caught_by=PIPELINE("training_matches and 1f1b and deep and not 3d", ("messages crossed", "NCCL ignores tag")),
    ),
    Mutant(
        "pipeline_blocking_sends_first",
        "pipeline",
        "each action's sends are blocking dist.send calls made before the next receive is posted: in 1F1B's"
        " steady state stage s sends to s + 1 while s + 1 sends to s, and both wait forever (on NCCL as on gloo)",
        old="        ops, pending = list(outgoing), []  # pending: (message, buffer) of the receives in ops\n",
        new=(
            "        for op in outgoing:  # blocking sends first\n"
            "            dist.send(op.tensor, op.peer, group=op.group)\n"
            "        ops, pending = [], []\n"
        ),
        caught_by=PIPELINE(
            "::test_pipeline_training_matches_one_process_on_the_full_batch[w2-1f1b-m-above-p-deep]", "no answer within"
        ),
    ),
    # -- Part 6: accounting ----------------------------------------------------------------------------------
    Mutant(
        "accounting_stage2_as_stage1",
        "accounting",
        "ZeRO stage 2 memory computed as stage 1 (gradients left replicated)",
        old="replicated = {0: p + g + o, 1: p + g, 2: p, 3: 0}[zero_stage]",
        new="replicated = {0: p + g + o, 1: p + g, 2: p + g, 3: 0}[zero_stage]",
        caught_by=ACCOUNTING("figure_1", "stage=2"),
    ),
    Mutant(
        "accounting_bubble_ratio",
        "accounting",
        "Bubble as Megatron's ratio to the ideal time, (p-1)/(v*m), not a fraction of the step",
        old='v = _count(num_chunks, "num_chunks", minimum=1, integer=True)\n    return (p - 1) / (v * m + p - 1)',
        new='v = _count(num_chunks, "num_chunks", minimum=1, integer=True)\n    return (p - 1) / (v * m)',
        caught_by=ACCOUNTING("bubble_and_ring", "p4 m8: expected"),
    ),
    Mutant(
        "accounting_ring_one_pass",
        "accounting",
        "Ring all-reduce counted as one pass, (N-1)/N*M: the all-gather half is forgotten",
        old="return 2.0 * (world_size - 1) / world_size * num_bytes",
        new="return (world_size - 1) / world_size * num_bytes",
        caught_by=ACCOUNTING("bubble_and_ring", "N8: expected"),
    ),
    Mutant(
        "accounting_forward_flops_only",
        "accounting",
        "Training FLOPs counted as 2ND (the forward pass only)",
        old="return 6.0 * n * d",
        new="return 2.0 * n * d",
        caught_by=ACCOUNTING("flops_and_mfu_examples", "training_flops(175e9, 300e9)"),
    ),
    Mutant(
        "accounting_sp_like_tp",
        "accounting",
        "Sequence parallelism assumed to save nothing beyond tensor parallelism",
        old="return sbh / t * (34 + 5 * a * s / h)",
        new="pass",
        caught_by=ACCOUNTING("korthikanti", "tensor + sequence parallel, t=8"),
    ),
    Mutant(
        "accounting_no_stage_check",
        "accounting",
        "zero_memory_per_rank treats any zero_stage above 3 as stage 3 instead of rejecting it",
        old='raise ValueError(f"zero_stage must be 0, 1, 2 or 3 (the ZeRO stages), got {zero_stage}")',
        new="zero_stage = 3",
        caught_by=ACCOUNTING("bad_input and stage", "instead of raising"),
    ),
    Mutant(
        "accounting_hidden_memory_truncated",
        "accounting",
        "training_memory_bytes truncates to an int instead of rounding to the nearest",
        old="return int(round(num_params * per_param))",
        new="return int(num_params * per_param)",
        caught_by=(
            ACCOUNTING(
                "::test_training_memory_rounds_fractional_bytes_per_parameter_to_the_nearest_int",
                "expected the nearest int, 136",
            ),
            ACCOUNTING_HIDDEN(
                "::test_memory_with_fractional_bytes_per_parameter_rounds_to_the_nearest_byte",
                "expected the nearest int, 46",
            ),
        ),
    ),
    # -- Part 7: meshes (world size 4) -----------------------------------------------------------------------
    Mutant(
        "mesh_column_major",
        "mesh",
        "the first axis varies fastest (column-major) instead of the last",
        old='grid = torch.arange(world, device="cpu").view(*shape.values())',
        new='grid = torch.arange(world, device="cpu").view(*reversed(shape.values())).permute(*reversed(range(len(shape))))',  # noqa: E501
        caught_by=MESH(MESH_SLICES, "expected [0, 2] (row-major)"),
    ),
    Mutant(
        "mesh_group_only_on_members",
        "mesh",
        "each rank calls new_group only for the slices it belongs to (new_group is collective)",
        old=(
            "group = dist.new_group(ranks)  # collective: every rank creates every slice's group\n"
            "                if me in ranks:"
        ),
        new="if me in ranks:\n                    group = dist.new_group(ranks)",
        caught_by=MESH(MESH_SLICES, ("in new_group", "in all_reduce")),
    ),
    Mutant(
        "mesh_hsdp_no_replicate_all_reduce",
        "mesh",
        "HSDP never averages gradients across the replicate axis",
        old="                    p.register_post_accumulate_grad_hook(self._average_over_replicas)\n",
        new="                    pass\n",
        caught_by=MESH(HSDP_TRAFFIC, "without them replicas drift apart"),
    ),
    Mutant(
        "mesh_hsdp_axes_swapped",
        "mesh",
        "HSDP shards over the replicate axis and replicates over the shard axis",
        old="self.fsdp = fsdp.FSDP(module, compute_dtype=compute_dtype, group=mesh.group(shard_axis), units=units)",
        new=(
            "self.fsdp = fsdp.FSDP(module, compute_dtype=compute_dtype, group=self.replicate_group, units=units)\n"
            "        self.replicate_group, self.replicas = mesh.group(shard_axis), mesh.size(shard_axis)\n"
            "        replicate_axis = shard_axis"
        ),
        caught_by=MESH(HSDP_TRAFFIC, "expected the shard slice"),
    ),
    Mutant(
        "mesh_hsdp_divides_by_world",
        "mesh",
        "HSDP divides the replicate sum by the world size instead of the replicate size",
        old="p.grad.div_(self.replicas)",
        new="p.grad.div_(dist.get_world_size())",
        caught_by=MESH(HSDP_TRAIN, "step 0"),
    ),
    Mutant(
        "mesh_hsdp_no_replicate_broadcast",
        "mesh",
        "HSDP broadcasts only within the shard slice: replicas start from different models",
        old="                    dist.broadcast(t, src=src, group=self.replicate_group)\n",
        new="                    pass\n",
        caught_by=MESH(HSDP_TRAIN, "step 0"),
    ),
    Mutant(
        "mesh_dp_over_tp_axis",
        "mesh",
        "the trainer averages gradients over the tp axis instead of dp",
        old="ddp.all_reduce_gradients_flat(self.module, group=self.dp_group)",
        new='ddp.all_reduce_gradients_flat(self.module, group=self.mesh.group("tp"))',
        caught_by=MESH(MESH_TRAIN, "(dp2xtp2, sgd)"),
    ),
    Mutant(
        "mesh_no_dp_all_reduce",
        "mesh",
        "the trainer never averages gradients over dp: replicas drift apart",
        old="            ddp.all_reduce_gradients_flat(self.module, group=self.dp_group)\n",
        new="            pass\n",
        caught_by=MESH(MESH_TRAIN, "(dp2xtp2, sgd)"),
    ),
    Mutant(
        "mesh_tp_on_world",
        "mesh",
        "tensor-parallel MLPs use the world group instead of the tp slice",
        old="TensorParallelMLP.from_dense(child, group=tp_group)",
        new="TensorParallelMLP.from_dense(child, group=None)",
        caught_by=MESH(
            "::test_each_axis_traffic_stays_in_its_groups_with_the_formula_counts[w4]", "calls outside the tp/dp slices"
        ),
    ),
    Mutant(
        "mesh_pipeline_across_dp",
        "mesh",
        "pipeline stages are neighbours along the dp axis instead of pp",
        old='loss_fn, group=mesh.group("pp"))',
        new='loss_fn, group=mesh.group("dp"))',
        caught_by=MESH(MESH_TRAIN, "trainer_rank failed"),
    ),
    Mutant(
        "mesh_zero_on_world",
        "mesh",
        "ZeRO shards optimizer state over the world instead of the dp slice",
        old="shard_gradients=zero_stage == 2, group=self.dp_group,",
        new="shard_gradients=zero_stage == 2, group=None,",
        caught_by=MESH("::test_mesh_training_with_zero_over_dp_matches_one_process[w4-1]", "zero 1"),
    ),
    Mutant(
        "mesh_hsdp_buffers_not_replicated",
        "mesh",
        "HSDP broadcasts only the parameters across replicas: buffers keep each replica's own values",
        old="for t in [*module.parameters(), *module.buffers()]:",
        new="for t in module.parameters():",
        caught_by=MESH("::test_hsdp_broadcasts_buffers_across_replicas_and_computes_in_compute_dtype", "buffer offset"),
    ),
    Mutant(
        "mesh_hsdp_drops_compute_dtype",
        "mesh",
        "HSDP builds its FSDP without compute_dtype: the forward silently runs in float32",
        old="self.fsdp = fsdp.FSDP(module, compute_dtype=compute_dtype, group=mesh.group(shard_axis), units=units)",
        new="self.fsdp = fsdp.FSDP(module, group=mesh.group(shard_axis), units=units)",
        caught_by=MESH(
            "::test_hsdp_broadcasts_buffers_across_replicas_and_computes_in_compute_dtype", "hand compute_dtype to FSDP"
        ),
    ),
    Mutant(
        "mesh_stage_from_global_rank",
        "mesh",
        "the trainer's stage is the global rank modulo pp: right only where pp is the fastest-varying axis",
        old='stage, num_stages = mesh.rank("pp"), mesh.size("pp")',
        new='stage, num_stages = dist.get_rank() % mesh.size("pp"), mesh.size("pp")',
        caught_by=MESH(MESH_TRAIN, ("dp1xpp2xtp2", "trainer_rank failed")),
    ),
    Mutant(
        "mesh_zero1_also_reduce_scatters",
        "mesh",
        "with ZeRO-1 the trainer's optimizer reduce-scatters the gradients after the all-reduce (same numbers)",
        old="shard_gradients=zero_stage == 2, group=self.dp_group,",
        new="shard_gradients=zero_stage >= 1, group=self.dp_group,",
        caught_by=MESH("::test_zero_stage_decides_how_each_stage_averages_over_dp[w4-1]", "ZeRO-1 shards"),
    ),
    Mutant(
        "mesh_subgroup_ddp_broadcast_from_rank_0",
        "ddp",
        "DDP broadcasts from global rank 0 instead of the group's first rank (breaks on a mesh slice)",
        old="src = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)[0]",
        new="src = 0",
        caught_by=MESH_SUBGROUPS(
            "::test_ddp_on_a_subgroup_broadcasts_from_its_first_rank_and_averages_over_its_size[w4-bucketed]",
            "Global rank 0 is not part of group",
        ),
    ),
    Mutant(
        "mesh_subgroup_fsdp_average_by_world",
        "fsdp",
        "FSDP divides reduce-scattered grads by the world size instead of the group size",
        old="return chunk.div_(self.world)",
        new="return chunk.div_(dist.get_world_size())",
        caught_by=MESH_SUBGROUPS(
            "::test_zero_on_a_subgroup_steps_like_one_process_on_the_groups_batch[w4-fsdp]",
            "fsdp, fc1.weight after one step on [0, 2]",
        ),
    ),
    Mutant(
        "mesh_zero2_also_all_reduces",
        "mesh",
        "with ZeRO-2 the trainer still all-reduces the gradients before the optimizer's reduce-scatter",
        old="        if self.zero_stage < 2:",
        new="        if True:",
        caught_by=(
            MESH("::test_zero_stage_decides_how_each_stage_averages_over_dp[w4-2]", "ZeRO-2 averages the gradients"),
            MESH_HIDDEN("::test_zero_traffic_over_dp_on_dp2_x_tp2[2]", "ZeRO-2 averages the gradients"),
        ),
    ),
    Mutant(
        "accounting_planner_tp_across_nodes",
        "accounting",
        "the planner lets TP grow past a node (up to the heads) before pipelining",
        old="tps = [t for t in (2**i for i in range(per_node.bit_length())) if t <= per_node and heads % t == 0]",
        new="tps = [t for t in (2**i for i in range(heads.bit_length())) if heads % t == 0]",
        caught_by=PLANNER("::test_planner_keeps_tp_inside_a_node_and_grows_pp_across_nodes", "TP crosses nodes"),
    ),
    Mutant(
        "accounting_planner_activations_of_one_microbatch",
        "accounting",
        "the first pipeline stage holds one microbatch's activations, not min(pp, m) (GPipe/1F1B forgotten)",
        old="return states + per_layer * math.ceil(layers / pp) * min(pp, m)",
        new="return states + per_layer * math.ceil(layers / pp)",
        caught_by=PLANNER("::test_parallel_memory_of_llama3_405b_matches_the_hand_computation", "activations"),
    ),
    # -- Part 8: expert parallelism --------------------------------------------------------------------------
    Mutant(
        "expert_parallel_weights_not_renormalised",
        "expert_parallel",
        "top-k weights are the raw probabilities, not renormalised over the chosen k",
        old="        if k > 1:\n            weights = weights / weights.sum(dim=-1, keepdim=True)\n",
        new="",
        caught_by=EP(f"{EP_MATCH}[w2-top2]", "output (rows of rank 0)"),
    ),
    Mutant(
        "expert_parallel_counts_not_exchanged",
        "expert_parallel",
        "no counts exchange: every rank assumes the others route exactly as it does",
        old="all_counts = self._gather_counts(counts)",
        new="all_counts = counts[None].expand(world, -1)",
        caught_by=EP(f"{EP_MATCH}[w2-top1]", "rank 0 of 2, top1"),
    ),
    Mutant(
        "expert_parallel_combine_wrong_order",
        "expert_parallel",
        "the combine weights are read token-major while the rows are choice-major",
        old="w = weights.t().reshape(-1)[sent]",
        new="w = weights.reshape(-1)[sent]",
        caught_by=EP(f"{EP_MATCH}[w2-top2]", "output (rows of rank 0)"),
    ),
    Mutant(
        "expert_parallel_backward_not_reversed",
        "expert_parallel",
        "the all-to-all backward reuses the forward splits instead of swapping them",
        old="return _exchange(grad, input_splits, output_splits, ctx.group)",
        new="return _exchange(grad, output_splits, input_splits, ctx.group)",
        caught_by=EP("::test_all_to_all_tokens_delivers_rows_and_sends_gradients_back[w2-uneven]", "all_to_all_rank"),
    ),
    Mutant(
        "expert_parallel_capacity_per_rank",
        "expert_parallel",
        "capacity applied per rank (local tokens, local queue) instead of per expert over the group",
        old=(
            "        capacity = expert_capacity(int(all_counts.sum()) // k, E, k, self.capacity_factor)\n"
            "        per_choice = c.sum(dim=0)  # (E, k)\n"
            "        ahead = (torch.cumsum(per_choice, 1) - per_choice)[None] + (torch.cumsum(c, 0) - c)  # queued before\n"  # noqa: E501
        ),
        new=(
            "        capacity = expert_capacity(int(all_counts.sum()) // k // world, E, k, self.capacity_factor)\n"
            "        ahead = torch.cumsum(c, 2) - c  # this rank's own queue only\n"
        ),
        caught_by=EP(f"{EP_MATCH}[w2-top1-capacity1.0]", "output (rows of rank"),
    ),
    Mutant(
        "expert_parallel_aux_wrong_axis",
        "expert_parallel",
        "the load-balancing fraction f sums the counts over experts instead of over choices",
        old="fraction = counts.view(E, k).sum(dim=1)",
        new="fraction = counts.view(E, k).sum(dim=0)",
        caught_by=EP(f"{EP_MATCH}[w2-top1]", "aux_loss (of this rank's tokens)"),
    ),
    Mutant(
        "expert_parallel_expert_on_wrong_rank",
        "expert_parallel",
        "from_dense deals experts round-robin (e on rank e % W) while routing expects blocks (e // (E/W))",
        old="moe.experts[layer.first_expert + i]",
        new="moe.experts[_rank(group) + i * _world(group)]",
        caught_by=EP(f"{EP_MATCH}[w2-top1]", "(must be expert 1)"),
    ),
    Mutant(
        "expert_parallel_capacity_ignored",
        "expert_parallel",
        "dropped assignments are still dispatched and combined instead of contributing zero",
        old="kept = self._kept_counts(all_counts)",
        new="kept = all_counts",
        caught_by=EP(f"{EP_MATCH}[w2-top1-capacity1.0]", "output (rows of rank 1)"),
    ),
    Mutant(
        "expert_parallel_no_validation",
        "expert_parallel",
        "num_experts not divisible by the EP size is accepted (experts silently lost)",
        old="if num_experts % world != 0:",
        new="if False:",
        caught_by=EP(
            "::test_bad_input_raises_on_every_rank_before_communicating[w2-num_experts-not-divisible]",
            "expected ValueError, but the call returned normally",
        ),
    ),
    Mutant(
        "expert_parallel_router_not_summed",
        "expert_parallel",
        "the router gradient is not summed over the EP group (only this rank's tokens count)",
        old="        dist.all_reduce(moe.router.weight.grad, group=moe.group)\n",
        new="        pass\n",
        caught_by=EP("::test_adamw_steps_match_the_dense_moe[w2]", "router grad after the sync"),
    ),
    Mutant(
        "expert_parallel_experts_overcounted",
        "expert_parallel",
        "expert gradients divided by the DP size only, though every EP rank's loss fed them",
        old="        p.grad.div_(ep * dp)",
        new="        p.grad.div_(ep * dp if p is moe.router.weight else dp)",
        caught_by=EP("::test_adamw_steps_match_the_dense_moe[w2]", ".grad (expert 0) after the sync"),
    ),
    Mutant(
        "expert_parallel_hidden_capacity_from_local_tokens",
        "expert_parallel",
        "the capacity counts rank 0's tokens times the group size, as if every rank had as many tokens",
        old="expert_capacity(int(all_counts.sum()) // k, E, k, self.capacity_factor)",
        new="expert_capacity(int(all_counts[0].sum()) // k * world, E, k, self.capacity_factor)",
        caught_by=(
            EP("::test_ranks_with_different_token_counts_share_one_capacity", "capacity from the group's tokens"),
            EP_HIDDEN(
                "::test_ranks_with_different_token_counts_share_one_capacity_over_the_group[w2-top1-capacity1.0]",
                "rank 0 of 2 (3 tokens), top1-capacity1.0: output",
            ),
        ),
    ),
    Mutant(
        "expert_parallel_capacity_from_own_tokens",
        "expert_parallel",
        "each rank computes the capacity from its own token count times the group size: with ragged batches the"
        " ranks disagree on what is dropped, so the all-to-all splits do not match",
        old="expert_capacity(int(all_counts.sum()) // k, E, k, self.capacity_factor)",
        new="expert_capacity(int(all_counts[_rank(self.group)].sum()) // k * world, E, k, self.capacity_factor)",
        caught_by=EP("::test_ranks_with_different_token_counts_share_one_capacity", "moe_rank failed"),
    ),
    Mutant(
        "expert_parallel_all_to_all_not_contiguous",
        "expert_parallel",
        "all_to_all_tokens hands x to all_to_all_single as it is: a non-contiguous x (a view) is refused",
        old="dist.all_to_all_single(out, x.contiguous(), output_splits, input_splits, group=group)",
        new="dist.all_to_all_single(out, x, output_splits, input_splits, group=group)",
        caught_by=EP("::test_all_to_all_tokens_takes_a_non_contiguous_x", "Tensors must be contiguous"),
    ),
    Mutant(
        "expert_parallel_empty_expert_not_run",
        "expert_parallel",
        "not a bug (the suite must accept it): an expert that got no row is not run, so its .grad stays None"
        " (handout 8.3: None counts as zeros)",
        old="outputs = torch.cat([expert(chunk) for expert, chunk in zip(self.experts, chunks)])",
        new="outputs = torch.cat([e(c) if len(c) else c for e, c in zip(self.experts, chunks)])",
        caught_by=(
            EP(f"{EP_MATCH}[w1-top1]", passes=True, world_sizes="1"),
            EP("::test_skewed_routing_where_a_rank_receives_no_token", passes=True, world_sizes="4"),
            EP("::test_adamw_steps_match_the_dense_moe", passes=True, world_sizes="1"),
        ),
    ),
    # -- Part 9: context parallelism (ring attention) --------------------------------------------------------
    Mutant(
        "context_parallel_merge_not_rescaled",
        "context_parallel",
        "the online-softmax merge adds a block's output without rescaling what was accumulated",
        old="old_out.mul_(torch.exp(old_lse - new_lse)[..., None]).add_(",
        new="old_out.add_(",
        caught_by=CP(f"{CP_FORWARD}[w2-contiguous-full]", "contiguous full attention, float64"),
    ),
    Mutant(
        "context_parallel_merge_overflows",
        "context_parallel",
        "the merge leaves log space (log(e^a + e^b)): correct for small scores, inf/nan for large ones",
        old="new_lse = torch.logaddexp(old_lse, blk_lse)",
        new="new_lse = torch.log(torch.exp(old_lse) + torch.exp(blk_lse))",
        caught_by=CP(
            "::test_ring_attention_forward_is_stable_at_large_logits[w2-float64]",
            "with scores up to ~3000 (float64): out",
        ),
    ),
    Mutant(
        "context_parallel_causal_local_offset",
        "context_parallel",
        "the causal mask of every key/value block uses this rank's own positions (no global offset)",
        old="_visible(q_pos, _positions(owner, n, s, zigzag), causal)",
        new="_visible(q_pos, _positions(me, n, s, zigzag), causal)",
        caught_by=CP(f"{CP_FORWARD}[w2-contiguous-causal]", "contiguous causal attention"),
        count=2,
    ),
    Mutant(
        "context_parallel_zigzag_chunks_swapped",
        "context_parallel",
        "zigzag shards hold chunk 2N-1-r before chunk r (the positions the ring assumes no longer match)",
        old="mine = [chunks[me], chunks[2 * n - 1 - me]] if zigzag",
        new="mine = [chunks[2 * n - 1 - me], chunks[me]] if zigzag",
        caught_by=CP(
            "::test_shard_sequence_gives_each_rank_its_blocks_and_unshard_restores_the_sequence[w2-dim-2-zigzag]",
            "should be chunks 0 and 3 of 4",
        ),
    ),
    Mutant(
        "context_parallel_dkv_not_returned",
        "context_parallel",
        "backward returns the key/value gradient it accumulated last (another rank's block), never sending it"
        " on to its owner",
        old="works, dk, dv = grad_hop",
        new="works, _, _ = grad_hop",
        caught_by=CP(
            "::test_ring_attention_gradients_match_attention_on_the_whole_sequence[w2-contiguous-full]",
            "dk (the gradient of this rank's own key/value block)",
        ),
    ),
    Mutant(
        "context_parallel_hop_missing",
        "context_parallel",
        "the forward ring stops one hop short (the last block never arrives; the one held is used twice)",
        old="more = step < n - 1",
        new="more = step < n - 2",
        caught_by=CP(f"{CP_RING}[w2-contiguous-full]", "expected 1 hop(s) of"),
    ),
    Mutant(
        "context_parallel_not_overlapped",
        "context_parallel",
        "the forward posts the next hop only after computing with the current block (no overlap)",
        old=(
            "        if more:  # the next block travels while this one is computed\n"
            "            k_next, v_next = torch.empty_like(k_cur), torch.empty_like(v_cur)\n"
            "            hop = _post_hop(group, nxt, prv, [k_cur, v_cur], [k_next, v_next])\n"
            "        seen = _visible(q_pos, _positions(owner, n, s, zigzag), causal)\n"
            "        if seen is not None:\n"
            "            row0, col1, hidden = seen\n"
            "            scores = _scores(qf, k_cur.to(acc), row0, col1, hidden, scale)  # (b, h, sq', sk')\n"
            "            blk_lse = torch.logsumexp(scores, dim=-1)  # (b, h, sq'): finite, every row sees a key\n"
            "            blk_out = torch.exp(scores - blk_lse[..., None]) @ v_cur[..., :col1, :].to(acc)  # (b, h, sq', dv)\n"  # noqa: E501
            "            _merge(out, lse, row0, blk_out, blk_lse)\n"
        ),
        new=(
            "        seen = _visible(q_pos, _positions(owner, n, s, zigzag), causal)\n"
            "        if seen is not None:\n"
            "            row0, col1, hidden = seen\n"
            "            scores = _scores(qf, k_cur.to(acc), row0, col1, hidden, scale)  # (b, h, sq', sk')\n"
            "            blk_lse = torch.logsumexp(scores, dim=-1)  # (b, h, sq'): finite, every row sees a key\n"
            "            blk_out = torch.exp(scores - blk_lse[..., None]) @ v_cur[..., :col1, :].to(acc)  # (b, h, sq', dv)\n"  # noqa: E501
            "            _merge(out, lse, row0, blk_out, blk_lse)\n"
            "        if more:  # the next block travels while this one is computed\n"
            "            k_next, v_next = torch.empty_like(k_cur), torch.empty_like(v_cur)\n"
            "            hop = _post_hop(group, nxt, prv, [k_cur, v_cur], [k_next, v_next])\n"
        ),
        caught_by=CP(f"{CP_RING}[w2-contiguous-full]", "were posted before a block's compute"),
    ),
    Mutant(
        "context_parallel_hidden_half_computed",
        "context_parallel",
        "causal blocks keep every key column (masked) instead of skipping the hidden half of a zigzag block: "
        "results are right, but ranks with more earlier blocks do more work (unbalanced)",
        old="col1 = int(torch.searchsorted(k_pos, q_pos[-1], right=True))",
        new="col1 = len(k_pos)",
        caught_by=CP(
            "::test_zigzag_balances_causal_work_and_masked_blocks_are_skipped[w2]", "must skip what the mask hides"
        ),
    ),
    Mutant(
        "context_parallel_no_validation",
        "context_parallel",
        "ring_attention_forward does not check its arguments",
        old=(
            "    _check_attention_inputs(q, k, v, causal, zigzag)\n"
            "    ranks, me = _group_view(group)\n"
            "    n = len(ranks)\n"
            "    nxt, prv = ranks[(me + 1) % n], ranks[(me - 1) % n]\n"
            "    acc = torch.promote_types(q.dtype, torch.float32)  # float32 even"
        ),
        new=(
            "    ranks, me = _group_view(group)\n"
            "    n = len(ranks)\n"
            "    nxt, prv = ranks[(me + 1) % n], ranks[(me - 1) % n]\n"
            "    acc = torch.promote_types(q.dtype, torch.float32)  # float32 even"
        ),
        caught_by=CP(
            "::test_bad_input_raises_on_every_rank_before_communicating[w2-forward-causal-not-bool]",
            "expected TypeError, but the call returned normally",
        ),
    ),
    Mutant(
        "accounting_ring_attention_forward_only",
        "accounting",
        "ring attention's bytes count the forward hops only (backward's key/value and gradient hops forgotten)",
        old="return 2 * block * ((2 * c - 2) * e + c * ge)",
        new="return 2 * block * (c - 1) * e",
        caught_by=CP_ACCOUNTING("::test_context_parallel_accounting_gives_the_handouts_examples", "ring bytes, s=32k"),
    ),
    Mutant(
        "context_parallel_grads_in_bf16",
        "context_parallel",
        "backward accumulates (and ships) the key/value gradients in the inputs' dtype: bfloat16 for bfloat16 "
        "inputs, not float32 as the docstring promises (float32/64 tests cannot see it)",
        old="_cur.shape, dtype=acc,",
        new="_cur.shape, dtype=q.dtype,",
        count=2,
        caught_by=(
            CP("ring_attention_gradients or backward_ring_sends", world_sizes="2,4", passes=True, within=300),
            CP(
                "::test_backward_accumulates_and_ships_key_value_gradients_in_float32_for_bfloat16_inputs[w2]",
                "the N gradient hops in float32",
            ),
        ),
    ),
    Mutant(
        "context_parallel_world_ring",
        "context_parallel",
        "the ring runs over the whole world instead of ``group`` (only a sub-group test sees it: public and hidden)",
        old="ranks = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)",
        new="ranks = list(range(dist.get_world_size()))",
        caught_by=(
            CP(
                "::test_two_rings_on_sub_groups_each_attend_to_their_own_sequence[w4]",
                "is not part of group",
                world_sizes="4",
            ),
            CP_HIDDEN("::test_two_rings_on_sub_groups_keep_to_their_group", "is not part of group"),
        ),
    ),
    # -- failure accounting (§10.7) --
    Mutant(
        "accounting_checkpoint_saves_gradients",
        "accounting",
        "the checkpoint counts the gradients too (a checkpoint holds parameters and optimizer state only)",
        old="replicated = {0: p + o, 1: p, 2: p, 3: 0}[zero_stage]",
        new="replicated = {0: p + o + 2, 1: p + 2, 2: p, 3: 0}[zero_stage]",
        caught_by=FAILURE_ACCOUNTING("llama3_examples", "checkpoint bytes of the busiest rank"),
    ),
    Mutant(
        "accounting_checkpoint_every_replica_writes",
        "accounting",
        "replicated tensors written in equal slices even when rank 0 alone writes them (balance ignored)",
        old="    if balance_replicated:\n        replicated /= world_size",
        new="    replicated /= world_size",
        caught_by=FAILURE_ACCOUNTING("llama3_examples", "stage 0"),
    ),
    Mutant(
        "accounting_young_daly_without_the_two",
        "accounting",
        "the Young-Daly interval as sqrt(C * M): the factor 2 of the tau / (2 M) lost work forgotten",
        old="return math.sqrt(2 * c * m)",
        new="return math.sqrt(c * m)",
        caught_by=FAILURE_ACCOUNTING("goodput_peaks", "goodput peaks at"),
    ),
    Mutant(
        "accounting_goodput_loses_a_whole_interval",
        "accounting",
        "a failure loses the whole interval since the last save, not half of it on average",
        old="return max(0.0, 1 - c / tau - (r + tau / 2 + w) / m)",
        new="return max(0.0, 1 - c / tau - (r + tau + w) / m)",
        caught_by=FAILURE_ACCOUNTING("llama3_examples", "goodput of synchronous saves"),
    ),
    Mutant(
        "accounting_async_interval_below_the_write",
        "accounting",
        "the asynchronous interval ignores that the next save waits for the previous write",
        old="return max(math.sqrt(2 * s * m), w)",
        new="return math.sqrt(2 * s * m)",
        caught_by=FAILURE_ACCOUNTING("goodput_peaks", "async interval when the write"),
    ),
    # -- checkpoint (§10.1-10.4) --
    Mutant(
        "checkpoint_latest_trusts_the_metadata",
        "checkpoint",
        "latest_checkpoint takes any step folder with its metadata as committed: the marker is never looked at",
        old="_read_committed(step_directory(root, step))",
        new="json.loads((step_directory(root, step) / _METADATA).read_bytes())",
        caught_by=CKPT(
            "::test_a_rank_killed_during_a_save_leaves_the_previous_checkpoint[w1-first-rank-last-op]",
            "latest_checkpoint returned 2",
            world_sizes="1",
        ),
    ),
    Mutant(
        "checkpoint_load_skips_the_checksums",
        "checkpoint",
        "load_checkpoint trusts the bytes it reads: block checksums are written but never checked on load",
        old='_check_blocks(data, b0, _box_crcs(box), f"key {key!r} of {folder / name}")',
        new="pass  # the checksums are for verify_checkpoint",
        caught_by=CKPT("flipped_byte", "without noticing"),
    ),
    Mutant(
        "checkpoint_reads_whole_boxes",
        "checkpoint",
        "a resharding load reads every block of each saved box it overlaps, not only the blocks it needs",
        old="{i for a, b in runs for i in range(a // CHECKSUM_BLOCK_BYTES, -(-b // CHECKSUM_BLOCK_BYTES))}",
        new='set(range(-(-box["nbytes"] // CHECKSUM_BLOCK_BYTES)))',
        caught_by=CKPT("fsdp_checkpoint_loads", "read only the ranges your boxes need"),
    ),
    Mutant(
        "checkpoint_reshard_from_the_box_start",
        "checkpoint",
        "a saved box overlapped from its middle is read from its first row: off by the overlap's offset",
        old="start = sum((rel_lo[d] + outer[d]) * strides[d] for d in range(k)) + rel_lo[k] * strides[k]",
        new="start = sum((rel_lo[d] + outer[d]) * strides[d] for d in range(k))",
        caught_by=CKPT("fsdp_checkpoint_loads", "box of", names=RANK),
    ),
    Mutant(
        "checkpoint_rng_not_saved",
        "checkpoint",
        "capture_training_state leaves out torch's RNG state: dropout masks after a resume differ",
        old='"rng.torch": torch.get_rng_state().numpy().tobytes(),',
        new="",
        caught_by=(CKPT("resumed_training", "rng.torch"), CKPT("missing_piece", "rng.torch")),
    ),
    Mutant(
        "checkpoint_sampler_position_not_restored",
        "checkpoint",
        "restore_training_state restores the RNGs but not the sampler's position: the data order restarts",
        old='sampler.load_state_dict(copy.deepcopy(saved["sampler"]))',
        new="pass",
        caught_by=CKPT("resumed_training", "sampler position", names=RANK),
    ),
    Mutant(
        "checkpoint_async_without_a_staging_copy",
        "checkpoint",
        "AsyncCheckpointer.save hands the live tensors to the background thread: it saves a later step's values",
        old='staged[key] = Shard(value.local.detach().to("cpu", copy=True), value.global_shape, value.offsets)',
        new="staged[key] = Shard(value.local.detach(), value.global_shape, value.offsets)",
        # The line stages a CPU box (a device one goes through the pinned staging, on GPUs and in device-faithful
        # mode alike): the test's CPU-held Shard changes after the save (the values differ) or during the write
        # (its checksums do not match).
        caught_by=CKPT("async_save", ("copy CPU boxes too", "stage a copy", "checksum mismatch"), names=RANK),
    ),
    Mutant(
        "checkpoint_every_replica_writes",
        "checkpoint",
        "every rank writes every box it holds: a replicated tensor is written once per data-parallel replica",
        old="if writer[(key, shard.offsets, tuple(shard.local.shape))] != me:",
        new="if False:",
        caught_by=CKPT("loads_back_exactly", "must be written once", world_sizes="2"),
    ),
    Mutant(
        "checkpoint_objects_of_rank_zero",
        "checkpoint",
        "load returns group rank 0's non-tensor values on every rank: every rank resumes with rank 0's RNG",
        old='info = meta["ranks"][me if me < len(meta["ranks"]) else 0]',
        new='info = meta["ranks"][0]',
        caught_by=CKPT("resumed_training", "RNG after resuming", names=RANK, world_sizes="2"),
    ),
    # -- pipeline V schedules ---------------------------------------------------------------------------------
    Mutant(
        "pipeline_v_chunks_looped",
        "pipeline",
        "split_into_v_chunks gives rank s chunk p + s (interleaving's loop) instead of chunk 2p - 1 - s",
        old="chunks[2 * num_stages - 1 - stage]]",
        new="chunks[num_stages + stage]]",
        caught_by=PIPELINE_V("v_chunks_are", "split_into_v_chunks", names=()),
    ),
    Mutant(
        "pipeline_zbv_warmup_short",
        "pipeline",
        "ZB-V warms up with 2(p - r) - 2 forwards of chunk 0 instead of 2(p - r) - 1",
        old='plan.add("F0 " * (2 * (p - r) - 1))',
        new='plan.add("F0 " * (2 * (p - r) - 2))',
        caught_by=PIPELINE_V("zero_bubble_v_runs_torch_order", "zero_bubble_v_schedule", names=()),
    ),
    Mutant(
        "pipeline_zbv_cooldown_ws_chunk0_first",
        "pipeline",
        "ZB-V's cool-down runs the Ws left of chunk 0 before those of chunk 1",
        old='plan.add("W1 " * (plan.runs["B", 1] - plan.runs["W", 1]) + "W0 " * (plan.runs["B", 0] - plan.runs["W", 0]))',  # noqa: E501
        new='plan.add("W0 " * (plan.runs["B", 0] - plan.runs["W", 0]) + "W1 " * (plan.runs["B", 1] - plan.runs["W", 1]))',  # noqa: E501
        caught_by=PIPELINE_V("zero_bubble_v_runs_torch_order", "zero_bubble_v_schedule", names=()),
    ),
    Mutant(
        "pipeline_dualpipev_no_overlap",
        "pipeline",
        "DualPipeV's steady state runs F1 and B0 one after the other, not as an overlapped F&B pair",
        old='"F1& B0")',
        new='"F1 B0")',
        caught_by=PIPELINE_V("dualpipe_v_runs_torch_order", "dualpipe_v_schedule", names=()),
    ),
    Mutant(
        "pipeline_dualpipev_splits_every_last_backward",
        "pipeline",
        "DualPipeV splits chunk 1's last backwards from the first pass of step 6, not from the middle one",
        old='plan.add("I1" if split else "B1")',
        new='plan.add("I1")',
        caught_by=PIPELINE_V("dualpipe_v_runs_torch_order", "dualpipe_v_schedule", names=()),
    ),
    Mutant(
        "pipeline_v_receives_in_own_order",
        "pipeline",
        "receives are posted in the receiver's own schedule order: ZB-V's crossing messages are matched wrongly",
        old="item = step.inbox[peer].pop(0)",
        new=(
            "item = step.inbox[peer].pop(step.inbox[peer].index(message) if not any(x[0] == 'header' for x in "
            "step.inbox[peer][: step.inbox[peer].index(message)]) else 0)"
        ),
        caught_by=PIPELINE_V(
            "trains_like_one_process and zb-v and not checkpoint", ("rank", "crossing", "step"), names=()
        ),
    ),
    Mutant(
        "pipeline_v_loss_on_last_rank",
        "pipeline",
        "in a V the loss (and the targets) are taken on rank p - 1, where the pipeline turns, not on rank 0",
        old="return self._place(self.num_chunks * self.num_stages - 1)[0] == self.stage",
        new="return self.stage == self.num_stages - 1",
        caught_by=PIPELINE_V("trains_like_one_process and dualpipev and not checkpoint", "rank"),
    ),
    Mutant(
        "pipeline_v_whole_backward_keeps_activations",
        "pipeline",
        "in a V every B keeps its activations for a W, even DualPipeV's whole Bs that have none",
        old="saved = step.stash[(i, k)] if split else step.stash.pop((i, k))",
        new='saved = step.stash[(i, k)] if split or self.placement == "v" else step.stash.pop((i, k))',
        caught_by=PIPELINE_V("holds_the_formulas and dualpipev", ".peak_activations is"),
    ),
    Mutant(
        "accounting_zbv_bubble_paper_zero",
        "accounting",
        "ZB-V's idle taken as (p - 1)(F + B - 2W), zero at F = B = W: the last rank's wait for its input is lost",
        old="idle = (p - 1) * max(b, 2 * (b - w))",
        new="idle = (p - 1) * (f + b - 2 * w)",
        caught_by=PIPELINE_V("accounting and zb-v", "accounting ('zb-v'", names=(), world_sizes="1"),
    ),
    Mutant(
        "accounting_dualpipev_peak_pp",
        "accounting",
        "DualPipeV's peak is taken as 2p chunk activations (ZB-V's) instead of the report's PP + 1 = 2p + 1",
        old="    return 2 * p + 1\n",
        new="    return 2 * p\n",
        caught_by=PIPELINE_V("accounting and dualpipev", "accounting ('dualpipev-peak'", names=(), world_sizes="1"),
    ),
    # -- fault tolerance --
    Mutant(
        "ft_survivor_waits_forever",
        "fault_tolerance",
        "the heartbeat thread notices a hung peer but never ends the survivor's blocked wait (no on_failure)",
        old="                self.on_failure(PeerFailure(self.rank, found[0], found[1], what, found[2]))",
        new="                pass  # the main thread will surely get an error from its collective",
        caught_by=(
            FT(
                "::test_waiting_turns_a_peer_error_into_a_peer_failure_and_a_hang_into_on_failure",
                "never got on_failure",
            ),
            FT("::test_a_hung_rank_is_noticed_by_its_missing_heartbeat", "did not report a PeerFailure"),
        ),
    ),
    Mutant(
        "ft_no_heartbeat_timeout",
        "fault_tolerance",
        "only the launcher's death notices count: a hung (stopped) peer is never declared failed",
        old="            elif now - since > self.timeout:",
        new="            elif False:",
        caught_by=FT("::test_detector_fails_a_silent_peer_after_the_timeout_and_a_dead_one_at_once", "never declared"),
    ),
    Mutant(
        "ft_error_not_named",
        "fault_tolerance",
        "a collective's error on a peer's death goes through as it is, not as a PeerFailure naming the peer",
        old="            raise PeerFailure(self.rank, found[0], found[1], what, found[2]) from error",
        new="            raise",
        # Only the unit test: in a real job the heartbeat thread's on_failure races the main thread's raise.
        caught_by=FT(
            "::test_waiting_turns_a_peer_error_into_a_peer_failure_and_a_hang_into_on_failure", "not a PeerFailure"
        ),
    ),
    Mutant(
        "ft_restart_from_newest_folder",
        "fault_tolerance",
        "the restart resumes from the newest step folder, committed or torn",
        old="    return RestartPlan(step=checkpoint.latest_checkpoint(directory) or 0, world_size=world)",
        new="    steps = [int(n.split('_')[-1]) for n in os.listdir(directory) if n.startswith('step_')]\n"
        "    return RestartPlan(step=max(steps, default=0), world_size=world)",
        caught_by=FT(
            "::test_restart_plan_takes_the_newest_committed_step_at_the_largest_dividing_world_size",
            "(committed), 4 (no commit marker)",
            names=(),
        ),
    ),
    Mutant(
        "ft_smaller_world_ignores_the_batch",
        "fault_tolerance",
        "the restart takes every healthy rank even when the global batch does not divide by their number",
        old="    world = next(w for w in range(healthy, 0, -1) if global_batch % w == 0)",
        new="    world = healthy",
        caught_by=FT(
            "::test_restart_plan_takes_the_newest_committed_step_at_the_largest_dividing_world_size",
            "healthy=5, global_batch=12",
            names=(),
        ),
    ),
    Mutant(
        "ft_restart_at_the_old_world_size",
        "fault_tolerance",
        "with no spare left the job restarts at its old world size, as if the failed rank were still there",
        old="        healthy = plan.world_size - len(failed) + replaced",
        new="        healthy = plan.world_size",
        caught_by=FT("test_without_a_spare_fsdp_restarts_smaller and w2", "(world size, start step) per attempt"),
    ),
    Mutant(
        "ft_spare_not_used",
        "fault_tolerance",
        "the spares are never used: every failure shrinks the job",
        old="        replaced = min(spares, len(failed))",
        new="        replaced = 0",
        caught_by=FT("test_survivors_report_a_killed_rank_and_a_spare and w2", "(world size, start step) per attempt"),
    ),
    Mutant(
        "ft_recovery_sends_from_the_replaced_rank",
        "fault_tolerance",
        "live recovery sends from the replaced replica to the healthy one instead of the other way round",
        old="src=healthy, dst=replaced, group=group)",
        new="src=replaced, dst=healthy, group=group)",
        caught_by=(
            FT("test_a_replaced_replica_gets", "must only send to rank"),
            FT_HIDDEN("::test_live_recovery_within_a_replica_sub_group", "must only send to rank", world_sizes="4"),
        ),
    ),
    Mutant(
        "ft_recovery_forgets_optimizer_state",
        "fault_tolerance",
        "the replica state holds the parameters and the step but not the optimizer's state",
        old='                state[f"optim/{names[id(p)]}/{key}"] = value',
        new="                pass",
        caught_by=FT("test_a_replaced_replica_gets", "the state is 16 tensors"),
    ),
    Mutant(
        "ft_recovered_step_not_advanced",
        "fault_tolerance",
        "the replaced replica keeps its own step (0) after recovery instead of the healthy replica's",
        old="    return load_replica_state(module, optimizer, received) if me == replaced else step",
        new="    if me == replaced:\n        load_replica_state(module, optimizer, received)\n    return step",
        caught_by=FT("test_a_replaced_replica_gets", "recover_replica returned step 0"),
    ),
]


def _collect_area_tables() -> None:
    """Append the rows of every ``table_<area>.py`` beside this file (one file per area, so that work on several
    parts at once never edits the same catalogue). Imported last: those files import ``Check``, ``Mutant`` and
    the partials above from this module."""
    import importlib
    from pathlib import Path

    for path in sorted(Path(__file__).parent.glob("table_*.py")):
        MUTANTS.extend(importlib.import_module(f"{__package__}.{path.stem}").MUTANTS)


_collect_area_tables()
BY_ID = {m.id: m for m in MUTANTS}
