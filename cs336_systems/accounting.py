"""Back-of-the-envelope numbers for distributed training: memory, communication, bubbles, FLOPs.

Your task: implement each function from its docstring when its part's handout asks for it. The
sections follow the course: §1.7 (the alpha-beta model), §5.6 (pipeline schedules), Part 6 (memory,
communication, FLOPs, activations), §7.4 (placement and planning), §8.4 and §9.4. They are pure
functions (no communication); the tests check them against the numbers in the papers cited below
and against random inputs, and check that bad input raises ``ValueError``/``TypeError`` naming the
argument. Counts of whole things must be ``int`` (a float raises ``TypeError`` naming the argument,
even 8.0): world sizes and degrees of parallelism (``world_size``, ``dp``, ``tp``, ``pp``, ``cp``,
``ep``, ``gpus_per_node``, ``num_nodes``), stages, chunks, microbatches (``microbatch``,
``global_batch``, ``held_microbatches``), ``zero_stage``, layers, heads, experts, ``top_k`` and the
sizes of a tensor (``seq``, ``batch``, ``d_model``, ``d_ff``, ``head_dim``). Amounts may be an int or
a float: parameters (7.5e9, also ``expert_params``), tokens (``num_tokens``, ``tokens``), bytes
(``num_bytes``, ``gpu_memory_bytes``, ``activation_bytes``, ``input_bytes``), bytes per element or
parameter, seconds and rates (``alpha``, ``beta``, ``*_time``, ``*_per_second``). Bytes are plain
bytes (divide by 1e9 for the GB of the papers, by 2**30 for GiB).

    from cs336_systems.accounting import zero_memory_per_rank
    zero_memory_per_rank(7.5e9, 64, zero_stage=3) / 1e9     # 1.875 GB, the ZeRO paper's Figure 1

Sources:
    ZeRO            Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
                    Parameter Models", Section 5 and Figure 1 (mixed-precision Adam: 2 + 2 + 12
                    bytes per parameter, K = 12).
    ring all-reduce Patarasuk & Yuan 2009: reduce-scatter then all-gather, 2(N-1)/N of the data.
    bubbles         Huang et al. 2019 (GPipe); Narayanan et al. 2021 (Megatron-LM, interleaved 1F1B).
    FLOPs           Kaplan et al. 2020: C = 6ND (2ND forward, 4ND backward).
    activations     Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
                    Transformer Models", Section 4 (16-bit activations, dropout masks of 1 byte).
"""

from __future__ import annotations

__all__ = [
    "all_reduce_time",
    "all_reduce_crossover_bytes",
    "fit_alpha_beta",
    "schedule_bubble_fraction",
    "schedule_peak_activations",
    "zbv_bubble_fraction",
    "zbv_peak_activations",
    "dualpipev_bubble_fraction",
    "dualpipev_peak_activations",
    "pipeline_activation_bytes",
    "recompute_training_flops",
    "hfu",
    "training_memory_bytes",
    "zero_memory_per_rank",
    "ring_all_reduce_bytes_per_rank",
    "pipeline_bubble_fraction",
    "training_flops",
    "mfu",
    "activation_memory_per_layer",
    "parallel_memory_per_rank",
    "communication_bytes_per_rank",
    "plan_parallelism",
    "moe_all_to_all_bytes",
    "expert_parameter_bytes_per_rank",
    "context_parallel_activation_memory_per_layer",
    "ring_attention_bytes_per_rank",
    "ring_attention_min_block_tokens",
    "checkpoint_bytes_per_rank",
    "checkpoint_interval",
    "checkpoint_goodput",
    "async_checkpoint_interval",
    "transformer_num_params",
    "capstone_bytes_per_rank",
    "plan_capstone",
]


# ---------------------------------------------------------------------------------------------
# ## Task 1.7: the alpha-beta model of all-reduce (handouts/01-collectives.md §1.7)
# The ring against recursive doubling: modelled time, where they cross, alpha and beta fitted.
# ---------------------------------------------------------------------------------------------


def all_reduce_time(num_bytes, world_size, algorithm, alpha, beta) -> float:
    """Modelled seconds of an all-reduce of ``num_bytes`` over ``world_size`` ranks (the alpha-beta model).

    ``alpha`` is seconds per message (latency), ``beta`` seconds per byte (1 / bandwidth); with
    M = num_bytes, N = world_size and p = 2**floor(log2 N):
        "ring"                 2(N-1) * alpha + 2(N-1)/N * M * beta
        "recursive_doubling"   s * (alpha + M * beta),  s = log2 p, plus 2 if N != p (fold in and out)
    Both are 0 for N = 1. Raises ``ValueError`` for another ``algorithm``, a negative ``num_bytes``,
    ``alpha`` or ``beta``, or ``world_size < 1``, and ``TypeError`` for a non-integer ``world_size``,
    naming the argument.
    """
    raise NotImplementedError("Task 1.7 (alpha-beta model): see handouts/01-collectives.md §1.7")


def all_reduce_crossover_bytes(world_size, alpha, beta) -> float | None:
    """The message size M* above which the ring is modelled faster than recursive doubling.

    Equal times give (2(N-1) - s) * alpha = (s - 2(N-1)/N) * M* * beta, so
        M* = (2(N-1) - s) * alpha / ((s - 2(N-1)/N) * beta)        (N = 4: M* = 8 alpha / beta)
    Returns ``None`` when recursive doubling is never slower: N <= 2 (the same bytes in fewer
    messages) or ``beta == 0``. Raises like ``all_reduce_time``.
    """
    raise NotImplementedError("Task 1.7 (alpha-beta model): see handouts/01-collectives.md §1.7")


def fit_alpha_beta(num_bytes, seconds, algorithms, world_size) -> tuple[float, float]:
    """The (alpha, beta) that best explain measured all-reduce times over ``world_size`` ranks.

    Measurement i took ``seconds[i]`` for ``num_bytes[i]`` bytes with ``algorithms[i]`` ("ring" or
    "recursive_doubling"); the model says a_i * alpha + b_i * beta (a_i messages and b_i bytes on
    the critical path, as in ``all_reduce_time``). Least squares on the relative error,
        minimise  sum_i ((a_i * alpha + b_i * beta - t_i) / t_i) ** 2,   alpha, beta >= 0,
    so that a 4 KiB and a 64 MiB message weigh alike. Raises ``ValueError`` naming the argument
    when the three sequences differ in length or hold fewer than two measurements, a time is <= 0,
    or ``world_size`` is below 2 (every modelled time is 0 there).
    """
    raise NotImplementedError("Task 1.7 (alpha-beta model): see handouts/01-collectives.md §1.7")


# ---------------------------------------------------------------------------------------------
# ## Task 5.6: pipeline schedules in numbers (handouts/05-pipeline.md §5.6)
# Bubble and peak activations per schedule, activation memory with checkpointing, recomputation's
# FLOPs (6ND -> 8ND) and the gap it opens between MFU and HFU.
# ---------------------------------------------------------------------------------------------

PIPELINE_SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")  # what schedule= may be


def schedule_bubble_fraction(schedule, num_stages, num_microbatches, num_chunks=1, forward_time=1.0,
                             backward_input_time=1.0, backward_weight_time=1.0) -> float:  # fmt: skip
    """Fraction of a step each stage idles under ``schedule``, with p = num_stages, m = num_microbatches.

        "gpipe", "1f1b"     (p - 1) / (m + p - 1)
        "interleaved"       (p - 1) / (v·m + p - 1)                  v = num_chunks
        "zb-h1"             (p - 1)(F + B - W) / (m(F + B + W) + (p - 1)(F + B - W))
    where F, B, W are the times of a forward, of the input-gradient half of the backward and of
    its weight-gradient half (``forward_time``, ``backward_input_time``, ``backward_weight_time``;
    the other schedules' answers do not depend on them). F = B = W: ZB-H1 idles (p - 1) units
    against 1F1B's 3(p - 1); p = 4, m = 8: 0.1111 against 0.2727.

    ZB-H1's formula holds for m >= p and W <= F: otherwise ``ValueError`` naming
    ``num_microbatches`` / ``backward_weight_time``. Raises ``ValueError`` for an unknown
    ``schedule``, counts < 1, times <= 0, ``num_chunks > 1`` outside "interleaved" and m not a
    multiple of p with chunks; ``TypeError`` for a non-integer count or a non-number time.
    """
    raise NotImplementedError("Task 5.6 (pipeline accounting): see handouts/05-pipeline.md §5.6")


def schedule_peak_activations(schedule, num_stages, num_microbatches, stage, num_chunks=1) -> int:
    """The most (microbatch, chunk) pairs stage ``stage`` holds at once: from an F to the end of its
    backward (its B, or its W under "zb-h1").

        "gpipe"         m
        "1f1b"          min(p - s, m)
        "interleaved"   min(2(p - s - 1) + (v - 1)·p + 1, v·m)  chunk activations, each 1/v of a stage's
                        (v = 1: 1F1B's)
        "zb-h1"         min(p, m)  on every stage: 1F1B's peak (stage 0's)
    Raises like ``schedule_bubble_fraction``, and ``ValueError`` unless 0 <= ``stage`` < p.
    """
    raise NotImplementedError("Task 5.6 (pipeline accounting): see handouts/05-pipeline.md §5.6")


def pipeline_activation_bytes(held_microbatches, activation_bytes, input_bytes, checkpoint=False) -> float:
    """Bytes of activations a stage holds at its peak, for ``held_microbatches`` microbatches in flight.

    Without checkpointing each keeps everything its backward needs: ``held * activation_bytes``.
    With full activation checkpointing each keeps only its stage input, and one microbatch at a
    time is recomputed in full: ``held * input_bytes + activation_bytes``. Example: 4 microbatches
    of a stage saving 34·sbh bytes per layer over 8 layers, input 2·sbh: 1088·sbh without, 280·sbh with.

    Raises ``ValueError`` for a negative number and ``TypeError`` for a non-number or a non-bool
    ``checkpoint``, naming the argument.
    """
    raise NotImplementedError("Task 5.6 (pipeline accounting): see handouts/05-pipeline.md §5.6")


def recompute_training_flops(num_params, num_tokens) -> float:
    """FLOPs the hardware runs to train with full activation checkpointing: ``8 * N * D``.

    The 6ND of ``training_flops`` plus one more forward (2ND) to recompute the activations during
    the backward. Raises like ``training_flops``.
    """
    raise NotImplementedError("Task 5.6 (pipeline accounting): see handouts/05-pipeline.md §5.6")


def hfu(tokens_per_second, num_params, peak_flops_per_second, checkpoint=True) -> float:
    """Hardware FLOPs utilisation: the FLOP/s the hardware actually runs over its peak.

    ``8 * N * tokens_per_second / peak`` with full checkpointing (the recomputed forward counts),
    ``6 * N * tokens_per_second / peak`` without, when it equals ``mfu``. With checkpointing
    MFU = 3/4 HFU: 1e9 parameters at 10_000 tokens/s on 989e12 FLOP/s -> HFU 0.0809, MFU 0.0607.

    Raises like ``mfu``, and ``TypeError`` for a non-bool ``checkpoint``.
    """
    raise NotImplementedError("Task 5.6 (pipeline accounting): see handouts/05-pipeline.md §5.6")


# ## Task 5.7: ZB-V in numbers (handouts/05-pipeline.md §5.7)


def zbv_bubble_fraction(num_stages, num_microbatches, forward_time=1.0, backward_input_time=1.0,
                        backward_weight_time=1.0) -> float:  # fmt: skip
    """Fraction of a step each rank idles under ZB-V (two chunks per rank in a V, p = num_stages).

        idle per rank = (p - 1)·max(B, 2(B - W)),  bubble = idle / (2m(F + B + W) + idle)
    where F, B, W are the times of one *chunk's* forward, input-gradient and weight-gradient
    passes. F = B = W: idle (p - 1)F, which is the last rank waiting for its first activation; every
    rank is busy from its own first action to its own last (the paper's zero bubble). p = 4, m = 8:
    3 / 51 = 0.0588 (ZB-H1: 0.1111, 1F1B: 0.2727 on the same model).

    Holds for m >= 2p - 1, F <= B and W <= B: otherwise ``ValueError`` naming ``num_microbatches``,
    ``forward_time`` / ``backward_weight_time``. Raises like ``schedule_bubble_fraction``.
    """
    raise NotImplementedError("Task 5.7 (ZB-V accounting): see handouts/05-pipeline.md §5.7")


def zbv_peak_activations(num_stages, num_microbatches) -> int:
    """The most chunk activations (microbatch, chunk) a rank holds at once under ZB-V, F to W: 2p.

    The same on every rank: p microbatches of the rank's whole layers, 1F1B's stage 0. Needs
    m >= 2p - 1 (``ValueError`` naming ``num_microbatches``); raises like ``schedule_peak_activations``.
    """
    raise NotImplementedError("Task 5.7 (ZB-V accounting): see handouts/05-pipeline.md §5.7")


# ## Task 5.8: DualPipeV in numbers (handouts/05-pipeline.md §5.8)


def dualpipev_bubble_fraction(num_stages, num_microbatches, forward_time=1.0, backward_time=2.0,
                              backward_weight_time=1.0, overlapped_time=None) -> float:  # fmt: skip
    """Fraction of a step the busiest-idling ranks (p - 2 and p - 1) idle under DualPipeV.

        idle = (p - 1)(F&B + B - 3W)                         (DeepSeek-V3, Table 2: (PP/2 - 1)(F&B + B - 3W))
        busy = (2m - 2p - 1)·F&B + (2p + 1)(F + B)           rank p - 1: its F&B pairs and the rest
        bubble = idle / (busy + idle)
    with F a chunk's forward (``forward_time``), B its whole backward (``backward_time``), W the
    weight half of it (``backward_weight_time``) and F&B an overlapped forward-and-backward pair
    (``overlapped_time``, default F + B: no overlap gain). p = 4, m = 16, F = 1, B = 2, W = 1,
    F&B = 2.5: idle 4.5, busy 84.5, bubble 0.0506 (F&B = 3, no gain: 6 / 102 = 0.0588).

    The report's formula is exact when the forward and the input-gradient half take the same time
    (F = B - W) and max(F, B) <= F&B <= F + B: otherwise ``ValueError`` naming ``backward_time`` /
    ``overlapped_time``. Needs m >= 2p (``num_microbatches``); W < B (``backward_weight_time``).
    """
    raise NotImplementedError("Task 5.8 (DualPipeV accounting): see handouts/05-pipeline.md §5.8")


def dualpipev_peak_activations(num_stages, num_microbatches) -> int:
    """The most chunk activations a rank holds at once under DualPipeV (F to the end of its backward): 2p + 1.

    The report's PP + 1 with PP = 2p chunks, on every rank. Needs m >= 2p (``ValueError`` naming
    ``num_microbatches``); raises like ``schedule_peak_activations``.
    """
    raise NotImplementedError("Task 5.8 (DualPipeV accounting): see handouts/05-pipeline.md §5.8")


# ---------------------------------------------------------------------------------------------
# ## Task 6.1: memory (handouts/06-accounting.md §6.1)
# Model states (parameters, gradients, optimizer state) without and with ZeRO.
# ---------------------------------------------------------------------------------------------


def training_memory_bytes(num_params, *, param_bytes=2, grad_bytes=2, optimizer_bytes=12) -> int:
    """Bytes of model states (parameters + gradients + optimizer state) for one unsharded replica.

    ``num_params * (param_bytes + grad_bytes + optimizer_bytes)``, rounded to the nearest int.
    The defaults are mixed-precision Adam (ZeRO paper, K = 12): fp16 parameters (2) and gradients
    (2), plus an fp32 master copy, momentum and variance (4 + 4 + 4). Activations, buffers and
    fragmentation are not included. Example: 7.5e9 parameters -> 120e9 bytes.

    Raises ``TypeError`` for a non-number and ``ValueError`` for a negative or non-finite value,
    naming the argument.
    """
    raise NotImplementedError("Task 6.1 (memory): see handouts/06-accounting.md §6.1")


def zero_memory_per_rank(
    num_params, world_size, zero_stage, *, param_bytes=2, grad_bytes=2, optimizer_bytes=12
) -> float:
    """Bytes of model states on each of ``world_size`` data-parallel ranks under ZeRO ``zero_stage``.

    With P = num_params, N = world_size and (p, g, o) the bytes per parameter:
        stage 0 (plain DDP)                     P * (p + g + o)
        stage 1 (P_os: optimizer state sharded)  P * (p + g) + P * o / N
        stage 2 (P_os+g: and gradients)          P * p + P * (g + o) / N
        stage 3 (P_os+g+p: and parameters)       P * (p + g + o) / N
    Example (ZeRO paper, Figure 1): P = 7.5e9, N = 64 -> 120, 31.4, 16.6, 1.9 GB for stages 0-3.

    Raises ``ValueError`` for a ``zero_stage`` outside 0-3, ``world_size < 1`` or a negative count, and
    ``TypeError`` for a non-integer ``zero_stage`` or world size, naming the argument.
    """
    raise NotImplementedError("Task 6.1 (memory): see handouts/06-accounting.md §6.1")


# ---------------------------------------------------------------------------------------------
# ## Task 6.2: communication and bubbles (handouts/06-accounting.md §6.2)
# Bytes a ring all-reduce sends per rank; idle time of a pipeline.
# ---------------------------------------------------------------------------------------------


def ring_all_reduce_bytes_per_rank(num_bytes, world_size) -> float:
    """Bytes each rank sends in a ring all-reduce of a ``num_bytes`` buffer over ``world_size`` ranks.

    Ring reduce-scatter (N-1 steps of M/N bytes) then ring all-gather (the same again):
    ``2 * (N - 1) / N * M``; 0 for N = 1. This is also what ZeRO stage 2 pays (a reduce-scatter of
    the gradients plus an all-gather of the updated parameters), so stage 2 costs no more than DDP.

    Raises ``ValueError`` for negative ``num_bytes`` or ``world_size < 1`` and ``TypeError`` for a
    non-integer ``world_size``, naming the argument.
    """
    raise NotImplementedError("Task 6.2 (communication and bubbles): see handouts/06-accounting.md §6.2")


def pipeline_bubble_fraction(num_stages, num_microbatches, num_chunks=1) -> float:
    """Fraction of a pipeline step that each stage spends idle: ``(p - 1) / (v * m + p - 1)``.

    p = num_stages, m = num_microbatches, v = num_chunks (model chunks per device in the
    interleaved 1F1B schedule; 1 for GPipe and plain 1F1B). A step lasts (m + (p - 1) / v) microbatch
    times, of which m are useful. Example: p = 4, m = 8 -> 3 / 11 = 0.2727; p = 1 -> 0.

    Raises ``ValueError`` for any argument < 1 and ``TypeError`` for a non-integer, naming it.
    """
    raise NotImplementedError("Task 6.2 (communication and bubbles): see handouts/06-accounting.md §6.2")


# ---------------------------------------------------------------------------------------------
# ## Task 6.3: FLOPs and MFU (handouts/06-accounting.md §6.3)
# Training compute (6ND) and model FLOPs utilisation.
# ---------------------------------------------------------------------------------------------


def training_flops(num_params, num_tokens) -> float:
    """FLOPs to train a dense model of ``num_params`` on ``num_tokens`` tokens: ``6 * N * D``.

    Each token costs 2N FLOPs forward (one multiply-add per parameter) and 4N backward (grads with
    respect to activations and to weights); attention's sequence-length term is ignored.

    Raises ``ValueError`` for a negative count and ``TypeError`` for a non-number, naming it.
    """
    raise NotImplementedError("Task 6.3 (FLOPs and MFU): see handouts/06-accounting.md §6.3")


def mfu(tokens_per_second, num_params, peak_flops_per_second) -> float:
    """Model FLOPs utilisation: achieved training FLOP/s over the hardware's peak.

    ``6 * num_params * tokens_per_second / peak_flops_per_second`` (recomputation is not counted
    as useful work, which is what makes it *model* FLOPs). Example: 1e9 parameters at 10_000
    tokens/s on a 989e12 FLOP/s H100 (dense bf16) -> 0.0607.

    Raises ``ValueError`` for a negative count or a peak <= 0 and ``TypeError`` for a non-number.
    """
    raise NotImplementedError("Task 6.3 (FLOPs and MFU): see handouts/06-accounting.md §6.3")


# ---------------------------------------------------------------------------------------------
# ## Task 6.4: activation memory (handouts/06-accounting.md §6.4)
# One transformer layer's saved activations, with tensor and sequence parallelism.
# ---------------------------------------------------------------------------------------------


def activation_memory_per_layer(seq, batch, d_model, heads, tp=1, sequence_parallel=False) -> float:
    """Bytes of activations one transformer layer keeps for backward (16-bit values), per GPU.

    Korthikanti et al. 2022, with s = seq, b = batch, h = d_model, a = heads, t = tp:
        no parallelism                  s*b*h * (34 + 5*a*s/h)
        tensor parallel (t ways)        s*b*h * (10 + 24/t + 5*a*s/(h*t))
        tensor + sequence parallel      s*b*h / t * (34 + 5*a*s/h)
    34 = 11 (attention block) + 19 (MLP block) + 4 (two layer norms); 5as/h is the attention
    scores, softmax output and its dropout mask. The 10 left unsplit by plain TP are the layer
    norms and dropouts, which sequence parallelism splits along s. ``sequence_parallel`` with
    tp = 1 is the first row.

    Raises ``ValueError`` for counts < 1 or ``heads`` not divisible by ``tp`` (TP splits heads), and
    ``TypeError`` for a non-integer count or a non-bool ``sequence_parallel``, naming the argument.
    """
    raise NotImplementedError("Task 6.4 (activation memory): see handouts/06-accounting.md §6.4")


# ---------------------------------------------------------------------------------------------
# ## Task 7.4: placement and planning (handouts/07-mesh.md §7.4)
# Memory and traffic of one (dp, tp, pp, ZeRO) configuration, and a planner that picks one.
# ---------------------------------------------------------------------------------------------

RECOMPUTE = ("none", "selective", "full")  # what recompute= may be


def parallel_memory_per_rank(num_params, num_layers, d_model, heads, seq, microbatch, *, dp, tp, pp, zero_stage,
                            num_microbatches, recompute="selective", expert_params=0, ep=1) -> float:  # fmt: skip
    """Bytes per GPU of one (dp, tp, pp, ZeRO) configuration: model states plus activations.

    Model states (mixed-precision Adam, 2 + 2 + 12 bytes per parameter): the dense parameters
    (``num_params - expert_params``) are split ``tp * pp`` ways and the expert parameters of an MoE
    ``ep * pp`` ways (experts are not tensor-parallel here); each piece's states are then sharded
    over its data-parallel replicas by ZeRO ``zero_stage``:
        zero_memory_per_rank(dense / (tp * pp), dp, zero_stage)
        + zero_memory_per_rank(expert_params / (ep * pp), dp // ep, zero_stage)
    (expert parallelism runs inside the dp axis, so ``dp`` must divide by ``ep``).
    Activations (16-bit; sequence parallelism whenever tp > 1): one layer keeps
        recompute="none"       activation_memory_per_layer(seq, microbatch, d_model, heads, tp, True)
        recompute="selective"  34 * seq * microbatch * d_model / tp   (attention scores recomputed,
                               as FlashAttention does: Korthikanti et al.'s selective recomputation)
        recompute="full"       2 * seq * microbatch * d_model / tp    (only each layer's input kept)
    and the first stage of a 1F1B pipeline holds ``ceil(num_layers / pp)`` layers for
    ``min(pp, num_microbatches)`` microbatches at once (one when pp = 1). Embeddings, logits,
    temporary buffers and fragmentation are not counted.

    Example (Llama 3 405B: 126 layers, h = 16384, 128 heads, seq 8192, microbatch 1, TP 8, PP 16,
    DP 128, ZeRO-2, 16 microbatches): 6.7e9 bytes of states + 73.0e9 of activations = 79.7e9.

    Raises ``TypeError``/``ValueError`` as the functions above for bad counts (naming the
    argument), and ``ValueError`` for an unknown ``recompute``, ``dp % ep != 0`` or
    ``expert_params > num_params``.
    """
    raise NotImplementedError("Task 7.4 (placement and planning): see handouts/07-mesh.md §7.4")


def communication_bytes_per_rank(num_params, num_layers, d_model, seq, microbatch, *, dp, tp, pp, zero_stage,
                                num_microbatches) -> dict[str, float]:  # fmt: skip
    """Bytes one GPU sends per training step along each mesh axis (16-bit values, ring collectives).

    With A = 2 * seq * microbatch * d_model, the bytes of one microbatch's activations:
        "tp"  4 all-reduces of A per layer and microbatch (attention and MLP, forward and backward;
              sequence parallelism's all-gather + reduce-scatter pairs move the same bytes):
              4 * ring_all_reduce_bytes_per_rank(A, tp) * ceil(num_layers / pp) * num_microbatches
        "pp"  a middle stage sends one activation forward and one gradient backward per
              microbatch: 2 * A * num_microbatches (0 when pp = 1)
        "dp"  the 2-byte gradients of this GPU's num_params / (tp * pp) parameters, G bytes:
              ring_all_reduce_bytes_per_rank(G, dp) for ZeRO stages 0-2 (stage 2's reduce-scatter
              plus parameter all-gather is the same traffic), 1.5 times that for stage 3.
    Dense models only (an MoE's all-to-all is not counted). Raises as ``parallel_memory_per_rank``.
    """
    raise NotImplementedError("Task 7.4 (placement and planning): see handouts/07-mesh.md §7.4")


def plan_parallelism(num_params, num_layers, d_model, heads, seq, global_batch, *, gpus_per_node, num_nodes,
                     gpu_memory_bytes, microbatch=1, recompute="selective") -> dict:  # fmt: skip
    """The (dp, tp, pp, ZeRO stage) these rules choose for a dense transformer, and why.

    Rules (Narayanan et al. 2021, §3.3: "tensor parallelism up to the GPUs of a server, then
    pipeline parallelism across servers"; data parallelism for the rest):
      1. TP stays inside a node, whose links carry its 4 all-reduces per layer: tp is a power of two
         <= gpus_per_node that divides heads. Try tp = 1, 2, 4, ... with pp = 1 and keep the
         smallest that fits: no wider than needed.
      2. If none fits, take the widest such tp and pipeline across nodes: the smallest
         pp = 2, 4, 8, ... (pp <= num_layers) that fits.
      3. dp = gpus_per_node * num_nodes / (tp * pp) must be an integer and divide
         global_batch / microbatch; num_microbatches = global_batch / (dp * microbatch).
      4. For each candidate, the lowest ZeRO stage among 0, 1, 2 that fits (they cost no more
         traffic than plain data parallelism); only if no candidate fits that way, the same search
         again with ZeRO-3.
    "Fits" means ``parallel_memory_per_rank(...) <= gpu_memory_bytes`` (``recompute`` as there).

    Returns ``{"dp", "tp", "pp", "zero_stage", "num_microbatches", "memory_per_rank",
    "bytes_per_axis", "rows"}``: the chosen configuration, its memory and
    ``communication_bytes_per_rank``, and ``rows``, one dict per configuration tried, in order, with
    keys ``tp, pp, dp, zero_stage, memory_per_rank, fits, reason`` (the table the script prints).
    Raises ``ValueError`` if nothing fits (naming ``gpu_memory_bytes``) and for bad counts.
    """
    raise NotImplementedError("Task 7.4 (placement and planning): see handouts/07-mesh.md §7.4")


# ---------------------------------------------------------------------------------------------
# ## Task 8.4: expert parallelism (handouts/08-expert-parallel.md §8.4)
# One MoE layer's all-to-all traffic and its experts' memory per rank (handouts/08-expert-parallel.md).
# ---------------------------------------------------------------------------------------------


def moe_all_to_all_bytes(tokens, d_model, top_k, world_size, bytes_per_element=2) -> float:
    """Bytes one rank sends to *other* ranks for one MoE layer in one training step (forward and
    backward), under expert parallelism over ``world_size`` ranks, with even routing and no drops.

    Each of the rank's ``tokens`` tokens goes to ``top_k`` experts, so every exchange moves
    tokens * top_k rows of ``d_model`` values; a step makes four (dispatch and combine in forward,
    their reverses in backward), and with even routing (W - 1)/W of each leaves the rank:
        4 * tokens * top_k * d_model * (W - 1) / W * bytes_per_element
    Example: 4096 tokens, d_model 4096, top-2, W = 8, bf16: 4 * 4096 * 2 * 4096 * 7/8 * 2 = 234.9e6.

    Raises ``TypeError`` for a non-number (non-int for d_model, top_k, world_size) and
    ``ValueError`` for a negative ``tokens``/``bytes_per_element`` or a count < 1, naming the argument.
    """
    raise NotImplementedError("Task 8.4 (expert-parallel accounting): see handouts/08-expert-parallel.md §8.4")


def expert_parameter_bytes_per_rank(d_model, d_ff, num_experts, world_size, bytes_per_param=2, bias=True) -> float:
    """Bytes of expert parameters on each of ``world_size`` expert-parallel ranks.

    Every expert is a ``models.MLP``: fc1 (d_ff, d_model) + bias (d_ff,), fc2 (d_model, d_ff) + bias
    (d_model,). A rank holds num_experts / world_size whole experts:
        num_experts / W * (2 * d_model * d_ff + d_ff + d_model) * bytes_per_param
    (without biases: 2 * d_model * d_ff per expert). The replicated router (d_model * num_experts)
    is not included. Use bytes_per_param = 16 for the model states of mixed-precision Adam.

    Raises ``TypeError`` for a non-int count or a non-bool ``bias``, and ``ValueError`` for a count
    < 1, a negative ``bytes_per_param`` or ``num_experts`` not divisible by ``world_size``, naming the
    argument.
    """
    raise NotImplementedError("Task 8.4 (expert-parallel accounting): see handouts/08-expert-parallel.md §8.4")


# ---------------------------------------------------------------------------------------------
# ## Task 9.4: context parallelism (handouts/09-context-parallel.md §9.4)
# Ring attention's activations, bytes and overlap bound per rank (handouts/09-context-parallel.md).
# ---------------------------------------------------------------------------------------------


def context_parallel_activation_memory_per_layer(seq, batch, d_model, heads, cp, tp=1) -> float:
    """Bytes of activations one transformer layer keeps for backward (16-bit values), per GPU, with
    context parallelism over ``cp`` ranks and tensor + sequence parallelism over ``tp`` ranks.

    Every activation is split along the sequence by c = cp (and by t = tp as in Part 6's sequence
    parallelism), and ring attention keeps no s x s score matrix (backward recomputes each block's
    probabilities from the saved log-sum-exp), so Part 6's 5as/h term is gone:
        34 * s * b * h / (t * c)
    (the log-sum-exp, s*b*a/(t*c) floats, is left out). Example: s = 131072, b = 1, h = 8192, a = 64,
    cp = 8, tp = 8: 34 * 131072 * 8192 / 64 = 570_425_344 bytes.

    Raises ``TypeError`` for a non-int count and ``ValueError`` for a count < 1, ``seq`` not divisible
    by ``cp`` or ``heads`` not divisible by ``tp``, naming the argument.
    """
    raise NotImplementedError("Task 9.4 (context-parallel accounting): see handouts/09-context-parallel.md §9.4")


def ring_attention_bytes_per_rank(seq, batch, kv_heads, head_dim, cp, bytes_per_element=2,
                                  grad_bytes_per_element=4) -> float:  # fmt: skip
    """Bytes one rank sends for one attention layer in one training step (forward and backward) of
    ring attention over ``cp`` ranks.

    A key block and a value block each hold B = batch * kv_heads * (seq / c) * head_dim values.
    Forward: c - 1 hops of both blocks. Backward: c - 1 hops again, plus c hops of their gradients
    (accumulated in float32: ``grad_bytes_per_element``), the last one bringing each block's
    gradient home:
        2 * B * ((2c - 2) * e + c * g)          (0 when c = 1)
    Example: seq 32768, batch 1, 8 key/value heads of 128, cp = 8, bf16 with float32 gradients:
    B = 4_194_304, 2 * B * (14 * 2 + 8 * 4) = 503_316_480 bytes.

    Raises ``TypeError`` for a non-int count (non-number for the byte sizes) and ``ValueError`` for a
    count < 1, a negative byte size or ``seq`` not divisible by ``cp``, naming the argument.
    """
    raise NotImplementedError("Task 9.4 (context-parallel accounting): see handouts/09-context-parallel.md §9.4")


def ring_attention_min_block_tokens(heads, kv_heads, flops_per_second, bytes_per_second, bytes_per_element=2,
                                    causal=False) -> float:  # fmt: skip
    """Tokens per rank (c = s / cp) from which a ring hop hides behind its step's compute.

    One step attends c queries to c keys: 4 * b * a * c^2 * d FLOPs (q.k^T and p.v, 2 FLOPs per
    multiply-add; a causal zigzag block computes half of that) while the hop moves a key and a value
    block, 2 * b * g * c * d * e bytes. Compute time >= transfer time when
        c >= (g / a) * e * F / (2 * W)              (twice that with ``causal``)
    with a = heads, g = kv_heads, F = flops_per_second, W = bytes_per_second, e = bytes_per_element.
    Example: H100 bf16 (F = 989e12), a = g, one 400 Gb/s NIC (W = 50e9): 19_780 tokens.

    Raises ``TypeError`` for a non-number (non-int head count, non-bool ``causal``) and ``ValueError``
    for a head count < 1, ``heads`` not divisible by ``kv_heads``, or a rate that is not > 0, naming
    the argument.
    """
    raise NotImplementedError("Task 9.4 (context-parallel accounting): see handouts/09-context-parallel.md §9.4")


# ---------------------------------------------------------------------------------------------
# ## Task 10.7: failures in numbers (handouts/10-failures.md §10.7)
# What a checkpoint costs each rank, how often to take one (Young-Daly), the fraction of time that still
# trains when ranks fail (goodput), and what asynchronous saving changes.
# ---------------------------------------------------------------------------------------------


def checkpoint_bytes_per_rank(
    num_params, world_size, zero_stage, *, param_bytes=2, optimizer_bytes=12, balance_replicated=False
) -> float:
    """Bytes the busiest of ``world_size`` data-parallel ranks writes for one checkpoint under ZeRO ``zero_stage``.

    A checkpoint holds the parameters and the optimizer state (not the gradients): P * (p + o) bytes in
    all, with P = num_params and (p, o) the bytes per parameter. A sharded tensor is written by the rank
    that holds the shard; a replicated tensor (every rank has it) is written once: by rank 0 alone, or,
    with ``balance_replicated``, in equal slices by every rank (torch.distributed.checkpoint spreads
    replicated items over the ranks this way). The busiest rank sets the save time:
        stage 0 (DDP)       P * (p + o)              (rank 0 writes everything)
        stage 1, 2          P * p + P * o / N        (rank 0: the parameters and its optimizer shard)
        stage 3 (FSDP)      P * (p + o) / N
    and P * (p + o) / N at every stage with ``balance_replicated``.
    Example: P = 70e9, N = 1024, p = 2, o = 12: 980 GB in all; 980e9 at stage 0, 140.8e9 at stage 1,
    0.957e9 at stage 3.

    Raises ``ValueError`` for a ``zero_stage`` outside 0-3, ``world_size < 1`` or a negative count, and
    ``TypeError`` for a non-integer ``zero_stage`` or world size or a non-bool ``balance_replicated``,
    naming the argument.
    """
    raise NotImplementedError("Task 10.7 (failure accounting): see handouts/10-failures.md §10.7")


def checkpoint_interval(save_seconds, mtbf_seconds) -> float:
    """The Young-Daly checkpoint interval: seconds of training between two saves, sqrt(2 * C * M).

    C = ``save_seconds``, the time a save stops training; M = ``mtbf_seconds``, the mean time between
    failures of the whole job (one GPU's MTBF divided by the number of GPUs). It minimises the first-order
    waste of ``checkpoint_goodput``: C / tau (saving) + tau / (2 M) (work lost since the last save).
    Example: C = 60 s, M = 11_135 s (Llama 3 405B: 419 unexpected interruptions in 54 days):
    1156 s, about 19 minutes.

    Raises ``TypeError`` for a non-number and ``ValueError`` for a time that is not > 0, naming the argument.
    """
    raise NotImplementedError("Task 10.7 (failure accounting): see handouts/10-failures.md §10.7")


def checkpoint_goodput(interval_seconds, save_seconds, restart_seconds, mtbf_seconds, *, write_seconds=0.0) -> float:
    """Expected fraction of wall-clock time spent on training that is kept (first order in 1 / M).

    Every ``interval_seconds`` (tau) of training the job stops for C = ``save_seconds``; a failure, on
    average every M = ``mtbf_seconds``, costs the restart R = ``restart_seconds`` plus the work since the
    newest complete checkpoint: tau / 2 on average, plus W = ``write_seconds`` when saves are asynchronous
    (the newest checkpoint lags the training by the background write; C is then only the staging time):
        goodput = 1 - C / tau - (R + tau / 2 + W) / M,       clamped at 0.
    Example: tau = 1156 s, C = 60 s, R = 600 s, M = 11_135 s: 0.842; asynchronous with C = 5 s, W = 60 s
    and tau = 334 s: 0.911.

    Raises ``TypeError`` for a non-number and ``ValueError`` for ``interval_seconds`` or ``mtbf_seconds``
    not > 0 or a negative cost, naming the argument.
    """
    raise NotImplementedError("Task 10.7 (failure accounting): see handouts/10-failures.md §10.7")


def async_checkpoint_interval(stage_seconds, write_seconds, mtbf_seconds) -> float:
    """The best interval when saves are asynchronous: max(sqrt(2 * S * M), W).

    Training stops only for the staging copy, S = ``stage_seconds``, so Young-Daly with S in place of the
    full save time; but a save cannot start before the previous one is written (W = ``write_seconds``,
    the background write), so the interval is at least W. Example: S = 5 s, W = 60 s, M = 11_135 s: 334 s.

    Raises ``TypeError`` for a non-number and ``ValueError`` for ``stage_seconds`` or ``mtbf_seconds`` not
    > 0 or a negative ``write_seconds``, naming the argument.
    """
    raise NotImplementedError("Task 10.7 (failure accounting): see handouts/10-failures.md §10.7")


# ---------------------------------------------------------------------------------------------
# ## Task 11.4: the capstone in numbers (handouts/11-capstone.md §11.4)
# The given transformer's size, and what one rank of a dp x pp x cp x tp mesh sends per step.
# ---------------------------------------------------------------------------------------------


def transformer_num_params(vocab, d_model, n_layers, n_heads, n_kv_heads, d_ff, *, moe_every=0,
                           num_experts=0) -> int:  # fmt: skip
    """Parameters of ``transformer.Transformer`` with these sizes (h = d_model, f = d_ff, a = n_heads,
    g = n_kv_heads, head_dim = h / a, E = num_experts, V = vocab):

        embedding V·h  +  head V·h + h (its RMSNorm)  +  per block: 2h (two RMSNorms)
        + attention 2·h² + 2·h·g·h/a (wq and wo h x h; wk and wv h x g·head_dim; no biases)
        + FFN: SwiGLU 3·h·f, or in an MoE block (``moe_every`` = k > 0: blocks k-1, 2k-1, ...)
          a router h·E and E experts of ``models.MLP`` (GELU, biases): E·(2·h·f + f + h).

    Example: the default TransformerConfig (V = 40, h = 192, 4 layers, 6 heads, 2 kv heads, f = 512):
    1_589_952; with an MoE every second block (4 experts): 2_580_160.

    Raises ``TypeError`` for a non-int and ``ValueError`` for a count < 1 (``moe_every`` and
    ``num_experts`` < 0), ``d_model`` not divisible by ``n_heads``, ``n_heads`` not by ``n_kv_heads``,
    or ``moe_every`` > 0 with ``num_experts`` < 1, naming the argument.
    """
    raise NotImplementedError("Task 11.4 (capstone accounting): see handouts/11-capstone.md §11.4")


def capstone_bytes_per_rank(num_params, n_layers, d_model, n_heads, head_dim, seq, microbatch, *, dp, pp, cp, tp,
                            num_microbatches, bytes_per_element=2) -> dict[str, float]:  # fmt: skip
    """Bytes one rank of a middle pipeline stage sends per training step along each axis, as
    ``parallelize`` trains (ring collectives; e = ``bytes_per_element`` for activations and gradients).

    With L = n_layers / pp blocks on the stage, m = ``num_microbatches`` and A = e · (seq / cp) ·
    microbatch · d_model the bytes of one microbatch's activations of this rank's cp block:
        "tp"  per block and microbatch, an all-gather and a reduce-scatter around attention and the
              SwiGLU, forward and backward: 8 · (tp - 1)/tp · A · L · m
        "cp"  ring attention of the key/value blocks of the n_heads / tp heads this rank attends with
              (keys and values repeated to the query heads before the ring), float32 gradients
              (2e bytes): ``ring_attention_bytes_per_rank(seq, microbatch, n_heads / tp, head_dim, cp,
              e, 2e)`` · L · m, plus the gradients averaged over cp:
              ``ring_all_reduce_bytes_per_rank(G, cp)`` with G = e · num_params / (tp · pp)
        "pp"  one activation forward and one gradient back per microbatch, sequence-parallel
              (s/(cp·tp) tokens): 2 · A / tp · m (0 when pp = 1)
        "dp"  ``ring_all_reduce_bytes_per_rank(G, dp)``
    (G counts the replicated norms and embeddings once per tp rank too: an approximation.)

    L is rounded up when pp does not divide n_layers (the deepest stage). Example: 1e6 parameters, 4
    layers, h = 64, 4 heads of 16, seq 64, microbatch 2, dp = pp = cp = tp = 2, m = 2:
    {"tp": 131_072, "cp": 696_608, "pp": 16_384, "dp": 500_000}.

    Raises ``TypeError``/``ValueError`` naming the argument for bad counts, ``seq`` not divisible by
    cp·tp or, when cp > 1, by 2·cp (the zigzag layout's 2·cp equal chunks), or ``n_heads`` not divisible
    by tp.
    """
    raise NotImplementedError("Task 11.4 (capstone accounting): see handouts/11-capstone.md §11.4")


def plan_capstone(num_params, num_layers, d_model, heads, seq, global_batch, *, gpus_per_node, num_nodes,
                  gpu_memory_bytes, microbatch=1, recompute="selective", kv_heads=None, num_experts=0,
                  expert_d_ff=0, moe_layers=0, top_k=1) -> dict:  # fmt: skip
    """The (tp, cp, pp, dp, ep, ZeRO stage) these rules choose for the capstone's mesh, and why.

    Llama 3 405B orders its axes [TP, CP, PP, DP] from the fastest links out (Grattafiori et al. 2024,
    §3.3.2): TP inside a node, CP for long context, PP across nodes, DP (FSDP) outermost. DeepSeek-V3
    spreads an MoE's experts over its data-parallel ranks (EP 64 inside DP; DeepSeek-AI 2024, §3.2.1).
    The rules, in order:
      1. ``plan_parallelism``'s candidates for (tp, pp): tp = 1, 2, 4, ... <= gpus_per_node dividing
         ``heads`` and ``kv_heads`` (grouped-query attention splits both) with pp = 1, no wider than needed;
         then the widest such tp with pp = 2, 4, 8, ... <= num_layers.
      2. A candidate is rejected before its memory unless dp = gpus_per_node * num_nodes / (tp * cp * pp)
         is an integer that, times ``microbatch``, divides ``global_batch`` (num_microbatches m =
         global_batch / (dp * microbatch)); the pipeline fills, m >= pp when pp > 1 (with fewer
         microbatches than stages 1F1B idles more than half the time: bubble (pp - 1)/(m + pp - 1) > 1/2);
         and tp divides the seq / cp tokens of a cp rank (sequence parallelism).
      3. ``plan_parallelism``'s rule for ZeRO: for the candidates of rule 1 in order, the lowest stage among
         0, 1, 2 that fits; only if none fits, the same search again with ZeRO-3.
      4. CP only when nothing fits without it: cp = 1, then 2, 4, 8, ... <= gpus_per_node * num_nodes,
         each with the whole search of rules 1-3 (ZeRO-3 included) before the next. cp must cut seq into
         2 * cp equal zigzag chunks (seq % (2 * cp) == 0; other cp are not tried); each rank keeps seq / cp
         tokens of every sequence.
      5. An MoE (``num_experts`` > 0): for each (tp, cp, pp) of rules 1-4, ep = each divisor of both
         ``num_experts`` and dp * cp (the ranks that hold the same dense weights: EP runs inside the data
         axes) in increasing order, and at each ep the ZeRO stages of rule 3's pass: the smallest ep that
         fits, no wider than needed, like TP. A dense model has ep = 1.
    "Fits" means ``parallel_memory_per_rank(...) <= gpu_memory_bytes`` for seq / cp tokens per rank with
    ZeRO sharded over all dp * cp ranks that hold the same weights (Megatron-LM's data-parallel group with
    CP; the capstone's ``parallelize`` shards over dp only, which costs more):
        parallel_memory_per_rank(num_params, num_layers, d_model, heads, seq // cp, microbatch, dp=dp * cp,
                                 tp=tp, pp=pp, zero_stage=z, num_microbatches=m, recompute=recompute,
                                 expert_params=X, ep=ep)
    with X = moe_layers * expert_parameter_bytes_per_rank(d_model, expert_d_ff, num_experts, 1, 1), the
    expert parameters (``models.MLP`` experts with biases, replicated over tp, split ep * pp ways; 0 for a
    dense model). ``num_params`` counts every parameter, experts included.

    Returns ``{"dp", "tp", "pp", "cp", "ep", "zero_stage", "num_microbatches", "memory_per_rank",
    "bytes_per_axis", "rows"}``: the chosen layout, its memory, what one rank sends per step on each axis,
    and ``rows``, one dict per configuration tried, in the order tried (each cp of rule 4; in it rule 3's
    two passes; in each, rule 1's candidates; at each, rule 5's ep and ZeRO stages), ending with the
    chosen one, with keys ``tp, cp, pp, dp, ep, zero_stage, memory_per_rank, fits, rejected, reason``.
    A (tp, cp, pp) that rule 2 rejects is one row in each pass that reaches it, with ``ep``,
    ``zero_stage`` and ``memory_per_rank`` None and ``rejected`` the first of rule 2's conditions it
    fails, checked in this order: "batch" (dp is not an integer that, times microbatch, divides
    global_batch), "fills" (pp > 1 and m < pp), "split" (tp does not divide seq / cp); every other row
    has ``rejected`` None and its memory. ``reason`` says the same in words, for people (tools read
    ``rejected``). ``bytes_per_axis``: "tp", "cp", "pp", "dp"
    from ``capstone_bytes_per_rank(P, num_layers, d_model, heads, d_model // heads, seq, microbatch, dp=,
    pp=, cp=, tp=, num_microbatches=m)`` with P = num_params - X + X * tp / ep (so that its gradient bytes
    are this rank's own, dense / (tp * pp) + experts / (ep * pp)), and "ep" =
    ``moe_all_to_all_bytes(m * microbatch * seq / (cp * tp), d_model, top_k, ep)`` * ceil(moe_layers / pp):
    the rank's own tokens through the MoE layers of its stage (0.0 for a dense model).

    Example (Llama 3 405B: 405e9 parameters, 126 layers, h = 16384, 128 heads, 8 KV heads, 2048 nodes of 8
    GPUs of 80e9 bytes): 2048 sequences of 8192 -> TP 8, PP 16, DP 128, ZeRO-2, 79.7e9 bytes; 128
    sequences of 131072 -> TP 8, CP 16, PP 16, DP 8, ZeRO-2, 79.7e9 bytes.

    Raises ``ValueError`` if nothing fits (naming ``gpu_memory_bytes``), for ``d_model`` not divisible by
    ``heads``, ``kv_heads`` not dividing ``heads``, an MoE with ``expert_d_ff`` < 1, ``moe_layers``
    outside 1..num_layers, ``top_k`` > ``num_experts`` or ``num_params`` smaller than X, and
    ``TypeError``/``ValueError`` for bad counts or an unknown ``recompute``, naming the argument.
    """
    raise NotImplementedError("Task 11.4 (capstone accounting): see handouts/11-capstone.md §11.4")
