"""Device-faithful mode: on CPU and gloo, fail what a GPU run under NCCL fails, and pass what it passes.

Under NCCL every rank works on ``cuda:local_rank``, yet ``torch.zeros(n)`` (any factory call without
``device=``) still makes a CPU tensor: all-reducing it fails ("No backend type associated with device type
cpu"), adding it to a CUDA tensor fails, feeding it to a model on the GPU fails. On gloo the same code passes,
because everything is on the CPU. On gloo (the default there; ``--no-device-faithful`` or ``CS336_DEVICE_FAITHFUL=0``
turns it off, ``--device-faithful`` turns it on under NCCL too) each rank runs its test function under
:class:`DeviceFaithfulMode`, which stands every tensor for where a GPU run would have it:

- a tensor made without ``device=`` (in the implementation, the given package, the tests' rank code or torch on
  their behalf), with ``device="cpu"``, from a CPU ``generator=``, a buffer or an array, or moved with
  ``.cpu()`` is a CPU tensor: it gets a tag naming where it was made and is followed through every op
  (tests/harness/stray_tensors.py), and fails, naming that place, exactly where CUDA refuses it (mixed with the
  rank's tensors in an op, sent in a collective, written in place from them, ...). Where CUDA accepts it (copied
  into a GPU tensor, used as an index or a 0-dim scalar, read with ``.item()`` or ``.tolist()``) it passes;
- every other tensor stands for one on the rank's GPU, and says so: ``.device`` is ``cuda:rank`` (``ctx.device``
  too), ``.is_cuda`` is True; a stray one answers ``cpu``. ``device=t.device``, ``.to(ctx.device)``,
  ``.cuda()`` are read as the rank's device. ``torch.cuda``'s streams, events, ``synchronize`` and random state
  are stood in for (:class:`StandInCuda`);
- the autograd engine runs under the mode: hooks and ``Function.backward`` are watched as forward is, and a
  gradient handed back on the other device than its input fails.

So does a job of more ranks than the node the run stands for (the largest ``--world-sizes``). What the mode
cannot see is listed in tests/README.md.

``CS336_DEVICE_FAITHFUL_LOG=FILE`` (with the mode on) appends each refusal to FILE instead of raising: every
site of a whole run in one list.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._device import _device_constructors

from tests.harness import defaults
from tests.harness.stray_tensors import (
    _LOG,
    _MOVES,
    _STAND_IN,
    Origin,
    Patches,
    StrayTensorWatch,
    called_by_distributed,
    caller_chain,
    checked_hook,
    device_kind,
    follow,
    origin,
    refuse,
    tag,
    untag,
)

_THIS_FILE = os.path.abspath(__file__)
_REPO = str(Path(__file__).resolve().parents[2]) + os.sep
_HARNESS = str(Path(__file__).resolve().parent) + os.sep  # the harness's own tensors are not the test's
_VENVS = tuple(_REPO + name + os.sep for name in (".venv", "venv", ".tox"))
# Factories whose first argument may be a tensor, which they keep on its device.
_FROM_DATA = {torch.tensor, torch.as_tensor, torch.asarray}


def _shown(name: str) -> str:
    return name[len(_REPO) :] if name.startswith(_REPO) else name


def _package_dir(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.abspath(next(iter(spec.submodule_search_locations))) + os.sep


class DeviceFaithfulMode(TorchFunctionMode):
    """Follow the tensors a GPU run would have on the CPU, and stand the others for the rank's GPU (see the
    module's docstring).

    ``watched`` are folder prefixes (absolute, ending in a separator); the default is this repository (minus
    its virtual environments) and the implementation package ``impl`` wherever it is installed. ``stand_in``
    (gloo: ``cuda:rank``) is the device the rank's tensors report; None where they are really there (NCCL).
    """

    def __init__(self, impl: str | None = None, device: torch.device | None = None,
                 stand_in: torch.device | None = None) -> None:  # fmt: skip
        super().__init__()
        self.device = device
        self.stand_in = stand_in
        watched = [_REPO]
        if impl is not None and (where := _package_dir(impl)) is not None and not where.startswith(_REPO):
            watched.append(where)
        self.watched = tuple(watched)
        self.factories = _device_constructors()
        self.log = os.environ.get(defaults.ENV_DEVICE_FAITHFUL_LOG) or None

    def __enter__(self):
        self._watch = StrayTensorWatch(self).__enter__()
        self._cuda = StandInCuda(self.stand_in).__enter__() if self.stand_in is not None else None
        _LOG[0] = self.log
        _STAND_IN[0] = self.stand_in
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            _LOG[0] = _STAND_IN[0] = None
            if self._cuda is not None:
                self._cuda.__exit__(*exc)
            self._watch.__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            return func(*args, **kwargs)  # an aten op a dispatch mode calls: its tensors are the real ones
        if func in _WHERE and self.stand_in is not None:
            return self._reported(func, args[0])
        if func is torch.Tensor.register_hook:
            args = (args[0], checked_hook(args[1] if len(args) > 1 else kwargs.pop("hook"), self._chain))
        if self.stand_in is not None and kwargs.get("pin_memory"):
            kwargs = {**kwargs, "pin_memory": False}  # a CPU build cannot pin: the copy is a host one all the same
        kind = device_kind(kwargs.get("device")) if func not in _NOT_MADE else None
        if kind is not None:  # the device is stated: the caller's word is taken (cuda:r stands for gloo's CPU)
            generator = kwargs.get("generator")
            if kind == "device" and generator is not None and generator.device.type == "cpu":
                refuse(f"torch.{getattr(func, '__name__', func)}(..., device=<the rank's GPU>, generator=<a CPU "
                       f"generator>) at {self._chain()}: the GPU fails with \"Expected a 'cuda' device type for "
                       "generator but found 'cpu'\". Draw on the CPU and move the draw: torch.randn(..., "
                       "generator=g).to(x.device) (device-faithful mode, tests/README.md)")  # fmt: skip
            out = func(*args, **({**kwargs, "device": torch.device("cpu")} if self.stand_in is not None else kwargs))
            return self._placed(out, kind, args, f"torch.{getattr(func, '__name__', func)}(..., device='cpu')")
        if func not in self.factories or (func in _FROM_DATA and args and isinstance(args[0], torch.Tensor)):
            return follow(func, args, kwargs, self._chain)  # not a factory, or one that keeps its data's device
        name = f"torch.{getattr(func, '__name__', func)}"
        out = func(*args, **kwargs)
        generator = kwargs.get("generator")
        if generator is None:
            return self._stray(out, f"{name}(...) without device=")
        return self._stray(out, f"{name}(..., generator=) drawn on the CPU") if generator.device.type == "cpu" else out

    def _reported(self, func, t: torch.Tensor):
        """``.device``, ``.is_cuda``, ``.is_cpu``, ``.get_device()`` as a GPU run would answer them: the stand-in
        device for a tensor on the rank's device, the CPU for a stray one; the truth for the harness's own code."""
        real = func(t)
        if torch.Tensor.device.__get__(t).type != "cpu" or _read_by_harness():
            return real
        on_cpu = origin(t) is not None
        return {"device": torch.device("cpu") if on_cpu else self.stand_in, "is_cuda": not on_cpu,
                "is_cpu": on_cpu, "get_device": -1 if on_cpu else self.stand_in.index}[_WHERE[func]]  # fmt: skip

    def _placed(self, out, kind: str, args, what: str):
        """A tensor made or moved with ``device=`` stated: on the rank's device (untagged, a new tensor) or the
        CPU (tagged), except where torch.distributed picks the device by backend (gloo's CPU is NCCL's GPU)."""
        if not isinstance(out, torch.Tensor):
            return out
        if kind == "cpu" and called_by_distributed():
            kind = "device"
        given_back = any(out is a for a in args)
        if kind == "device":
            if origin(out) is not None:
                out = out.clone() if given_back else out
                untag(out)
            return out
        if origin(out) is None:
            return self._stray(out.clone() if given_back else out, what)
        return out

    def _chain(self) -> str:
        return caller_chain(self.watched, _shown, (*_VENVS, _HARNESS))

    def _stray(self, out, what: str):
        """Tag ``out``, a CPU tensor under NCCL too, with where it was made (tests/harness/stray_tensors.py)."""
        chain = self._chain()
        if chain and isinstance(out, torch.Tensor):
            tag(out, Origin(what, chain))
        return out


# Calls with a device= that make no tensor of it here: the moves (stray_tensors.follow), Module.to's parser.
_NOT_MADE = {*_MOVES, torch._C._nn._parse_to}
# What code asks a tensor about where it lives, answered as on a GPU (DeviceFaithfulMode._reported).
_WHERE = {torch.Tensor.device.__get__: "device", torch.Tensor.is_cuda.__get__: "is_cuda",
          torch.Tensor.is_cpu.__get__: "is_cpu", torch.Tensor.get_device: "get_device"}  # fmt: skip
_MODE_FILES = (_THIS_FILE, os.path.join(_HARNESS, "stray_tensors.py"))


def _read_by_harness() -> bool:
    """The question comes from the harness's own code (the recorder, the worker): it gets the truth."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name not in _MODE_FILES and not name.endswith("overrides.py"):
            return name.startswith(_HARNESS)
        frame = frame.f_back
    return False


class StandInCuda:
    """``torch.cuda``'s calls that code makes for a tensor on a GPU, answered on a CPU build while the rank's
    tensors report ``cuda:rank``: streams and events that are always done, ``synchronize`` and ``set_device``
    that have nothing to do, the device's random state kept in the CPU generator (which draws the "GPU"
    tensors here). ``torch.cuda.is_available()`` keeps its answer: code that branches on it sees the laptop."""

    def __init__(self, stand_in: torch.device) -> None:
        self.stand_in = stand_in
        self._patches = Patches()

    def __enter__(self) -> StandInCuda:
        fakes = {"synchronize": _nothing, "set_device": _nothing, "current_stream": _Stream,
                 "default_stream": _Stream, "Stream": _Stream, "Event": _Event, "stream": _StreamContext,
                 "current_device": lambda: self.stand_in.index,
                 "get_rng_state": lambda device=None: _on_cpu(torch.random.get_rng_state)(),
                 "set_rng_state": lambda state, device=None: torch.set_rng_state(state)}  # fmt: skip
        for name, fake in fakes.items():
            self._patch(torch.cuda, name, fake)
        # The given launcher's jobs run on gloo here: their ranks stand for GPUs too (cs336_systems/launcher.py).
        launcher = importlib.import_module("cs336_systems.launcher")
        self._patch(launcher, "rank_device", lambda backend, rank: torch.device("cuda", rank))
        self._patch(torch.Tensor, "record_stream", _nothing)  # torch's parser refuses a stood-in stream
        # Random states are CPU tensors on a GPU too.
        self._patch(torch, "get_rng_state", _on_cpu(torch.get_rng_state))
        self._patch(torch.random, "get_rng_state", _on_cpu(torch.random.get_rng_state))
        return self

    def _patch(self, owner, name: str, value) -> None:
        self._patches.set(owner, name, value)

    def __exit__(self, *exc) -> None:
        self._patches.restore()


def _on_cpu(get):
    def got(*args, **kwargs):
        out = get(*args, **kwargs)
        tag(out, Origin(f"torch.{get.__name__}()", "torch"))
        return out

    return got


def _nothing(*args, **kwargs) -> None:
    return None


class _Event:
    def __init__(self, *args, **kwargs) -> None:
        pass

    def record(self, stream=None) -> None:
        pass

    def wait(self, stream=None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end) -> float:
        return 0.0


class _Stream(_Event):
    def wait_event(self, event) -> None:
        pass

    def wait_stream(self, stream) -> None:
        pass

    def record_event(self, event=None) -> _Event:
        return event or _Event()


class _StreamContext:
    def __init__(self, stream=None) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass
