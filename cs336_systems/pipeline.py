"""Pipeline parallelism: the layers are cut into contiguous stages, one per rank, and a batch is
cut into microbatches that flow forward through the stages and back (handouts/05-pipeline.md).

    stage 0 --activations--> stage 1 --activations--> ... --> stage p-1 (loss)
            <--input grads--         <--input grads--     <--

Your task, in the order of the handout:
    split_into_stages       (5.1) which layers each rank owns
    gpipe_schedule, ...     (5.2) in which order a stage runs its forwards (F) and backwards (B)
    PipelineStage           (5.3) runs one stage's schedule with neighbour-only send/recv

``Action`` is given. Use only point-to-point calls between neighbouring stages (two stages that
both block in a send, waiting for each other to receive, deadlock: see §5.3). Useful tools:
``dist.batch_isend_irecv``, ``dist.P2POp``, ``dist.get_process_group_ranks``, ``Tensor.chunk``,
``Tensor.requires_grad_``, ``Tensor.backward(gradient)``, ``time.perf_counter``.
Bad input raises ValueError/TypeError naming the argument, on every rank, before any communication.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

__all__ = ["split_into_stages", "Action", "gpipe_schedule", "one_f_one_b_schedule", "PipelineStage"]

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
    """One step of a stage's schedule: ``kind`` "F" (forward) or "B" (backward) of ``microbatch``."""

    kind: str
    microbatch: int


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
# ## Task 5.3: a pipeline stage
# ---------------------------------------------------------------------------------------------


class PipelineStage:
    """One rank's stage of a pipeline over ``group`` (stage s is group rank s).

    ``module`` holds this stage's layers (e.g. ``split_into_stages(model, p)[stage]``), ``loss_fn``
    (``loss_fn(output, target) -> scalar``, a mean over the microbatch such as ``nn.MSELoss()``)
    is applied on the last stage only. Stage s receives activations from group rank s - 1 and
    input gradients from group rank s + 1, and sends to them; nothing else communicates.
    """

    def __init__(
        self,
        module: nn.Module,
        stage: int,
        num_stages: int,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        group: dist.ProcessGroup | None = None,
    ) -> None:
        """Check the arguments (on every rank, before any communication) and remember the neighbours.

        Raises ``TypeError`` if ``module`` is not an ``nn.Module`` or ``loss_fn`` not callable, and
        ``ValueError`` unless ``num_stages`` equals the group size and ``stage`` is this rank's
        rank in ``group``. ``.timeline`` and ``.peak_activations`` start empty / 0.
        """
        raise NotImplementedError("Task 5.3 (pipeline stage): see handouts/05-pipeline.md §5.3")

    def train_step(
        self, inputs: torch.Tensor | None, targets: torch.Tensor | None, num_microbatches: int, schedule: str = "1f1b"
    ) -> float | None:
        """Run forward and backward of one batch through the pipeline; accumulate ``.grad``.

        ``inputs`` (batch, ...) is used on stage 0 and ``targets`` (batch, ...) on the last stage;
        other stages may pass ``None`` (a tensor given anywhere is checked). Both are split on dim 0
        into ``num_microbatches`` equal microbatches, run in the order of ``schedule`` ("1f1b" or
        "gpipe"). Microbatch losses are divided by ``num_microbatches``, so ``.grad`` receives
        exactly the gradients of the full-batch mean loss (added to what ``.grad`` held, as
        ``backward`` does; the caller zeroes and steps). Activation shapes and dtypes are sent
        ahead of the data, never given by the caller.

        Returns the full-batch mean loss on the last stage, ``None`` elsewhere. Afterwards
        ``.timeline`` is ``[(action, t_start, t_end), ...]`` in execution order (``time.perf_counter``
        seconds; t_start once the action's input has arrived, t_end once its output is posted) and
        ``.peak_activations`` the most microbatches that were between their F and B at once.

        Raises ``ValueError`` for an unknown ``schedule``, ``num_microbatches < 1``, or a batch that
        is smaller than or not divisible by ``num_microbatches``; ``TypeError`` for a missing
        ``inputs`` on stage 0 / ``targets`` on the last stage. All before any communication.
        """
        raise NotImplementedError("Task 5.3 (pipeline stage): see handouts/05-pipeline.md §5.3")
