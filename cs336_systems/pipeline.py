"""Pipeline parallelism: the layers are cut into contiguous stages, one per rank, and a batch is
cut into microbatches that flow forward through the stages and back (handouts/05-pipeline.md).

    stage 0 --activations--> stage 1 --activations--> ... --> stage p-1 (loss)
            <--input grads--         <--input grads--     <--

Your task, in the order of the handout:
    split_into_stages            (5.1) which layers each rank owns
    gpipe_schedule, ...          (5.2) in which order a stage runs its forwards (F) and backwards (B)
    PipelineStage                (5.3) runs one stage's schedule with neighbour-only send/recv
    interleaved_1f1b_schedule    (5.4) v model chunks per rank (Megatron-LM)
    zero_bubble_h1_schedule      (5.5) backward split into input grads (B) and weight grads (W)
    PipelineStage                (5.6) runs those too: chunks, split backward, checkpoint=True
    split_into_v_chunks,         (5.7) two chunks per rank placed in a V, and ZB-V's order over them
      zero_bubble_v_schedule           (PipelineStage runs it with placement="v")
    dualpipe_v_schedule          (5.8) DualPipeV: overlapped F&B pairs, full and split backwards

``Action`` is given. Use only point-to-point calls between neighbouring stages (two stages that
both block in a send, waiting for each other to receive, deadlock: see §5.3). Match messages by
posting order, not by tag: NCCL ignores ``tag`` and gives the k-th receive one rank posts from another
the k-th message that one sent it (the tests apply the same rule on gloo), so between each pair of
ranks post sends and receives in the same order on both sides, one order for shape headers and
payloads alike. Useful tools: ``dist.batch_isend_irecv``, ``dist.P2POp``, ``dist.get_process_group_ranks``,
``Tensor.chunk``, ``Tensor.requires_grad_``, ``Tensor.backward(gradient)``, ``torch.autograd.grad``,
``torch.autograd.backward(..., inputs=)``, ``torch.get_rng_state``, ``torch.random.fork_rng``,
``time.perf_counter``.
Bad input raises ValueError/TypeError naming the argument, on every rank, before any communication.

Every stage is busy for m microbatch times and idle for the (p - 1) it waits while the pipeline
fills and drains: the bubble, (p - 1) / (m + p - 1) of a step (Huang et al. 2019, GPipe). 1F1B
(Narayanan et al. 2019, PipeDream-Flush) has the same bubble but starts backwards early, so stage s
holds at most min(p - s, m) microbatches' activations instead of m. Interleaving v chunks per rank
shrinks the bubble to (p - 1) / (v m + p - 1) (Narayanan et al. 2021); ZB-H1 (Qi et al. 2023) fills
it with the weight-gradient work nobody waits for, to (p - 1)(F + B - W) time units.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

__all__ = [
    "split_into_stages",
    "Action",
    "gpipe_schedule",
    "one_f_one_b_schedule",
    "interleaved_1f1b_schedule",
    "zero_bubble_h1_schedule",
    "split_into_v_chunks",
    "zero_bubble_v_schedule",
    "dualpipe_v_schedule",
    "PipelineStage",
]


# ---------------------------------------------------------------------------------------------
# ## Task 5.1: splitting a model into stages
# ---------------------------------------------------------------------------------------------


def split_into_stages(model: nn.Sequential, num_stages: int) -> list[nn.Sequential]:
    """Cut ``model`` into ``num_stages`` contiguous ``nn.Sequential`` stages.

    Stage s gets layers ``start_s .. end_s - 1`` of ``model``: the stages cover every layer once, in
    order. Layer counts differ by at most one and the earlier stages take the extra layers: 6 layers
    over 4 stages -> 2, 2, 1, 1. Stages share the layer objects with ``model`` (no copies) and keep
    their names (stage 1 above holds layers "2" and "3", so parameter names match the model's).

    Raises ``TypeError`` if ``model`` is not an ``nn.Sequential`` or ``num_stages`` not an int, and
    ``ValueError`` if ``num_stages < 1`` or the model has fewer layers than stages.
    """
    raise NotImplementedError("Task 5.1 (splitting into stages): see handouts/05-pipeline.md §5.1")


# ---------------------------------------------------------------------------------------------
# ## Task 5.2: schedules
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    """One step of a stage's schedule: ``kind`` of ``microbatch`` on this rank's model chunk ``chunk``.

    ``kind`` is "F" (forward), "B" (backward; the whole backward, unless the schedule also has a
    "W" of the same microbatch and chunk, in which case only the gradient of the chunk's input) or
    "W" (the gradient of the chunk's weights). ``chunk`` is the local chunk index k: global chunk
    k * p + stage when chunks loop round the ranks (0 without interleaving); in a V (§5.7) local
    chunk 0 is global chunk ``stage`` and local chunk 1 is global chunk 2p - 1 - stage.
    ``overlap=True`` (DualPipeV only, on an "F") says this forward and the action right after it,
    a "B" of the other chunk, form one overlapped F&B unit: their messages are in flight together.
    """

    kind: str
    microbatch: int
    chunk: int = 0
    overlap: bool = False


def gpipe_schedule(num_stages: int, num_microbatches: int, stage: int) -> list[Action]:
    """GPipe's order for ``stage``: all forwards, then all backwards.

    ``[F0, F1, ..., F(m-1), B0, B1, ..., B(m-1)]`` on every stage (the same list for every
    ``stage``); the stage holds all m microbatches' activations at the turn. Pure function.

    Raises ``TypeError`` for a non-int argument and ``ValueError`` unless ``num_stages >= 1``,
    ``num_microbatches >= 1`` and ``0 <= stage < num_stages``.
    """
    raise NotImplementedError("Task 5.2 (schedules): see handouts/05-pipeline.md §5.2")


def one_f_one_b_schedule(num_stages: int, num_microbatches: int, stage: int) -> list[Action]:
    """1F1B (PipeDream-Flush) order for ``stage``: warm-up forwards, alternate, cool-down backwards.

    With p = ``num_stages``, m = ``num_microbatches`` and w = ``min(p - stage - 1, m)``:
    warm-up ``F0 .. F(w-1)``; then steady state ``F(w) B0 F(w+1) B1 ...`` until every forward has
    run; then cool-down, the remaining backwards in order. Stage 0 of p=4, m=8:
    ``F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7``. The last stage runs ``F0 B0 F1 B1 ...``.
    At most ``min(p - stage, m)`` microbatches are between their F and their B at once. Pure function.

    Raises as ``gpipe_schedule``.
    """
    raise NotImplementedError("Task 5.2 (schedules): see handouts/05-pipeline.md §5.2")


# ---------------------------------------------------------------------------------------------
# ## Task 5.4: interleaved 1F1B
# ---------------------------------------------------------------------------------------------


def interleaved_1f1b_schedule(num_stages: int, num_microbatches: int, stage: int, num_chunks: int) -> list[Action]:
    """Megatron-LM's interleaved 1F1B for ``stage``, which holds ``num_chunks`` model chunks.

    The model is cut into p·v chunks (p = ``num_stages``, v = ``num_chunks``); rank r holds global
    chunks r, r + p, r + 2p, ..., its local chunks 0, 1, ..., v - 1. Microbatches go through the
    ranks in groups of p: the rank's j-th forward (j = 0 .. m·v - 1) is microbatch
    ``(j // (p·v))·p + j % p`` on local chunk ``(j // p) % v``; its j-th backward is the same
    microbatch on chunk ``v - 1 - (j // p) % v`` (backwards run the chunks in reverse). With
    w = ``min(2(p - stage - 1) + (v - 1)·p, m·v)`` warm-up forwards, then alternate F, B, then
    cool down, as 1F1B does over m·v chunk-microbatches. p=2, v=2, m=2, stage 0:
    ``F(0,0) F(1,0) F(0,1) F(1,1) B(0,1) B(1,1) B(0,0) B(1,0)`` as (microbatch, chunk). The rank
    holds at most ``min(2(p - stage - 1) + (v - 1)·p + 1, m·v)`` chunk-microbatches' activations.
    With ``num_chunks == 1`` this is ``one_f_one_b_schedule``. Pure function.

    Condition: ``num_microbatches % num_stages == 0`` when v > 1 (groups of p microbatches keep
    every rank busy); otherwise ``ValueError`` naming ``num_microbatches``. Raises as
    ``gpipe_schedule``, and for ``num_chunks`` (an int >= 1) likewise.
    """
    raise NotImplementedError("Task 5.4 (interleaved 1F1B): see handouts/05-pipeline.md §5.4")


# ---------------------------------------------------------------------------------------------
# ## Task 5.5: zero bubble (ZB-H1)
# ---------------------------------------------------------------------------------------------


def zero_bubble_h1_schedule(num_stages: int, num_microbatches: int, stage: int) -> list[Action]:
    """ZB-H1 (Qi et al. 2023) for ``stage``: 1F1B with the backward split into B and W.

    B(i) computes the gradient of the stage's input (stage - 1 waits for it) and W(i) the gradient
    of its weights (nobody waits for it). With w = ``min(p - stage - 1, m)``: warm-up
    ``F0 .. F(w-1)`` as in 1F1B; then for i = 0 .. m - 1: ``F(w + i)`` (while forwards remain),
    ``B(i)``, and, from i = ``stage`` on, the oldest W not yet run; then the remaining Ws in order.
    Stage s thus delays its first W by s rounds: the Ws fill the idle time 1F1B has while the
    backwards travel up. Stage 0 of p=4, m=6: ``F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 B3 W3 B4 W4 B5 W5``;
    stage 3: ``F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 W3 W4 W5``.

    A microbatch's activations are held from its F to its W: at most ``min(p, m)`` on every stage,
    1F1B's peak (stage 0's). With F, B, W taking T_F, T_B, T_W (T_W <= T_F) and m >= p, every stage
    idles (p - 1)(T_F + T_B - T_W) per step, against 1F1B's (p - 1)(T_F + T_B + T_W): a third when
    they are equal. Pure function; raises as ``gpipe_schedule``.
    """
    raise NotImplementedError("Task 5.5 (zero bubble ZB-H1): see handouts/05-pipeline.md §5.5")


# ---------------------------------------------------------------------------------------------
# ## Task 5.7: V placement and ZB-V
# ---------------------------------------------------------------------------------------------


def split_into_v_chunks(model: nn.Sequential, num_stages: int, stage: int) -> list[nn.Sequential]:
    """Rank ``stage``'s two chunks of ``model`` placed in a V: ``[chunk stage, chunk 2p - 1 - stage]``.

    ``model`` is cut into 2p chunks by ``split_into_stages(model, 2 * num_stages)``; rank s holds
    global chunk s (its local chunk 0, the way down: ranks 0, 1, ..., p - 1) and global chunk
    2p - 1 - s (its local chunk 1, the way back: ranks p - 1, ..., 1, 0). Rank 0 thus holds the
    first and the last chunk (the loss is computed there), and rank p - 1 holds chunks p - 1 and p,
    so the turn of the V is local: no message crosses between rank p - 1 and rank 0. p = 2, 8
    layers: rank 0 gets layers [0, 1] and [6, 7], rank 1 gets [2, 3] and [4, 5].

    Raises as ``split_into_stages`` (for 2p stages), and ``ValueError`` unless 0 <= ``stage`` < p.
    """
    raise NotImplementedError("Task 5.7 (V placement and ZB-V): see handouts/05-pipeline.md §5.7")


def zero_bubble_v_schedule(num_stages: int, num_microbatches: int, stage: int) -> list[Action]:
    """ZB-V (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", §6) for rank ``stage`` of a V.

    Two chunks per rank in a V (``split_into_v_chunks``); every backward is split into B (input
    gradient) and W (weight gradient). With p = ``num_stages``, r = ``stage`` and chunks written
    F0/B0/W0 (chunk 0) and F1/B1/W1 (chunk 1), each phase taking the lowest microbatch not yet run
    of its kind and chunk:
        1. warm-up:   2(p - r) - 1 times F0
        2.            r times F1 F0
        3.            p - r times F1 B1 W1
        4. steady:    until every F has run: F0 (while chunk 0 has forwards left) B0 W0 F1 B1 W1
        5. cool-down: r times B0 B1; then p - r times B0 W0; then the Ws left, chunk 1's then chunk 0's
    computed for max(m, 2p - 1) microbatches, then the actions of microbatches >= m left out (fewer
    microbatches than 2p - 1 cannot fill the V). p = 2, m = 4, rank 0 (as microbatch.chunk):
    ``F0.0 F1.0 F2.0 F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 F3.0 B0.0 W0.0 F2.1 B2.1 W2.1 B1.0 W1.0 F3.1 B3.1 W3.1
    B2.0 W2.0 B3.0 W3.0``. This is the order torch's ``ScheduleZBVZeroBubble`` runs.

    Each rank holds at most 2p chunk activations (F to W) when m >= 2p - 1: p microbatches of its
    whole layers, 1F1B's peak on stage 0, on every rank. With one chunk's times F, B, W (F <= B,
    W <= B) and m >= 2p - 1, every rank idles (p - 1)·max(B, 2(B - W)) per step: with F = B = W just
    the p - 1 forwards the last rank waits for its first input; see ``accounting.zbv_bubble_fraction``.
    Pure function; raises as ``gpipe_schedule``.
    """
    raise NotImplementedError("Task 5.7 (V placement and ZB-V): see handouts/05-pipeline.md §5.7")


# ---------------------------------------------------------------------------------------------
# ## Task 5.8: DualPipeV
# ---------------------------------------------------------------------------------------------


def dualpipe_v_schedule(num_stages: int, num_microbatches: int, stage: int) -> list[Action]:
    """DualPipeV (DeepSeek-V3 report §3.2.1, folded into a V: half of DualPipe's ranks) for ``stage``.

    Two chunks per rank in a V, as ZB-V. In the steady state a forward of one chunk runs
    overlapped with a backward of the other chunk: ``Action("F", i, c, overlap=True)`` followed by
    ``Action("B", j, 1 - c)`` (an F&B unit, whose messages are in flight together; DeepSeek hides
    the all-to-all of each half behind the other's compute). A "B" is a whole backward unless a "W"
    of the same microbatch and chunk follows later (then it is the input gradient only). With p =
    ``num_stages``, r = ``stage``, m = ``num_microbatches``, each action taking the lowest
    microbatch not yet run of its kind and chunk, and Ws taken oldest first from one queue of the
    split Bs:
        1. 2(p - r - 1) times F0
        2. r + 1 times F0 F1
        3. p - r - 1 times B1 (split) W F1
        4. m - 2p + r + 1 times F0&B1 F1&B0 (whole Bs; on rank p - 1 the first F0, B1 not overlapped)
        5. p - r - 1 times B1 F1&B0
        6. r + 1 times B1 B0, whole Bs until the middle pass i = (r + 1) // 2, split Bs from there
           (on an odd rank from that pass's B1, on an even rank from its B0)
        7. p - r - 1 times W B0 (split once step 6 switched)
        8. r + 1 times W
    This is the order torch's ``ScheduleDualPipeV`` runs (from DeepSeek's open-source DualPipe).

    A rank holds at most 2p + 1 chunk activations (F to the end of its backward: a whole B, or
    its W): PP + 1 with PP = 2p chunks, the report's figure. Per step it idles
    (p - 1)(F&B + B - 3W) (the report's (PP/2 - 1)(F&B + B - 3W)), where F&B is the time of an
    overlapped pair, B of a whole backward and W of its weight half; see
    ``accounting.dualpipev_bubble_fraction``. Pure function.

    Needs ``num_microbatches >= 2 * num_stages`` (``ValueError`` naming ``num_microbatches``);
    otherwise raises as ``gpipe_schedule``.
    """
    raise NotImplementedError("Task 5.8 (DualPipeV): see handouts/05-pipeline.md §5.8")


# ---------------------------------------------------------------------------------------------
# ## Task 5.3: a pipeline stage
# ## Task 5.6: interleaved chunks, split backward and activation checkpointing in PipelineStage
# ---------------------------------------------------------------------------------------------


class PipelineStage:
    """One rank's stage of a pipeline over ``group`` (stage s is group rank s).

    ``module`` holds this stage's layers (e.g. ``split_into_stages(model, p)[stage]``), or, for the
    interleaved schedule, a list of v modules: this rank's model chunks, ``module[k]`` being global
    chunk k·p + stage (e.g. ``[chunks[stage + k * p] for k in range(v)]`` of
    ``split_into_stages(model, p * v)``). ``loss_fn`` (``loss_fn(output, target) -> scalar``, a mean
    over the microbatch such as ``nn.MSELoss()``) is applied after the last global chunk only. Stage
    s receives activations from group rank s - 1 and input gradients from group rank s + 1, and
    sends to them; with chunks, rank p - 1 and rank 0 are neighbours too (chunk k·p + p - 1 feeds
    chunk (k + 1)·p). Nothing else communicates.

    ``placement="v"`` (§5.7): ``module`` is the two chunks of ``split_into_v_chunks`` (global chunks
    s and 2p - 1 - s). Activations flow down through local chunk 0 (rank s - 1 -> s), turn inside
    rank p - 1 (chunk p - 1 feeds chunk p without a message) and flow back up through local chunk 1
    (rank s + 1 -> s); input gradients flow the other way. Rank 0 holds the first and the last
    chunk, so it takes both ``inputs`` and ``targets`` and returns the loss; rank 0 and rank p - 1
    are not neighbours (unless p = 2). The V runs schedules "zb-v" and "dualpipev" only. Shape headers
    in a V: each chunk sends its header right before its first activation, on the channel to the rank
    it sends to (chunk 0's to rank s + 1, chunk 1's to rank s - 1; none across the turn), in that
    sender's order; so the message a rank needs now may sit behind another chunk's header (and
    activations) from the same peer: receive what comes first, in the peer's order, header included.
    """

    def __init__(
        self,
        module: nn.Module | Sequence[nn.Module],
        stage: int,
        num_stages: int,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        group: dist.ProcessGroup | None = None,
        placement: str = "loop",
    ) -> None:
        """Check the arguments (on every rank, before any communication) and remember the neighbours.

        ``.module`` is ``module`` itself, or an ``nn.ModuleList`` of the chunks when a list is
        given; ``.num_chunks`` is v (1 for a single module).

        Raises ``TypeError`` if ``module`` is not an ``nn.Module`` or a non-empty list of them, or
        ``loss_fn`` not callable, and ``ValueError`` unless ``num_stages`` equals the group size
        and ``stage`` is this rank's rank in ``group`` (and ``num_stages >= 2`` when several chunks are
        given), and unless ``placement`` is "loop" or "v" (the V needs exactly two chunks).
        ``.timeline`` and ``.peak_activations`` start empty / 0.
        """
        raise NotImplementedError("Task 5.3 (pipeline stage): see handouts/05-pipeline.md §5.3")

    def train_step(
        self,
        inputs: torch.Tensor | None,
        targets: torch.Tensor | None,
        num_microbatches: int,
        schedule: str = "1f1b",
        checkpoint: bool = False,
    ) -> float | None:
        """Run forward and backward of one batch through the pipeline; accumulate ``.grad``.

        ``inputs`` (batch, ...) is used on stage 0 and ``targets`` (batch, ...) on the last stage;
        other stages may pass ``None`` (a tensor given anywhere is checked). Both are split on dim 0
        into ``num_microbatches`` equal microbatches, run in the order of ``schedule``: "gpipe",
        "1f1b", "zb-h1" (one chunk), "interleaved" (``interleaved_1f1b_schedule`` with v =
        ``.num_chunks``; a single module is v = 1, which runs the 1F1B order), or, with
        ``placement="v"``, "zb-v" (``zero_bubble_v_schedule``) or "dualpipev" (``dualpipe_v_schedule``;
        an F&B pair posts the receive of its B's gradient together with its F's input, before the F
        computes, so that message travels while the F runs). Microbatch losses
        are divided by ``num_microbatches``, so ``.grad`` receives exactly the gradients of the
        full-batch mean loss (added to what ``.grad`` held, as ``backward`` does; the caller zeroes
        and steps). Activation shapes and dtypes are sent ahead
        of the data, never given by the caller.

        Under "zb-h1" (and for every B that has a W in "zb-v" and "dualpipev"), B(i) computes only
        the gradient of the chunk's input, whenever that input
        requires grad, and sends it at once (``torch.autograd.grad(out, x, grad, retain_graph=True)``);
        on stage 0 the input is the caller's ``inputs``: if it requires grad, B backpropagates the
        gradient into it (``inputs.grad`` gets what an unsplit backward would give), else B has
        nothing to compute. W(i) then computes the weights' gradients
        (``torch.autograd.backward(out, grad, inputs=params)``), and only W frees the microbatch.
        With ``checkpoint=True`` a forward runs under ``torch.no_grad()`` and keeps only
        its input (and the RNG state it started from); its backward first recomputes the forward
        from that input with the same RNG state (so dropout draws the same masks) without moving
        the RNG stream of later forwards, then runs as without checkpointing.

        Returns the full-batch mean loss on the last stage, ``None`` elsewhere. Afterwards
        ``.timeline`` is ``[(action, t_start, t_end), ...]`` in execution order (``time.perf_counter``
        seconds; t_start once the action's input has arrived, t_end once its output is posted) and
        ``.peak_activations`` the most (microbatch, chunk) pairs that were between their F and the
        end of their backward (a whole B, or the W of a split one) at once; checkpointing does not
        change it. In a V, rank p - 1 hands chunk p - 1's output to chunk p (and the gradient back)
        in memory, with no message.

        Raises ``ValueError`` for an unknown ``schedule``, a schedule that does not fit the number
        of chunks (only "interleaved" takes several; it needs ``num_microbatches`` to be a multiple
        of ``num_stages``) or the placement ("zb-v" and "dualpipev" run a V and only they do;
        "dualpipev" needs ``num_microbatches >= 2 * num_stages``), ``num_microbatches < 1``, or a
        batch that is smaller than or not divisible by ``num_microbatches``; ``TypeError`` for a
        missing ``inputs`` on the rank of global chunk 0 / ``targets`` on the rank of the last one
        (rank 0 for both in a V) or a non-bool ``checkpoint``. All before any communication.
        """
        raise NotImplementedError("Task 5.3 (pipeline stage): see handouts/05-pipeline.md §5.3")
