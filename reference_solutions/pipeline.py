"""Pipeline parallelism: the layers are cut into contiguous stages, one per rank, and a batch is
cut into microbatches that flow forward through the stages and back (handouts/05-pipeline.md).

    stage 0 --activations--> stage 1 --activations--> ... --> stage p-1 (loss)
            <--input grads--         <--input grads--     <--

Three pieces, in the order of the handout:
    split_into_stages       which layers each rank owns
    gpipe_schedule, ...     in which order a stage runs its forwards (F) and backwards (B)
    PipelineStage           runs one stage's schedule with neighbour-only send/recv

Every stage is busy for m microbatch times and idle for the (p - 1) it waits while the pipeline
fills and drains: the bubble, (p - 1) / (m + p - 1) of a step (Huang et al. 2019, GPipe). 1F1B
(Narayanan et al. 2019, PipeDream-Flush) has the same bubble but starts backwards early, so stage s
holds at most min(p - s, m) microbatches' activations instead of m.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

__all__ = ["split_into_stages", "Action", "gpipe_schedule", "one_f_one_b_schedule", "PipelineStage"]

# Shape header sent ahead of the first activation of a step: [dtype code, ndim, *shape, 0...].
_MAX_DIMS = 8
_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32]


def _count(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


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
    if not isinstance(model, nn.Sequential):
        raise TypeError(f"model must be a torch.nn.Sequential, got {type(model).__name__}")
    num_stages = _count(num_stages, "num_stages", 1)
    if len(model) < num_stages:
        raise ValueError(f"model has {len(model)} layers, fewer than num_stages ({num_stages}): a stage would be empty")
    base, extra = divmod(len(model), num_stages)
    layers = list(model.named_children())
    stages, start = [], 0
    for s in range(num_stages):
        end = start + base + (1 if s < extra else 0)
        # Not ``model[start:end]``: that calls ``type(model)(...)``, which breaks for subclasses such
        # as DeepMLP whose constructor takes other arguments.
        stages.append(nn.Sequential(OrderedDict(layers[start:end])))
        start = end
    return stages


# ---------------------------------------------------------------------------------------------
# ## Task 5.2: schedules
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    """One step of a stage's schedule: ``kind`` "F" (forward) or "B" (backward) of ``microbatch``."""

    kind: str
    microbatch: int


def _check_schedule_args(num_stages, num_microbatches, stage) -> None:
    _count(num_stages, "num_stages", 1)
    _count(num_microbatches, "num_microbatches", 1)
    _count(stage, "stage", 0)
    if stage >= num_stages:
        raise ValueError(f"stage must be in [0, num_stages) = [0, {num_stages}), got {stage}")


def gpipe_schedule(num_stages: int, num_microbatches: int, stage: int) -> list[Action]:
    """GPipe's order for ``stage``: all forwards, then all backwards.

    ``[F0, F1, ..., F(m-1), B0, B1, ..., B(m-1)]`` on every stage (the same list for every
    ``stage``); the stage holds all m microbatches' activations at the turn. Pure function.

    Raises ``TypeError`` for a non-int argument and ``ValueError`` unless ``num_stages >= 1``,
    ``num_microbatches >= 1`` and ``0 <= stage < num_stages``.
    """
    _check_schedule_args(num_stages, num_microbatches, stage)
    m = num_microbatches
    return [Action("F", i) for i in range(m)] + [Action("B", i) for i in range(m)]


def one_f_one_b_schedule(num_stages: int, num_microbatches: int, stage: int) -> list[Action]:
    """1F1B (PipeDream-Flush) order for ``stage``: warm-up forwards, alternate, cool-down backwards.

    With p = ``num_stages``, m = ``num_microbatches`` and w = ``min(p - stage - 1, m)``:
    warm-up ``F0 .. F(w-1)``; then steady state ``F(w) B0 F(w+1) B1 ...`` until every forward has
    run; then cool-down, the remaining backwards in order. Stage 0 of p=4, m=8:
    ``F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7``. The last stage runs ``F0 B0 F1 B1 ...``.
    At most ``min(p - stage, m)`` microbatches are between their F and their B at once. Pure function.

    Raises as ``gpipe_schedule``.
    """
    _check_schedule_args(num_stages, num_microbatches, stage)
    m = num_microbatches
    warmup = min(num_stages - stage - 1, m)
    actions = [Action("F", i) for i in range(warmup)]
    for i in range(m - warmup):  # steady state: one forward in, one backward out
        actions += [Action("F", warmup + i), Action("B", i)]
    actions += [Action("B", i) for i in range(m - warmup, m)]  # cool-down
    return actions


_SCHEDULES = {"gpipe": gpipe_schedule, "1f1b": one_f_one_b_schedule}


@dataclass
class _StepState:
    """What one ``train_step`` carries from action to action."""

    num_microbatches: int
    inputs: tuple[torch.Tensor, ...] | None  # stage 0: m x (batch/m, ...)
    targets: tuple[torch.Tensor, ...] | None  # last stage: m x (batch/m, ...)
    device: torch.device
    total_loss: torch.Tensor  # float64 scalar, the sum of the scaled microbatch losses (last stage)
    stash: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)  # mb -> (input, output)
    act_meta: tuple[tuple[int, ...], torch.dtype] | None = None  # stage - 1's activations, from the header


# The batch posted by the previous action: (works to wait for, its ops, the receive buffer or None). The ops
# are kept so that the tensors they send stay alive until the works finish.
_InFlight = tuple[list, list, torch.Tensor | None]


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
        if not isinstance(module, nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
        if not callable(loss_fn):
            raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
        num_stages = _count(num_stages, "num_stages", 1)
        stage = _count(stage, "stage", 0)
        if num_stages != dist.get_world_size(group):
            raise ValueError(f"num_stages ({num_stages}) must equal the group size ({dist.get_world_size(group)})")
        if stage != dist.get_rank(group):
            raise ValueError(f"stage ({stage}) must be this rank's rank in the group ({dist.get_rank(group)})")
        self.module, self.stage, self.num_stages, self.loss_fn, self.group = module, stage, num_stages, loss_fn, group
        ranks = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)
        # Global ranks, which is what send/recv take, even when the pipeline lives in a subgroup.
        self.prev_rank = ranks[stage - 1] if stage > 0 else None
        self.next_rank = ranks[stage + 1] if stage < num_stages - 1 else None
        self.timeline: list[tuple[Action, float, float]] = []
        self.peak_activations = 0

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
        m = self._check_step(inputs, targets, num_microbatches, schedule)
        device = self._device(inputs if self._is_first else targets)
        step = _StepState(
            num_microbatches=m,
            inputs=inputs.chunk(m) if self._is_first else None,  # m x (batch/m, ...)
            targets=targets.chunk(m) if self._is_last else None,
            device=device,
            total_loss=torch.zeros((), dtype=torch.float64, device=device),
        )
        plan = _SCHEDULES[schedule](self.num_stages, m, self.stage)
        in_flight: _InFlight = ([], [], None)
        self.timeline, self.peak_activations = [], 0
        for k, action in enumerate(plan):
            received = self._wait(in_flight)
            if action.kind == "F":
                t_start, outgoing = self._forward(step, action.microbatch, received)
            else:
                t_start, outgoing = self._backward(step, action.microbatch, received)
            in_flight = self._send_and_recv(outgoing, plan[k + 1] if k + 1 < len(plan) else None, step)
            self._record(action, t_start, device)
        self._wait(in_flight)
        return float(step.total_loss) if self._is_last else None

    # -- the steps of train_step: check, forward a microbatch, backward a microbatch, send/recv --------

    def _check_step(self, inputs, targets, num_microbatches, schedule) -> int:
        """train_step's arguments, checked on every rank before any message; returns num_microbatches."""
        if schedule not in _SCHEDULES:
            raise ValueError(f"schedule must be one of {sorted(_SCHEDULES)}, got {schedule!r}")
        m = _count(num_microbatches, "num_microbatches", 1)
        for name, tensor, needed in [("inputs", inputs, self._is_first), ("targets", targets, self._is_last)]:
            if tensor is None and not needed:
                continue
            if not isinstance(tensor, torch.Tensor) or tensor.dim() == 0:
                raise TypeError(f"{name} must be a tensor with a batch dimension on this stage, got {tensor!r:.80}")
            if tensor.shape[0] < m or tensor.shape[0] % m:
                raise ValueError(
                    f"{name} batch size ({tensor.shape[0]}) must be a positive multiple of num_microbatches ({m})"
                )
        return m

    def _forward(self, step: _StepState, i: int, received: torch.Tensor | None) -> tuple[float, list]:
        """Forward microbatch ``i``: (t_start, the sends it posts). Its input is stage 0's slice of the
        batch or the activation from stage - 1; its output is stashed for the backward and sent on to
        stage + 1 (preceded, for microbatch 0, by the shape header), or turned into the loss."""
        if self._is_first:
            x = step.inputs[i]
        else:
            if received is None:  # the first forward: learn the shape, then receive
                step.act_meta = self._recv_header(step.device)
                received = torch.empty(step.act_meta[0], dtype=step.act_meta[1], device=step.device)
                dist.recv(received, src=self.prev_rank, group=self.group)
            x = received.requires_grad_(received.is_floating_point())
        t_start = time.perf_counter()
        out = self.module(x)
        outgoing = []
        if self._is_last:
            # The mean of the microbatch means is the full-batch mean.
            out = self.loss_fn(out, step.targets[i]) / step.num_microbatches
            step.total_loss += out.detach().double()
        else:
            if i == 0:
                outgoing.append(self._header(out))
            outgoing.append(dist.P2POp(dist.isend, out.detach().contiguous(), self.next_rank, self.group))
        step.stash[i] = (x, out)
        self.peak_activations = max(self.peak_activations, len(step.stash))
        return t_start, outgoing

    def _backward(self, step: _StepState, i: int, received: torch.Tensor | None) -> tuple[float, list]:
        """Backward microbatch ``i``: (t_start, the sends it posts). Its output's gradient comes from
        stage + 1 (the loss itself on the last stage); its input's gradient is sent to stage - 1."""
        x, out = step.stash.pop(i)  # released after this backward: that is what 1F1B saves
        t_start = time.perf_counter()
        if self._is_last:
            out.backward()
        else:
            out.backward(received)  # d(loss)/d(out) from stage + 1
        outgoing = []
        if not self._is_first and x.grad is not None:
            outgoing.append(dist.P2POp(dist.isend, x.grad.contiguous(), self.prev_rank, self.group))
        return t_start, outgoing

    def _send_and_recv(self, outgoing: list, action: Action | None, step: _StepState) -> _InFlight:
        """Post an action's sends together with the receive of the next ``action``'s input, as one
        batch: two neighbours that each send before they receive would otherwise wait on each other
        forever where sends block until matched (NCCL, large tensors)."""
        buffer = self._input_buffer(action, step)
        src = self.prev_rank if action is not None and action.kind == "F" else self.next_rank
        ops = outgoing + ([dist.P2POp(dist.irecv, buffer, src, self.group)] if buffer is not None else [])
        return (dist.batch_isend_irecv(ops) if ops else [], ops, buffer)

    # -- helpers --------------------------------------------------------------------------------

    @property
    def _is_first(self) -> bool:
        return self.stage == 0

    @property
    def _is_last(self) -> bool:
        return self.stage == self.num_stages - 1

    def _device(self, batch: torch.Tensor | None) -> torch.device:
        """Where this stage computes: its parameters', else the batch's, else the backend's default."""
        for tensor in itertools.chain(self.module.parameters(), self.module.buffers(), [batch]):
            if isinstance(tensor, torch.Tensor):
                return tensor.device
        nccl = dist.get_backend(self.group) == "nccl"
        return torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")

    def _wait(self, in_flight) -> torch.Tensor | None:
        """Wait for a batch posted by the previous action; return what it received, if anything."""
        works, _ops, buffer = in_flight  # the ops keep the sent tensors alive until now
        for work in works:
            work.wait()
        return buffer

    def _input_buffer(self, action: Action | None, step: _StepState) -> torch.Tensor | None:
        """Where ``action``'s input from a neighbour lands: an activation from stage - 1 for a forward
        (not on stage 0, nor before the header told its shape), a gradient from stage + 1 for a
        backward (not on the last stage)."""
        if action is None:
            return None
        if action.kind == "F":
            if self.prev_rank is None or step.act_meta is None:
                return None
            return torch.empty(step.act_meta[0], dtype=step.act_meta[1], device=step.device)
        return torch.empty_like(step.stash[action.microbatch][1]) if self.next_rank is not None else None

    def _record(self, action: Action, t_start: float, device: torch.device) -> None:
        if device.type == "cuda":  # kernels are asynchronous: wait so the timeline shows real work
            torch.cuda.synchronize(device)
        self.timeline.append((action, t_start, time.perf_counter()))

    def _header(self, out: torch.Tensor) -> dist.P2POp:
        """[dtype code, ndim, *shape, 0...]: sent before the first activation, which it describes."""
        if out.dim() > _MAX_DIMS or out.dtype not in _DTYPES:
            raise ValueError(f"stage {self.stage} output must have <= {_MAX_DIMS} dims and a dtype in {_DTYPES}")
        header = torch.zeros(_MAX_DIMS + 2, dtype=torch.int64, device=out.device)
        header[0], header[1] = _DTYPES.index(out.dtype), out.dim()
        header[2 : 2 + out.dim()] = torch.tensor(out.shape, dtype=torch.int64)
        return dist.P2POp(dist.isend, header, self.next_rank, self.group)

    def _recv_header(self, device: torch.device) -> tuple[tuple[int, ...], torch.dtype]:
        header = torch.empty(_MAX_DIMS + 2, dtype=torch.int64, device=device)
        dist.recv(header, src=self.prev_rank, group=self.group)
        dtype_code, ndim, *dims = header.tolist()
        return tuple(dims[:ndim]), _DTYPES[dtype_code]
