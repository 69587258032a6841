"""Stray tensors: what device-faithful mode follows beyond factory calls (tests/harness/device_faithful.py).

A factory call without ``device=`` in watched code fails at once. Some CPU tensors are made elsewhere: by torch
for the caller (``nn.Linear(4, 8)`` makes its weight on the CPU; so does given code such as
``cs336_systems/models.py``'s ``DeepMLP``), by a draw from a CPU ``generator=``, or with an explicit
``device="cpu"``. Under NCCL each of them stays on the CPU until something moves it. On the first GPU run
(2026-11-27) a test built ``DeepMLP(...)`` in a rank and handed it to HSDP: "weight is on cpu, different from
other tensors on cuda:0". On gloo the same test passed, as every tensor is on the CPU there.

So, on gloo, each such tensor gets a tag (an attribute on the tensor object) saying where it was made: the chain
of watched ``file:line`` that led to the call. The tag follows the tensor: an op whose inputs carry one passes
it to its outputs (a view, ``.data``, ``zeros_like``, a ``Parameter`` made from it, the optimizer state made
like it); ``.to(device)`` or ``.cuda()`` removes it (the caller moved it, as on a GPU). Where NCCL would refuse
the tensor, the rank raises :class:`StrayTensor` naming it (``Linear.weight``, registered where) and where it
was made:

- an op mixes a tagged tensor with an untagged one, both with at least one dimension (a GPU fails with
  "Expected all tensors to be on the same device"); a CPU scalar (0-dim) mixes freely, as on a GPU; copies and
  indexing across devices are fine (``copy_``, ``x[i]``, ``p.data = t``);
- a ``ProcessGroup`` collective or send/recv gets a tagged tensor (NCCL: "No backend type associated with device
  type cpu").

And the job size: ``init_process_group`` with a world size above the GPUs this run stands for
(with ``--device-faithful`` asked for: the largest ``--world-sizes``; tests/harness/config.py) raises
:class:`TooManyRanks` (NCCL: "Duplicate GPU detected"); a test that starts such a job asks
``tests.harness.run.need_gpus`` first, which skips it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup
from torch.nn.modules import module as nn_module

from tests.harness.config import stand_in_gpus
from tests.harness.recorder import _PG_METHODS

_TAG = "_cs336_stray"  # the attribute a stray tensor carries: its Origin
_MOVES = {torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu}
# Ops a GPU runs across devices: a copy, indexing, rebinding .data (the output follows the first argument).
_ACROSS = {torch.Tensor.copy_, torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.data.__set__,
           torch.Tensor.set_, torch._has_compatible_shallow_copy_type}  # fmt: skip


class StrayTensor(RuntimeError):
    """A tensor that would be on the CPU under NCCL meets the rank's device (device-faithful mode)."""


class TooManyRanks(RuntimeError):
    """A job of more ranks than the run has GPUs for (device-faithful mode)."""


@dataclass(frozen=True)
class Origin:
    what: str  # "torch.empty(...) without device=", "Linear.weight (torch.empty(...) without device=)"
    site: str  # "cs336_systems/models.py:28 (in __init__) <- tests/test_mesh.py:115 (in hsdp_rank)"

    def named(self, name: str) -> Origin:
        return Origin(f"{name} ({self.what})", self.site)


def origin(t) -> Origin | None:
    return getattr(t, _TAG, None) if isinstance(t, torch.Tensor) else None


def tag(t: torch.Tensor, where: Origin) -> None:
    setattr(t, _TAG, where)


def untag(t) -> None:
    if isinstance(t, torch.Tensor) and _TAG in t.__dict__:
        delattr(t, _TAG)


def _tensors(args, kwargs) -> list[torch.Tensor]:
    """The tensors among the arguments, one list or tuple deep (``torch.cat([a, b])``)."""
    found = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            found.append(a)
        elif isinstance(a, (list, tuple)):
            found.extend(x for x in a if isinstance(x, torch.Tensor))
    return found


def _target(func, args, kwargs) -> str | None:
    """Where a move sends the tensor: "cpu" (``t.cpu()``, ``t.to("cpu")``), "device" (``t.to(device)``,
    ``t.to(other)``, ``t.cuda()``: the rank's, as far as gloo can tell) or None (``t.to(dtype)``)."""
    if func is torch.Tensor.cpu:
        return "cpu"
    if func is torch.Tensor.cuda:
        return "device"
    given = [kwargs.get("device"), *args[1:]]
    if any(isinstance(a, str) and a.startswith("cpu") for a in given):
        return "cpu"
    return "device" if any(isinstance(a, (torch.device, str, torch.Tensor)) for a in given) else None


def follow(func, args, kwargs, site):
    """Run ``func`` (any op but a factory call), raising where a GPU would, and tag its outputs; ``site()`` is the
    watched call chain that led here."""
    if func in _MOVES:
        out = func(*args, **kwargs)
        target = _target(func, args, kwargs)
        if target == "device":
            untag(args[0])  # on the CPU .to(cpu) returns the tensor itself: it now stands for the moved one
        elif target == "cpu" and not _torch_called():  # torch's .to("cpu") (object collectives) is NCCL's cuda
            if out is args[0]:  # a GPU makes a new tensor: so does this, an alias, leaving the input as it was
                out = out.view_as(out)
            tag(out, Origin("a tensor moved with .cpu() or .to('cpu')", site()))
        elif (where := origin(args[0])) is not None:
            _tag_outputs(out, args, where)
        return out
    tensors = _tensors(args, kwargs)
    stray = next((t for t in tensors if origin(t) is not None), None)
    if stray is None:
        return func(*args, **kwargs)
    big_stray = next((t for t in tensors if t.dim() > 0 and origin(t) is not None), None)
    placed = next((t for t in tensors if t.dim() > 0 and origin(t) is None), None)
    if func in _ACROSS:
        out = func(*args, **kwargs)
        if func is torch.Tensor.data.__set__:
            (tag(args[0], origin(args[1])) if origin(args[1]) else untag(args[0]))
        elif (where := origin(args[0])) is not None:
            _tag_outputs(out, args, where)
        return out
    if big_stray is not None and placed is not None:
        raise StrayTensor(_mixed_message(func, origin(big_stray), placed))
    out = func(*args, **kwargs)
    if placed is None:  # every input of a dimension is on the CPU: so is the output
        _tag_outputs(out, args, origin(big_stray if big_stray is not None else stray))
    return out


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_HARNESS_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _torch_called() -> bool:
    """The op was called by torch's own code (past this harness and torch's dispatch to the mode)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(_HARNESS_DIR) or name.endswith(("overrides.py", "_device.py"))):
            return name.startswith(_TORCH_DIR)
        frame = frame.f_back
    return False


def _tag_outputs(out, args, where: Origin) -> None:
    """Tag the new tensors ``out`` holds (not an input given back: an in-place op keeps its own device)."""
    for t in out if isinstance(out, (list, tuple)) else (out,):
        if isinstance(t, torch.Tensor) and not any(t is a for a in args):
            tag(t, where)


def _op_name(func) -> str:
    name = getattr(func, "__name__", str(func))
    owner = getattr(func, "__objclass__", None) or getattr(func, "__self__", None)
    return f"Tensor.{name}" if owner is not None and "Tensor" in str(owner) else f"torch.{name}"


def _mixed_message(func, where: Origin, placed: torch.Tensor) -> str:
    return (f"stray CPU tensor: {where.what}, made at {where.site}, meets a tensor of shape {tuple(placed.shape)} on "
            f"the rank's device in {_op_name(func)}. Under NCCL nothing moved it to cuda:local_rank, and the GPU "
            "fails with 'Expected all tensors to be on the same device'. Build it on the rank's device "
            "(device=ctx.device, or module.to(ctx.device) before use; in an implementation, the inputs' device) "
            "(device-faithful mode, tests/README.md)")  # fmt: skip


def _sent_message(method: str, where: Origin) -> str:
    return (f"stray CPU tensor in ProcessGroup.{method}: {where.what}, made at {where.site}. Under NCCL it would be "
            "on the CPU, and NCCL refuses it ('No backend type associated with device type cpu'); move it to the "
            "rank's device first (device-faithful mode, tests/README.md)")  # fmt: skip


def _flat(obj) -> list:
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _flat(o)]
    return [obj]


class StrayTensorWatch:
    """Installed with DeviceFaithfulMode around one task in a rank: tags Parameters made from stray tensors and
    names them where modules register them; refuses stray tensors in communication and jobs too big."""

    def __init__(self, site) -> None:
        self._site = site  # () -> the watched call chain, for messages
        self._saved: dict = {}
        self._hooks: list = []

    def __enter__(self) -> StrayTensorWatch:
        new = torch.nn.Parameter.__new__
        self._saved[(torch.nn.Parameter, "__new__")] = new

        def parameter(cls, data=None, requires_grad=True):
            p = new(cls, data, requires_grad)
            if (where := origin(data)) is not None:
                tag(p, where)
            return p

        torch.nn.Parameter.__new__ = parameter
        for method in _PG_METHODS:
            if method in vars(ProcessGroup):
                self._saved[(ProcessGroup, method)] = vars(ProcessGroup)[method]
                setattr(ProcessGroup, method, _refuse_strays(method, getattr(ProcessGroup, method)))
        self._saved[(dist, "init_process_group")] = dist.init_process_group
        dist.init_process_group = _within_gpus(dist.init_process_group, self._site)
        self._hooks = [nn_module.register_module_parameter_registration_hook(_name_it),
                       nn_module.register_module_buffer_registration_hook(_name_it)]  # fmt: skip
        return self

    def __exit__(self, *exc) -> None:
        for (owner, name), original in self._saved.items():
            setattr(owner, name, original)
        self._saved.clear()
        for hook in self._hooks:
            hook.remove()


def _name_it(module, name, tensor):
    if (where := origin(tensor)) is not None and " (" not in where.what:
        tag(tensor, where.named(f"{type(module).__name__}.{name}"))


def _refuse_strays(method: str, original):
    def checked(pg, *args, **kwargs):
        for t in _flat([*args, *kwargs.values()]):
            if (where := origin(t)) is not None:
                raise StrayTensor(_sent_message(method, where))
        return original(pg, *args, **kwargs)

    checked.__name__ = method
    return checked


def _within_gpus(original, site):
    def init_process_group(*args, **kwargs):
        world_size, limit = kwargs.get("world_size", -1), stand_in_gpus()
        if limit is not None and isinstance(world_size, int) and world_size > limit:
            raise TooManyRanks(
                f"a job of {world_size} ranks joins a process group at {site() or 'an unwatched site'}, but this "
                f"run stands for a node of {limit} GPU(s) (the largest --world-sizes): under NCCL it fails with "
                f"'Duplicate GPU detected'. A test that starts a job of N ranks calls "
                f"tests.harness.run.need_gpus(N, why) first, which skips it where N GPUs are not there "
                "(device-faithful mode, tests/README.md)"
            )  # fmt: skip
        return original(*args, **kwargs)

    return init_process_group


def caller_chain(watched: tuple[str, ...], shown, skip: tuple[str, ...]) -> str:
    """The watched frames that led here, innermost first, one per run of frames in one file, at most the two
    innermost and the outermost (``cs336_systems/models.py:39 (in __init__) <- tests/test_mesh.py:115 (in f)``)."""
    frame, found, last_file = sys._getframe(1), [], None
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if name.startswith(watched) and not name.startswith(skip) and name != last_file:
            found.append(f"{shown(name)}:{frame.f_lineno} (in {frame.f_code.co_name})")
            last_file = name
        frame = frame.f_back
    return " <- ".join(found if len(found) <= 3 else [*found[:2], "...", found[-1]])
