"""Device-faithful mode: catch, on CPU and gloo, the allocations that would land on the wrong device under NCCL.

Under NCCL every rank works on ``cuda:local_rank``, yet ``torch.zeros(n)`` (any factory call without
``device=``) still makes a CPU tensor: all-reducing it fails ("No backend type associated with device type
cpu"), adding it to a CUDA tensor fails, feeding it to a model on the GPU fails. On gloo the same code passes,
because everything is on the CPU. On gloo (the default there; ``--no-device-faithful`` or ``CS336_DEVICE_FAITHFUL=0``
turns it off, ``--device-faithful`` turns it on under NCCL too) each rank runs its test function under
:class:`DeviceFaithfulMode`, which raises :class:`ImplicitDeviceAllocation` at any
factory call without ``device=`` made from the implementation under test, from the given package
(``cs336_systems``) or from the tests' own rank code (``tests/``), naming the call site. Calls from inside
torch (``nn.Linear``'s parameters, optimizer state) are the caller's to move with ``.to``: their tensors are
followed instead (tests/harness/stray_tensors.py), and fail, naming where they were made, where NCCL would fail
them: meeting the rank's tensors in an op, or sent in a collective. So does a job of more ranks than the node the
run stands for (the largest ``--world-sizes``).

What passes: ``device=x.device`` (or ``ctx.device``), ``torch.zeros_like(x)``, ``x.new_zeros(n)``, an explicit
``device="cpu"`` where a CPU tensor is really meant (bookkeeping never sent nor mixed with the inputs, a CPU-side
oracle), a draw from an explicit ``generator=`` (its device decides: data drawn on the CPU, then moved): the
keyword states the intent, and the mode takes it at its word at the call (the CPU tensors are then followed as
torch's are: moved before they meet the rank's, they pass). And the constructor of an ``nn.Module`` given only
sizes (no module, no tensor) may make its parameters on the CPU, as ``nn.Linear`` does: the caller moves them.

``CS336_DEVICE_FAITHFUL_LOG=FILE`` (with the mode on) appends each site to FILE instead of raising: every
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
from tests.harness.stray_tensors import Origin, StrayTensorWatch, caller_chain, follow, tag

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_THIS_FILE = os.path.abspath(__file__)
_REPO = str(Path(__file__).resolve().parents[2]) + os.sep
_HARNESS = str(Path(__file__).resolve().parent) + os.sep  # the harness's own tensors are not the test's
_VENVS = tuple(_REPO + name + os.sep for name in (".venv", "venv", ".tox"))
# Factories whose first argument may be a tensor, which they keep on its device.
_FROM_DATA = {torch.tensor, torch.as_tensor, torch.asarray}


class ImplicitDeviceAllocation(RuntimeError):
    """A factory call without ``device=`` in implementation or rank code (device-faithful mode)."""


# File names of generated modules whose code is watched like the implementation's (file-name prefixes).
_WATCHED: tuple[str, ...] = ()
# <staff>
_WATCHED += ("<mutant ",)  # a staff mutant's module (tests/staff/mutants/loader.py)
# </staff>


def _generated(filename: str) -> bool:
    """Code with no file of its own (``<string>``, ``<frozen ...>``): its caller decides; a module named in
    ``_WATCHED`` is watched."""
    return filename[:1] == "<" and not filename.startswith(_WATCHED)


_COMPREHENSIONS = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>")


def _builds_fresh_module(frame) -> bool:
    """The call is in the constructor of an ``nn.Module`` given no module or tensor: it makes new parameters on
    the CPU, as ``nn.Linear`` does, for the caller to move with ``.to(device)``. A constructor that wraps a module
    or takes tensors (DDP's buckets, FSDP's flat shards) must follow their device instead."""
    while frame is not None and frame.f_code.co_name in _COMPREHENSIONS:
        frame = frame.f_back
    if frame is None or frame.f_code.co_name != "__init__":
        return False
    local = frame.f_locals
    code = frame.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    if not names or not isinstance(local.get(names[0]), torch.nn.Module):
        return False
    given = [local.get(n) for n in names[1:]]
    if code.co_flags & 0x04:  # *args
        given += list(local.get(code.co_varnames[len(names)], ()))
    return not any(isinstance(v, (torch.nn.Module, torch.Tensor)) for v in given)


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
    """Raise at a factory call without ``device=`` whose caller is watched code (see the module's docstring).

    ``watched`` are folder prefixes (absolute, ending in a separator); the default is this repository (minus
    its virtual environments) and the implementation package ``impl`` wherever it is installed.
    """

    def __init__(self, impl: str | None = None, device: torch.device | None = None) -> None:
        super().__init__()
        self.device = device
        watched = [_REPO]
        if impl is not None and (where := _package_dir(impl)) is not None and not where.startswith(_REPO):
            watched.append(where)
        self.watched = tuple(watched)
        self.factories = _device_constructors()
        self.log = os.environ.get(defaults.ENV_DEVICE_FAITHFUL_LOG) or None

    def __enter__(self):
        self._watch = StrayTensorWatch(self._chain).__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._watch.__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in self.factories or (func in _FROM_DATA and args and isinstance(args[0], torch.Tensor)):
            return follow(func, args, kwargs, self._chain)  # not a factory, or one that keeps its data's device
        device, generator = kwargs.get("device"), kwargs.get("generator")
        name = f"torch.{getattr(func, '__name__', func)}"
        if device is None and generator is None:
            site = self._watched_caller()
            if site is not None and self.log is not None:  # survey: list every site in one run, raise none
                with open(self.log, "a") as f:
                    f.write(f"{site}: {name}\n")
            elif site is not None:
                raise ImplicitDeviceAllocation(self._message(func, site))
            return self._stray(func(*args, **kwargs), f"{name}(...) without device=")  # torch's, for the caller
        out = func(*args, **kwargs)
        if self._watched_caller(fresh_modules_too=True) is None:
            return out  # torch's own call: it knows which device it means (all_gather_object's buffers)
        if device is None and generator.device.type == "cpu":
            return self._stray(out, f"{name}(..., generator=) drawn on the CPU")
        if isinstance(device, str) and device.startswith("cpu"):
            return self._stray(out, f"{name}(..., device={device!r})")
        return out

    def _chain(self) -> str:
        return caller_chain(self.watched, _shown, (*_VENVS, _HARNESS))

    def _stray(self, out, what: str):
        """Tag ``out``, a CPU tensor under NCCL too, with where it was made (tests/harness/stray_tensors.py)."""
        chain = self._chain()
        if chain and isinstance(out, torch.Tensor):
            tag(out, Origin(what, chain))
        return out

    def _watched_caller(self, fresh_modules_too: bool = False) -> str | None:
        """``file:line`` of the factory's direct caller if it is watched code; else None (torch's own calls, such
        as ``nn.Linear`` making its parameters, are the caller's to move)."""
        frame = sys._getframe(1)
        while frame is not None and (frame.f_code.co_filename == _THIS_FILE or _generated(frame.f_code.co_filename)):
            frame = frame.f_back
        if frame is None or frame.f_code.co_filename.startswith(_TORCH_DIR):
            return None
        generated = frame.f_code.co_filename.startswith(_WATCHED)  # a generated module that is watched code
        name = frame.f_code.co_filename if generated else os.path.abspath(frame.f_code.co_filename)
        if not generated and (not name.startswith(self.watched) or name.startswith(_VENVS)):
            return None
        # A constructor making fresh parameters, as nn.Linear does, is exempt in watched code of either kind.
        if not fresh_modules_too and _builds_fresh_module(frame):
            return None
        return f"{_shown(name)}:{frame.f_lineno} (in {frame.f_code.co_name})"

    def _message(self, func, site: str) -> str:
        fn = f"torch.{getattr(func, '__name__', func)}"
        where = f"{self.device}" if self.device is not None and self.device.type != "cpu" else "cuda:local_rank"
        return (f"implicit CPU allocation at {site}: {fn}(...) without device=. Under NCCL the rank works on {where} "
                f"but this tensor would be on the CPU; pass device=x.device (the inputs' device, or ctx.device in a "
                f"test) or use torch.zeros_like(x) / x.new_zeros(...); write device='cpu' if a CPU tensor is really "
                "meant (device-faithful mode, tests/README.md)")  # fmt: skip
