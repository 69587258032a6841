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

    ``kind`` is "F" (forward), "B" (backward; the whole backward, unless the schedule also has "W",
    in which case only the gradient of the chunk's input) or "W" (the gradient of the chunk's
    weights). ``chunk`` is the local chunk index k (global chunk k * p + stage); 0 without interleaving.
    """

    kind: str
    microbatch: int
    chunk: int = 0


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
    """

    def __init__(
        self,
        module: nn.Module | Sequence[nn.Module],
        stage: int,
        num_stages: int,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        group: dist.ProcessGroup | None = None,
    ) -> None:
        """Check the arguments (on every rank, before any communication) and remember the neighbours.

        ``.module`` is ``module`` itself, or an ``nn.ModuleList`` of the chunks when a list is
        given; ``.num_chunks`` is v (1 for a single module).

        Raises ``TypeError`` if ``module`` is not an ``nn.Module`` or a non-empty list of them, or
        ``loss_fn`` not callable, and ``ValueError`` unless ``num_stages`` equals the group size
        and ``stage`` is this rank's rank in ``group`` (and ``num_stages >= 2`` when several chunks are
        given). ``.timeline`` and ``.peak_activations`` start empty / 0.
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
        "1f1b", "zb-h1" (one chunk) or "interleaved" (``interleaved_1f1b_schedule`` with v =
        ``.num_chunks``; a single module is v = 1, which runs the 1F1B order). Microbatch losses
        are divided by ``num_microbatches``, so ``.grad`` receives exactly the gradients of the
        full-batch mean loss (added to what ``.grad`` held, as ``backward`` does; the caller zeroes
        and steps). Activation shapes and dtypes are sent ahead
        of the data, never given by the caller.

        Under "zb-h1", B(i) computes only the gradient of the chunk's input, whenever that input
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
        end of their backward (B, or W under "zb-h1") at once; checkpointing does not change it.

        Raises ``ValueError`` for an unknown ``schedule``, a schedule that does not fit the number
        of chunks (only "interleaved" takes several; it needs ``num_microbatches`` to be a multiple
        of ``num_stages``), ``num_microbatches < 1``, or a batch that is smaller than or not
        divisible by ``num_microbatches``; ``TypeError`` for a missing ``inputs`` on stage 0 /
        ``targets`` on the last stage or a non-bool ``checkpoint``. All before any communication.
        """
        raise NotImplementedError("Task 5.3 (pipeline stage): see handouts/05-pipeline.md §5.3")
