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

import contextlib
import itertools
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

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

# BEGIN SOLUTION
# Shape header sent ahead of the first activation of a step: [dtype code, ndim, *shape, 0...].
_MAX_DIMS = 8
_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32]


def _count(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


# END SOLUTION


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
    # BEGIN SOLUTION: Task 5.1 (splitting into stages)
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
    # END SOLUTION


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


# BEGIN SOLUTION
def _check_schedule_args(num_stages, num_microbatches, stage) -> None:
    _count(num_stages, "num_stages", 1)
    _count(num_microbatches, "num_microbatches", 1)
    _count(stage, "stage", 0)
    if stage >= num_stages:
        raise ValueError(f"stage must be in [0, num_stages) = [0, {num_stages}), got {stage}")


# END SOLUTION


def gpipe_schedule(num_stages: int, num_microbatches: int, stage: int) -> list[Action]:
    """GPipe's order for ``stage``: all forwards, then all backwards.

    ``[F0, F1, ..., F(m-1), B0, B1, ..., B(m-1)]`` on every stage (the same list for every
    ``stage``); the stage holds all m microbatches' activations at the turn. Pure function.

    Raises ``TypeError`` for a non-int argument and ``ValueError`` unless ``num_stages >= 1``,
    ``num_microbatches >= 1`` and ``0 <= stage < num_stages``.
    """
    # BEGIN SOLUTION: Task 5.2 (schedules)
    _check_schedule_args(num_stages, num_microbatches, stage)
    m = num_microbatches
    return [Action("F", i) for i in range(m)] + [Action("B", i) for i in range(m)]
    # END SOLUTION


def one_f_one_b_schedule(num_stages: int, num_microbatches: int, stage: int) -> list[Action]:
    """1F1B (PipeDream-Flush) order for ``stage``: warm-up forwards, alternate, cool-down backwards.

    With p = ``num_stages``, m = ``num_microbatches`` and w = ``min(p - stage - 1, m)``:
    warm-up ``F0 .. F(w-1)``; then steady state ``F(w) B0 F(w+1) B1 ...`` until every forward has
    run; then cool-down, the remaining backwards in order. Stage 0 of p=4, m=8:
    ``F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7``. The last stage runs ``F0 B0 F1 B1 ...``.
    At most ``min(p - stage, m)`` microbatches are between their F and their B at once. Pure function.

    Raises as ``gpipe_schedule``.
    """
    # BEGIN SOLUTION: Task 5.2 (schedules)
    _check_schedule_args(num_stages, num_microbatches, stage)
    m = num_microbatches
    warmup = min(num_stages - stage - 1, m)
    actions = [Action("F", i) for i in range(warmup)]
    for i in range(m - warmup):  # steady state: one forward in, one backward out
        actions += [Action("F", warmup + i), Action("B", i)]
    actions += [Action("B", i) for i in range(m - warmup, m)]  # cool-down
    return actions
    # END SOLUTION


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
    # BEGIN SOLUTION: Task 5.4 (interleaved 1F1B)
    _check_schedule_args(num_stages, num_microbatches, stage)
    v = _count(num_chunks, "num_chunks", 1)
    if v == 1:
        return one_f_one_b_schedule(num_stages, num_microbatches, stage)
    p, m = num_stages, num_microbatches
    if m % p:
        raise ValueError(f"num_microbatches ({m}) must be a multiple of num_stages ({p}) to interleave {v} chunks")
    total = m * v

    def forward(j: int) -> Action:
        return Action("F", (j // (p * v)) * p + j % p, (j // p) % v)

    def backward(j: int) -> Action:
        return Action("B", (j // (p * v)) * p + j % p, v - 1 - (j // p) % v)

    # The first backward reaches this rank after the p·v chunks' forwards of microbatch 0 and the
    # backwards below it: 2(p - stage - 1) + (v - 1)·p forwards fill that wait.
    warmup = min(2 * (p - stage - 1) + (v - 1) * p, total)
    actions = [forward(j) for j in range(warmup)]
    for j in range(total - warmup):
        actions += [forward(warmup + j), backward(j)]
    actions += [backward(j) for j in range(total - warmup, total)]
    return actions
    # END SOLUTION


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
    # BEGIN SOLUTION: Task 5.5 (zero bubble ZB-H1)
    _check_schedule_args(num_stages, num_microbatches, stage)
    m = num_microbatches
    warmup = min(num_stages - stage - 1, m)
    actions = [Action("F", i) for i in range(warmup)]
    weights = 0  # Ws run so far, in microbatch order
    for i in range(m):
        if warmup + i < m:
            actions.append(Action("F", warmup + i))
        actions.append(Action("B", i))
        if i >= stage:
            actions.append(Action("W", weights))
            weights += 1
    actions += [Action("W", i) for i in range(weights, m)]
    return actions
    # END SOLUTION


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
    # BEGIN SOLUTION: Task 5.7 (V placement and ZB-V)
    _count(num_stages, "num_stages", 1)
    _count(stage, "stage", 0)
    if stage >= num_stages:
        raise ValueError(f"stage must be in [0, num_stages) = [0, {num_stages}), got {stage}")
    chunks = split_into_stages(model, 2 * num_stages)
    return [chunks[stage], chunks[2 * num_stages - 1 - stage]]
    # END SOLUTION


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
    # BEGIN SOLUTION: Task 5.7 (V placement and ZB-V)
    _check_schedule_args(num_stages, num_microbatches, stage)
    p, r, m = num_stages, stage, num_microbatches
    plan = _VPlan(max(m, 2 * p - 1))  # fewer microbatches run the same order with holes
    plan.add("F0 " * (2 * (p - r) - 1))  # warm-up, the way down
    plan.add("F1 F0 " * r)  # the first microbatches come back up
    plan.add("F1 I1 W1 " * (p - r))  # the first backwards start on chunk 1
    while plan.runs["F", 1] < plan.runs["F", 0] or plan.runs["F", 0] < plan.n:  # steady: one of each
        plan.add(("F0 " if plan.runs["F", 0] < plan.n else "") + "I0 W0 F1 I1 W1")
    plan.add("I0 I1 " * r + "I0 W0 " * (p - r))  # cool-down: backwards first, then the Ws left
    plan.add("W1 " * (plan.runs["B", 1] - plan.runs["W", 1]) + "W0 " * (plan.runs["B", 0] - plan.runs["W", 0]))
    return plan.actions_below(m)
    # END SOLUTION


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
    # BEGIN SOLUTION: Task 5.8 (DualPipeV)
    _check_schedule_args(num_stages, num_microbatches, stage)
    p, r, m = num_stages, stage, num_microbatches
    if m < 2 * p:
        raise ValueError(f"DualPipeV needs num_microbatches ({m}) >= 2 * num_stages ({2 * p})")
    plan = _VPlan(m)
    plan.add("F0 " * (2 * (p - r - 1)))  # 1. the way down
    plan.add("F0 F1 " * (r + 1))  # 2. the first microbatches turn and come back up
    plan.add("I1 W F1 " * (p - r - 1))  # 3. zero-bubble backwards while forwards still arrive
    for i in range(m - 2 * p + r + 1):  # 4. steady: each forward overlapped with the other chunk's backward
        # The last rank's first pair would wait for its own F0's output: run them one after the other.
        plan.add(("F0 B1 " if i == 0 and r == p - 1 else "F0& B1 ") + "F1& B0")
    plan.add("B1 F1& B0 " * (p - r - 1))  # 5. forwards run out
    split = False  # 6. the second half of the last backwards split off their Ws, which fill 7. and 8.
    for i in range(r + 1):
        split = split or (i == (r + 1) // 2 and r % 2 == 1)
        plan.add("I1" if split else "B1")
        split = split or (i == (r + 1) // 2 and r % 2 == 0)
        plan.add("I0" if split else "B0")
    plan.add(("W I0 " if split else "W B0 ") * (p - r - 1))  # 7.
    plan.add("W " * (r + 1))  # 8.
    return plan.actions_below(m)
    # END SOLUTION


# BEGIN SOLUTION
class _VPlan:
    """Builds a V schedule from tokens: "F0" a forward of chunk 0 ("F0&": overlapped with the next
    action), "B1" a whole backward of chunk 1, "I1" a split one (its input gradient; its W is owed),
    "W1" chunk 1's oldest owed W, "W" the oldest owed W of either chunk (if any). Each token takes
    the lowest microbatch its kind and chunk has not run yet."""

    def __init__(self, num_microbatches: int) -> None:
        self.n = num_microbatches
        self.actions: list[Action] = []
        self.runs: Counter = Counter()  # (kind, chunk) -> how many have run ("I" counts as "B")
        self.owed: list[tuple[int, int]] = []  # (microbatch, chunk) of split Bs whose W has not run

    def add(self, tokens: str) -> None:
        for token in tokens.split():
            kind, chunk = token[0], token[1:].rstrip("&")
            if kind == "W":
                owed = [o for o in self.owed if not chunk or o[1] == int(chunk)]
                if owed:
                    self.owed.remove(owed[0])
                    self.actions.append(Action("W", *owed[0]))
                    self.runs["W", owed[0][1]] += 1
                continue
            c = int(chunk)
            key = ("B" if kind == "I" else kind, c)
            i, self.runs[key] = self.runs[key], self.runs[key] + 1
            if kind == "I":
                self.owed.append((i, c))
            self.actions.append(Action(key[0], i, c, overlap=token.endswith("&")))

    def actions_below(self, m: int) -> list[Action]:
        return [a for a in self.actions if a.microbatch < m]


_SCHEDULES = {"gpipe": gpipe_schedule, "1f1b": one_f_one_b_schedule, "zb-h1": zero_bubble_h1_schedule}
_V_SCHEDULES = {"zb-v": zero_bubble_v_schedule, "dualpipev": dualpipe_v_schedule}  # two chunks in a V


@dataclass
class _Stashed:
    """What a forward keeps for its backward: the chunk's input, and its output (None when
    checkpointing, which recomputes it from the input and the RNG state of the forward)."""

    x: torch.Tensor
    out: torch.Tensor | None
    out_meta: tuple[tuple[int, ...], torch.dtype]
    rng: tuple[torch.Tensor, torch.Tensor | None] | None = None
    grad_out: torch.Tensor | None = None  # kept from B for W (split backward)


@dataclass
class _StepState:
    """What one ``train_step`` carries from action to action."""

    num_microbatches: int
    inputs: tuple[torch.Tensor, ...] | None  # global chunk 0's rank: m x (batch/m, ...)
    targets: tuple[torch.Tensor, ...] | None  # last global chunk's rank: m x (batch/m, ...)
    device: torch.device
    total_loss: torch.Tensor  # float64 scalar, the sum of the scaled microbatch losses (last stage)
    checkpoint: bool = False
    split: set[tuple[int, int]] = field(default_factory=set)  # (microbatch, chunk) whose B is split off a W
    stash: dict[tuple[int, int], _Stashed] = field(default_factory=dict)  # (microbatch, chunk) -> saved
    act_meta: dict[int, tuple[tuple[int, ...], torch.dtype]] = field(default_factory=dict)  # chunk -> input meta
    headers_sent: set[int] = field(default_factory=set)  # chunks whose output shape went ahead
    sends: list = field(default_factory=list)  # (work, op) of sends still in flight
    # Messages each peer will send us, in the order it sends them (its schedule is a pure function):
    # ("header", chunk), ("act", microbatch, chunk) or ("grad", microbatch, chunk), our local chunk.
    inbox: dict[int, list[tuple]] = field(default_factory=dict)  # peer -> messages not yet posted
    posted: dict[tuple, tuple[list, torch.Tensor]] = field(default_factory=dict)  # message -> (works, buffer)
    local: dict[tuple, torch.Tensor] = field(default_factory=dict)  # the V's turn: ("act"/"grad", i, chunk)


# No message carries a tag: NCCL ignores tags and pairs the k-th receive between two ranks with the k-th
# send. A rank posts its sends in its schedule's order, and its receives from each peer in that peer's
# order of sending (step.inbox, computed from the peer's schedule): for GPipe, 1F1B, ZB-H1 and
# interleaving the two orders agree, but ZB-V and DualPipeV cross (rank 0 of DualPipeV, p = 3, sends
# rank 1 the activation of microbatch 4 before the gradient of microbatch 0, which rank 1 needs first),
# so a message that arrives ahead of its turn waits in its buffer. A shape header goes in the same batch
# as, and just before, the first activation it describes.
# END SOLUTION


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
        # BEGIN SOLUTION: Task 5.3 (pipeline stage)
        if isinstance(module, nn.Module):
            chunks = [module]
        elif isinstance(module, (list, tuple)) and module and all(isinstance(c, nn.Module) for c in module):
            chunks = list(module)
            module = nn.ModuleList(chunks)
        else:
            raise TypeError(f"module must be a torch.nn.Module or a non-empty list of them, got {module!r:.80}")
        if not callable(loss_fn):
            raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
        num_stages = _count(num_stages, "num_stages", 1)
        stage = _count(stage, "stage", 0)
        if num_stages != dist.get_world_size(group):
            raise ValueError(f"num_stages ({num_stages}) must equal the group size ({dist.get_world_size(group)})")
        if stage != dist.get_rank(group):
            raise ValueError(f"stage ({stage}) must be this rank's rank in the group ({dist.get_rank(group)})")
        if placement not in ("loop", "v"):
            raise ValueError(f"placement must be 'loop' or 'v', got {placement!r}")
        if placement == "v" and len(chunks) != 2:
            raise ValueError(f"placement 'v' needs module to be 2 chunks (split_into_v_chunks), got {len(chunks)}")
        if placement == "loop" and len(chunks) > 1 and num_stages == 1:
            raise ValueError("num_stages must be >= 2 to interleave chunks: consecutive chunks live on different ranks")
        self.module, self.chunks, self.num_chunks = module, chunks, len(chunks)
        self.stage, self.num_stages, self.loss_fn, self.group = stage, num_stages, loss_fn, group
        self.placement = placement
        # Global ranks, which is what send/recv take, even when the pipeline lives in a subgroup.
        self._ranks = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)
        self.prev_rank = self._ranks[stage - 1] if stage > 0 else None
        self.next_rank = self._ranks[stage + 1] if stage < num_stages - 1 else None
        self.timeline: list[tuple[Action, float, float]] = []
        self.peak_activations = 0
        # END SOLUTION

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
        # BEGIN SOLUTION: Task 5.3 (pipeline stage)
        m = self._check_step(inputs, targets, num_microbatches, schedule, checkpoint)
        device = self._device(inputs if self._holds_first else targets)
        plan = self._plan(schedule, m, self.stage)
        step = _StepState(
            num_microbatches=m,
            inputs=inputs.chunk(m) if self._holds_first else None,  # m x (batch/m, ...)
            targets=targets.chunk(m) if self._holds_last else None,
            device=device,
            total_loss=torch.zeros((), dtype=torch.float64, device=device),
            checkpoint=checkpoint,
            split={(a.microbatch, a.chunk) for a in plan if a.kind == "W"},
            inbox=self._inbox(schedule, m),
        )
        self.timeline, self.peak_activations = [], 0
        self._send_and_recv([], plan[:2], step)
        for k, action in enumerate(plan):
            received = self._take(step, action)
            if action.kind == "F":
                t_start, outgoing = self._forward(step, action, received)
            elif action.kind == "B":
                t_start, outgoing = self._backward(step, action, received)
            else:
                t_start, outgoing = self._weight_backward(step, action), []
            self._send_and_recv(outgoing, plan[k + 1 : k + 3], step)
            self._record(action, t_start, device)
        for work, _op in step.sends:  # every send matched before the step ends: nothing left in flight
            work.wait()
        return float(step.total_loss) if self._holds_last else None
        # END SOLUTION

    # BEGIN SOLUTION
    # -- the steps of train_step: check, plan, forward, backward (B, W), send/recv ------------------

    def _check_step(self, inputs, targets, num_microbatches, schedule, checkpoint) -> int:
        """train_step's arguments, checked on every rank before any message; returns num_microbatches."""
        known = sorted([*_SCHEDULES, "interleaved", *_V_SCHEDULES])
        if schedule not in known:
            raise ValueError(f"schedule must be one of {known}, got {schedule!r}")
        if (schedule in _V_SCHEDULES) != (self.placement == "v"):
            raise ValueError(f"schedule {schedule!r} does not run on placement {self.placement!r}: "
                             f"{sorted(_V_SCHEDULES)} and only they run a V")  # fmt: skip
        if self.placement == "loop" and self.num_chunks > 1 and schedule != "interleaved":
            raise ValueError(f"schedule {schedule!r} runs one chunk per stage; {self.num_chunks} need 'interleaved'")
        if not isinstance(checkpoint, bool):
            raise TypeError(f"checkpoint must be a bool, got {type(checkpoint).__name__}")
        m = _count(num_microbatches, "num_microbatches", 1)
        if schedule == "dualpipev" and m < 2 * self.num_stages:
            raise ValueError(f"DualPipeV needs num_microbatches ({m}) >= 2 * num_stages ({2 * self.num_stages})")
        if schedule == "interleaved" and self.num_chunks > 1 and m % self.num_stages:
            raise ValueError(
                f"num_microbatches ({m}) must be a multiple of num_stages ({self.num_stages}) to interleave chunks"
            )
        for name, tensor, needed in [("inputs", inputs, self._holds_first), ("targets", targets, self._holds_last)]:
            if tensor is None and not needed:
                continue
            if not isinstance(tensor, torch.Tensor) or tensor.dim() == 0:
                raise TypeError(f"{name} must be a tensor with a batch dimension on this stage, got {tensor!r:.80}")
            if tensor.shape[0] < m or tensor.shape[0] % m:
                raise ValueError(
                    f"{name} batch size ({tensor.shape[0]}) must be a positive multiple of num_microbatches ({m})"
                )
        return m

    def _plan(self, schedule: str, m: int, stage: int) -> list[Action]:
        if schedule == "interleaved":
            return interleaved_1f1b_schedule(self.num_stages, m, stage, self.num_chunks)
        return {**_SCHEDULES, **_V_SCHEDULES}[schedule](self.num_stages, m, stage)

    def _inbox(self, schedule: str, m: int) -> dict[int, list[tuple]]:
        """What each other rank will send us this step, in its order: its schedule, read as messages."""
        inbox: dict[int, list[tuple]] = {}
        last = self.num_chunks * self.num_stages - 1
        for q in range(self.num_stages):
            if q == self.stage:
                continue
            messages, headed = [], set()
            for a in self._plan(schedule, m, q):
                g = self._global_chunk(a.chunk, q)
                to = g + 1 if a.kind == "F" and g < last else g - 1 if a.kind == "B" and g > 0 else None
                if to is None or self._place(to)[0] != self.stage:
                    continue
                k = self._place(to)[1]
                if a.kind == "F" and k not in headed:  # a chunk's first activation comes after its header
                    headed.add(k)
                    messages.append(("header", k))
                messages.append(("act" if a.kind == "F" else "grad", a.microbatch, k))
            if messages:
                inbox[self._ranks[q]] = messages
        return inbox

    def _forward(self, step: _StepState, action: Action, received: torch.Tensor | None) -> tuple[float, list]:
        """Forward ``action``'s microbatch through its chunk: (t_start, the sends it posts). Its input is
        the batch's slice (global chunk 0) or the activation from the previous chunk's rank; its output
        is sent on (preceded, for the chunk's first forward, by the shape header) or turned into the loss."""
        i, k = action.microbatch, action.chunk
        if self._global_chunk(k) == 0:
            x = step.inputs[i]
        else:
            x = received.requires_grad_(received.is_floating_point())
        t_start = time.perf_counter()
        keep_graph = not step.checkpoint  # checkpointing: no graph now; the backward recomputes it from x and rng
        rng = _rng_state(step.device) if step.checkpoint else None
        with contextlib.nullcontext() if keep_graph else torch.no_grad():
            out = self._run_chunk(step, i, k, x)
        outgoing = []
        if self._is_last_chunk(k):
            step.total_loss += out.detach().double()
        elif self._next_rank(k) is None:  # the turn of the V: the next chunk is ours
            step.local["act", i, self._place(self._global_chunk(k) + 1)[1]] = out.detach()
        else:
            if k not in step.headers_sent:
                step.headers_sent.add(k)
                outgoing.append(self._header(out, k))
            outgoing.append(dist.P2POp(dist.isend, out.detach().contiguous(), self._next_rank(k), self.group))
        step.stash[(i, k)] = _Stashed(x, out if keep_graph else None, (tuple(out.shape), out.dtype), rng)
        self.peak_activations = max(self.peak_activations, len(step.stash))
        return t_start, outgoing

    def _backward(self, step: _StepState, action: Action, received: torch.Tensor | None) -> tuple[float, list]:
        """B of ``action``'s microbatch: (t_start, the sends it posts). Its output's gradient comes from
        the next chunk's rank (the loss itself after the last chunk); its input's gradient goes back.
        A whole backward frees the microbatch; a split one (a W follows) keeps it for its W."""
        i, k = action.microbatch, action.chunk
        split = (i, k) in step.split
        saved = step.stash[(i, k)] if split else step.stash.pop((i, k))  # B frees, unless a W follows
        t_start = time.perf_counter()
        x, out = saved.x, saved.out
        if step.checkpoint:  # recompute the forward: the same input, the same random draws
            x = x.detach().requires_grad_(x.requires_grad)
            with torch.random.fork_rng(devices=[step.device] if step.device.type == "cuda" else []):
                _set_rng_state(saved.rng, step.device)
                out = self._run_chunk(step, i, k, x)
        grad_out = None if self._is_last_chunk(k) else received  # d(loss)/d(out) from the next chunk
        if split:
            saved.out, saved.grad_out = out, grad_out
            grad_x = None
            if x.requires_grad:
                (grad_x,) = torch.autograd.grad(out, x, grad_out, retain_graph=True, allow_unused=True)
        else:
            out.backward(grad_out)
            grad_x = x.grad if x.is_leaf else None  # None: x is a view of the batch and backward() went on into it
        if self._global_chunk(k) == 0 and grad_x is not None:
            # B computes the input's gradient whenever the input requires grad, stage 0 included: there it goes
            # into the caller's batch (through the batch's own graph), as an unsplit backward's does.
            saved.x.backward(grad_x)
        outgoing = []
        if self._global_chunk(k) > 0:
            grad_x = torch.zeros_like(x) if grad_x is None else grad_x  # an unused input still answers
            if self._prev_rank(k) is None:  # the turn of the V: the previous chunk is ours
                step.local["grad", i, self._place(self._global_chunk(k) - 1)[1]] = grad_x
            else:
                outgoing.append(dist.P2POp(dist.isend, grad_x.contiguous(), self._prev_rank(k), self.group))
        return t_start, outgoing

    def _weight_backward(self, step: _StepState, action: Action) -> float:
        """W of ``action``'s microbatch: the chunk's weight gradients, into ``.grad``; frees the microbatch."""
        saved = step.stash.pop((action.microbatch, action.chunk))
        t_start = time.perf_counter()
        params = [p for p in self.chunks[action.chunk].parameters() if p.requires_grad]
        if params and saved.out.requires_grad:
            torch.autograd.backward(saved.out, saved.grad_out, inputs=params)
        return t_start

    def _run_chunk(self, step: _StepState, i: int, k: int, x: torch.Tensor) -> torch.Tensor:
        """Chunk k on microbatch i's input; after the last global chunk, the microbatch's share of the loss."""
        out = self.chunks[k](x)
        if self._is_last_chunk(k):
            # The mean of the microbatch means is the full-batch mean.
            out = self.loss_fn(out, step.targets[i]) / step.num_microbatches
        return out

    def _send_and_recv(self, outgoing: list, upcoming: list[Action], step: _StepState) -> None:
        """Post an action's sends together with the receives of the next action's input, as one batch,
        and wait for nothing: a rank never blocks in a send, so two neighbours that each send before
        they receive cannot wait on each other (Megatron-LM's ``send_forward_recv_backward``). For an
        F&B pair (``upcoming[0].overlap``) the B's gradient is posted too, before the F runs. Receives
        from a peer are posted in the order the peer sends (``step.inbox``), so one needed now may post
        others ahead of it; a chunk's shape header is received (blocking) before its activation's
        buffer can be made. Sends still in flight are kept (their tensors alive) and waited at the end."""
        step.sends = [(w, op) for w, op in step.sends if not w.is_completed()]
        ops, pending = list(outgoing), []  # pending: (message, buffer) of the receives in ops
        for action in upcoming[: 2 if upcoming and upcoming[0].overlap else 1]:
            need = self._needs(action, step)
            if need is None or need[1] in step.posted:
                continue
            peer, message = need
            while True:
                item = step.inbox[peer].pop(0)
                if item[0] == "header":  # post what we have, then learn the shape (sent right before)
                    self._post(ops, pending, step)
                    ops, pending = [], []
                    step.act_meta[item[1]] = self._recv_header(step.device, peer)
                    continue
                buffer = self._buffer(item, step)
                ops.append(dist.P2POp(dist.irecv, buffer, peer, self.group))
                pending.append((item, buffer))
                if item == message:
                    break
        self._post(ops, pending, step)

    def _post(self, ops: list, pending: list, step: _StepState) -> None:
        if not ops:
            return
        works = dist.batch_isend_irecv(ops)
        if len(works) != len(ops):  # coalesced into one work (NCCL): a receive is done when all are
            for message, buffer in pending:
                step.posted[message] = (works, buffer)
            return
        sends = len(ops) - len(pending)
        step.sends += list(zip(works[:sends], ops[:sends]))
        for (message, buffer), work in zip(pending, works[sends:]):
            step.posted[message] = ([work], buffer)

    def _needs(self, action: Action, step: _StepState) -> tuple[int, tuple] | None:
        """(peer, message) that ``action``'s input arrives in, or None (a W, an end of the model, the V's turn)."""
        i, k = action.microbatch, action.chunk
        if action.kind == "F" and self._global_chunk(k) > 0 and self._prev_rank(k) is not None:
            return self._prev_rank(k), ("act", i, k)
        if action.kind == "B" and not self._is_last_chunk(k) and self._next_rank(k) is not None:
            return self._next_rank(k), ("grad", i, k)
        return None

    def _take(self, step: _StepState, action: Action) -> torch.Tensor | None:
        """``action``'s input: its received message (waited for), or what the V's turn left in memory."""
        need = self._needs(action, step)
        if need is None:
            key = ("act" if action.kind == "F" else "grad", action.microbatch, action.chunk)
            return step.local.pop(key, None)
        works, buffer = step.posted.pop(need[1])
        for work in works:
            work.wait()
        return buffer

    def _buffer(self, message: tuple, step: _StepState) -> torch.Tensor:
        """An empty tensor for ``message``: an activation has its chunk's header's shape, a gradient the
        shape of our own output it belongs to (that forward ran before anyone could send it)."""
        kind, i, k = message
        shape, dtype = step.act_meta[k] if kind == "act" else step.stash[(i, k)].out_meta
        return torch.empty(shape, dtype=dtype, device=step.device)

    # -- helpers --------------------------------------------------------------------------------

    @property
    def _holds_first(self) -> bool:
        """Whether global chunk 0 is here (the inputs are needed): stage 0."""
        return self.stage == 0

    @property
    def _holds_last(self) -> bool:
        """Whether the last global chunk is here (the targets are needed): the last stage, or in a V stage 0."""
        return self._place(self.num_chunks * self.num_stages - 1)[0] == self.stage

    def _global_chunk(self, k: int, stage: int | None = None) -> int:
        s = self.stage if stage is None else stage
        if self.placement == "v":
            return s if k == 0 else 2 * self.num_stages - 1 - s
        return k * self.num_stages + s

    def _place(self, g: int) -> tuple[int, int]:
        """(stage, local chunk) holding global chunk g."""
        p = self.num_stages
        if self.placement == "v":
            return (g, 0) if g < p else (2 * p - 1 - g, 1)
        return g % p, g // p

    def _next_rank(self, k: int) -> int | None:
        """Global rank chunk k's output goes to; None after the last chunk or when the next chunk is ours."""
        g = self._global_chunk(k)
        if self._is_last_chunk(k) or self._place(g + 1)[0] == self.stage:
            return None
        return self._ranks[self._place(g + 1)[0]]

    def _prev_rank(self, k: int) -> int | None:
        """Global rank chunk k's input comes from; None for chunk 0 or when the previous chunk is ours."""
        g = self._global_chunk(k)
        if g == 0 or self._place(g - 1)[0] == self.stage:
            return None
        return self._ranks[self._place(g - 1)[0]]

    def _is_last_chunk(self, k: int) -> bool:
        return self._global_chunk(k) == self.num_chunks * self.num_stages - 1

    def _device(self, batch: torch.Tensor | None) -> torch.device:
        """Where this stage computes: its parameters', else the batch's, else the backend's default."""
        for tensor in itertools.chain(self.module.parameters(), self.module.buffers(), [batch]):
            if isinstance(tensor, torch.Tensor):
                return tensor.device
        nccl = dist.get_backend(self.group) == "nccl"
        return torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")

    def _record(self, action: Action, t_start: float, device: torch.device) -> None:
        if device.type == "cuda":  # kernels are asynchronous: wait so the timeline shows real work
            torch.cuda.synchronize(device)
        self.timeline.append((action, t_start, time.perf_counter()))

    def _header(self, out: torch.Tensor, k: int) -> dist.P2POp:
        """[dtype code, ndim, *shape, 0...]: sent before chunk k's first activation, which it describes."""
        if out.dim() > _MAX_DIMS or out.dtype not in _DTYPES:
            raise ValueError(f"stage {self.stage} output must have <= {_MAX_DIMS} dims and a dtype in {_DTYPES}")
        header = torch.zeros(_MAX_DIMS + 2, dtype=torch.int64, device=out.device)
        header[0], header[1] = _DTYPES.index(out.dtype), out.dim()
        header[2 : 2 + out.dim()] = torch.tensor(out.shape, dtype=torch.int64, device=out.device)
        return dist.P2POp(dist.isend, header, self._next_rank(k), self.group)

    def _recv_header(self, device: torch.device, peer: int) -> tuple[tuple[int, ...], torch.dtype]:
        header = torch.empty(_MAX_DIMS + 2, dtype=torch.int64, device=device)
        dist.recv(header, src=peer, group=self.group)
        dtype_code, ndim, *dims = header.tolist()
        return tuple(dims[:ndim]), _DTYPES[dtype_code]

    # END SOLUTION


# BEGIN SOLUTION
def _rng_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The RNG state a forward starts from (CPU, and the GPU's when it runs on one)."""
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def _set_rng_state(state: tuple[torch.Tensor, torch.Tensor | None], device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


# END SOLUTION
