"""Stray tensors: the CPU tensors a GPU run would have, followed on gloo (tests/harness/device_faithful.py).

Under NCCL every rank works on ``cuda:local_rank``, yet some tensors are on the CPU there: one made without
``device=`` (``torch.zeros(n)``, ``torch.tensor(shape)``, ``nn.Linear(4, 8)``'s weight), one made with
``device="cpu"`` or drawn from a CPU ``generator=``, a ``.cpu()`` copy, a tensor made from a buffer or an array.
On gloo every tensor is on the CPU, so the mode gives each of those a tag (an attribute on the tensor object)
saying where it was made: the chain of watched ``file:line`` that led to the call. Every other tensor stands for
one on the rank's GPU.

The tag follows the tensor: an op whose tensors all carry one tags its outputs (a view, ``.data``, ``zeros_like``,
a ``Parameter`` made from it, the optimizer state made like it); ``.to(device)`` and ``.cuda()`` give an untagged
copy (the caller moved it, as on a GPU). The rank raises :class:`StrayTensor`, naming the tensor and where it was
made, exactly where CUDA refuses it:

- an op mixes a tagged tensor of one or more dimensions with an untagged one ("Expected all tensors to be on the
  same device"); a tagged 0-dim tensor is a CPU scalar, which CUDA takes as an *input* of an op on the GPU;
- an op writes into a tagged tensor (in place, or ``out=``) from an untagged one, of any dimension;
- a ``ProcessGroup`` collective or send/recv gets a tagged tensor ("No backend type associated with device type
  cpu");
- ``set_`` of a tensor over storage of the other kind, a tagged tensor indexed by an untagged index;
- ``.numpy()`` (or ``np.asarray``) or ``.pin_memory()`` of an untagged tensor: CPU-only ops on a GPU tensor;
- a gradient handed back to autograd on the other device than its input: a ``Function.backward`` returning a
  CPU gradient of one or more dimensions for a GPU input (or the reverse), a tensor hook changing its value's
  device ("invalid gradient ... expected device cuda:0 but got cpu").

What CUDA accepts passes: copies across devices (``copy_``, slice assignment, ``.to``, ``p.data = t``), a CPU
index into a GPU tensor, a 0-dim CPU tensor as a scalar, ``.item()``, ``.tolist()``, shapes.

Backward is watched too: the autograd engine runs with the mode on (hooks, ``Function.backward``,
``torch.autograd.grad``). And the job size: ``init_process_group`` with a world size above the GPUs this run
stands for (with ``--device-faithful`` asked for: the largest ``--world-sizes``; tests/harness/config.py) raises
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

_TAG = "_cs336_stray"  # the attribute a stray tensor (or a storage) carries: its Origin
_PLACED = "_cs336_placed"  # the attribute a storage of an untagged tensor carries
_MOVES = {torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu}
# Ops a GPU runs across devices: a copy, indexing, rebinding .data (the output follows the first argument).
_ACROSS = {torch.Tensor.copy_, torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.data.__set__,
           torch.Tensor.set_, torch._has_compatible_shallow_copy_type}  # fmt: skip
# Ops that only a CPU tensor can run.
_CPU_ONLY = {torch.Tensor.numpy, torch.Tensor.__array__, torch.Tensor.pin_memory}
_STORAGE = {torch.Tensor.untyped_storage, torch.Tensor.storage}
_IN_PLACE_OPERATORS = {f"__i{op}__" for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul",
                                                "and", "or", "xor", "lshift", "rshift")}  # fmt: skip
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_DISTRIBUTED_DIR = _TORCH_DIR + "distributed" + os.sep
_HARNESS_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_LOG: list[str | None] = [None]  # CS336_DEVICE_FAITHFUL_LOG: where refusals are listed instead of raised
_STAND_IN: list[torch.device | None] = [None]  # gloo: the GPU the rank's tensors stand for (cuda:rank); NCCL: None
_INHERITED = object()  # a patched class attribute that the class inherited: deleted again on exit


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


torch.serialization.add_safe_globals([Origin])  # a tagged tensor saved by a rank loads with weights_only=True


def origin(t) -> Origin | None:
    return getattr(t, _TAG, None) if isinstance(t, torch.Tensor) else None


def tag(t: torch.Tensor, where: Origin) -> None:
    setattr(t, _TAG, where)


def untag(t) -> None:
    if isinstance(t, torch.Tensor) and _TAG in t.__dict__:
        delattr(t, _TAG)


def refuse(message: str) -> None:
    """Raise :class:`StrayTensor`, or, with ``CS336_DEVICE_FAITHFUL_LOG`` set, list it there and go on."""
    if _LOG[0] is None:
        raise StrayTensor(message)
    with open(_LOG[0], "a") as f:
        f.write(message.split(". ", 1)[0] + "\n")


def _tensors(args, kwargs) -> list[torch.Tensor]:
    """The tensors among the arguments, one list or tuple deep (``torch.cat([a, b])``)."""
    found = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            found.append(a)
        elif isinstance(a, (list, tuple)):
            found.extend(x for x in a if isinstance(x, torch.Tensor))
    return found


def device_kind(d) -> str | None:
    """ "cpu" or "device" (any accelerator: the rank's GPU, as far as gloo can tell) for a device argument in any
    spelling (``"cpu"``, ``torch.device("cpu")``, ``"cuda:1"``, an int); None for anything else (``"meta"``: no
    memory anywhere, left as it is)."""
    if isinstance(d, str):
        try:
            d = torch.device(d)
        except RuntimeError:
            return None
    if isinstance(d, torch.device):
        return None if d.type == "meta" else "cpu" if d.type == "cpu" else "device"
    if isinstance(d, int) and not isinstance(d, bool):
        return "device"
    return None


def calling_file() -> str:
    """The file of the first frame past this harness and torch's dispatch to the mode."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(_HARNESS_DIR) or name.endswith(("overrides.py", "_device.py"))):
            return name
        frame = frame.f_back
    return ""


def called_by_distributed() -> bool:
    """torch.distributed's own code made this call: its devices are the backend's (``cpu`` for gloo, the rank's
    GPU for NCCL), so a ``.to("cpu")`` or ``device="cpu"`` there stands for the rank's device."""
    return calling_file().startswith(_DISTRIBUTED_DIR)


def _move(func, args, kwargs, site):
    """``.to``, ``.cuda``, ``.cpu``: a GPU makes a new tensor for a move across devices, and leaves the input where
    it was; the result is tagged when it lands on the CPU."""
    src = args[0]
    if func is torch.Tensor.cpu:
        target = "cpu"
    elif func is torch.Tensor.cuda and _STAND_IN[0] is not None:  # a CPU build has no .cuda(): stand it in
        target, args, kwargs = "device", (src,), {k: v for k, v in kwargs.items() if k == "non_blocking"}
        func = torch.Tensor.to
    elif func is torch.Tensor.cuda:
        target = "device"
    else:
        target, args, kwargs = _to_target(args, kwargs)
    out = func(*args, **kwargs)
    if target == "cpu" and func is torch.Tensor.to and called_by_distributed():
        target = "device" if origin(src) is None else "cpu"  # the backend's device: gloo's CPU is NCCL's GPU
    if target == "device":
        if origin(src) is not None:
            out = out.clone() if out is src else out
            untag(out)
    elif target == "cpu":
        if origin(src) is None:
            out = out.clone() if out is src else out
            tag(out, Origin("a tensor moved with .cpu() or .to('cpu')", site()))
    elif (where := origin(src)) is not None:
        _tag_outputs(out, args, where)
    return out


def _to_target(args, kwargs):
    """Where ``t.to(...)`` sends ``t`` ("cpu", "device" or None for a dtype only), and its arguments with the
    rank's device spelled as the CPU it is on gloo."""
    args, kwargs = list(args), dict(kwargs)
    target, cpu = None, torch.device("cpu")
    for i, a in enumerate(args[1:], start=1):
        if isinstance(a, torch.Tensor):  # t.to(other): other's device and dtype
            target = "cpu" if origin(a) is not None else "device"
        elif (kind := device_kind(a)) is not None:
            target = kind
            args[i] = cpu if _STAND_IN[0] is not None else a
    if (kind := device_kind(kwargs.get("device"))) is not None:
        target = kind
        kwargs["device"] = cpu if _STAND_IN[0] is not None else kwargs["device"]
    return target, tuple(args), kwargs


def follow(func, args, kwargs, site):
    """Run ``func`` (any op but a factory call), refusing what a GPU refuses, and tag its outputs; ``site()`` is
    the watched call chain that led here."""
    if func in _MOVES:
        return _move(func, args, kwargs, site)
    if func in _CPU_ONLY and _STAND_IN[0] is not None:  # on NCCL the GPU itself refuses
        if origin(args[0]) is None:
            refuse(_cpu_only_message(func, args[0], site()))
        return args[0] if func is torch.Tensor.pin_memory else func(*args, **kwargs)  # a CPU build cannot pin
    if func in _STORAGE:
        return _mark_storage(func(*args, **kwargs), origin(args[0]))
    tensors = _tensors(args, kwargs)
    stray = next((t for t in tensors if origin(t) is not None), None)
    if stray is None:
        return func(*args, **kwargs)
    placed = next((t for t in tensors if origin(t) is None), None)
    if func in _ACROSS:
        return _across(func, args, kwargs, placed)
    big_stray = next((t for t in tensors if t.dim() > 0 and origin(t) is not None), None)
    if placed is not None:
        written = _written(func, args, kwargs)
        into = next((t for t in written if origin(t) is not None), None)
        if big_stray is not None:
            refuse(_mixed_message(func, origin(big_stray), placed))
        elif into is not None:
            refuse(_into_message(func, origin(into), placed))
    out = func(*args, **kwargs)
    if placed is None:  # every input is on the CPU: so is the output
        _tag_outputs(out, args, origin(big_stray if big_stray is not None else stray))
    return out


def _written(func, args, kwargs) -> list[torch.Tensor]:
    """The tensors an op writes into: ``out=``, or its first argument for an in-place op (``add_``,
    ``_foreach_add_``)."""
    out = kwargs.get("out")
    if out is not None:
        return [t for t in (out if isinstance(out, (list, tuple)) else (out,)) if isinstance(t, torch.Tensor)]
    name = getattr(func, "__name__", "")
    if args and ((name.endswith("_") and not name.endswith("__")) or name in _IN_PLACE_OPERATORS):
        first = args[0]
        return [t for t in (first if isinstance(first, (list, tuple)) else (first,)) if isinstance(t, torch.Tensor)]
    return []


def _across(func, args, kwargs, placed):
    """A copy, indexing or ``.data =``: fine across devices, except a CPU tensor indexed by a GPU index."""
    if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__) and (where := origin(args[0])) is not None:
        index = args[1] if isinstance(args[1], tuple) else (args[1],)
        gpu_index = next((i for i in index if isinstance(i, torch.Tensor) and origin(i) is None and i.dim() > 0), None)
        if gpu_index is not None:
            refuse(_mixed_message(func, where, gpu_index))
    out = func(*args, **kwargs)
    if func == torch.Tensor.data.__set__:  # a new method-wrapper at each lookup: equal, never the same
        (tag(args[0], origin(args[1])) if origin(args[1]) else untag(args[0]))
    elif (where := origin(args[0])) is not None:
        _tag_outputs(out, args, where)
    return out


def _mark_storage(storage, where: Origin | None):
    """A tensor's storage remembers which kind it is, for ``set_``."""
    try:
        if where is None:
            setattr(storage, _PLACED, True)
        else:
            setattr(storage, _TAG, where)
    except (AttributeError, TypeError):
        pass
    return storage


def _set(args, kwargs, site):
    """``t.set_(source, ...)``: ``t`` takes ``source``'s device; a GPU refuses a source of the other kind."""
    target, source = args[0], (args[1] if len(args) > 1 else kwargs.get("source"))
    if isinstance(source, torch.Tensor):
        source_stray, source_placed = origin(source), origin(source) is None
    else:
        source_stray, source_placed = getattr(source, _TAG, None), getattr(source, _PLACED, False)
    if calling_file().startswith(_TORCH_DIR):
        pass  # torch's own set_ (a checkpoint's storage restored on the CPU first): right on a GPU too
    elif origin(target) is not None and source_placed:
        refuse(_set_message(origin(target), "a storage on the rank's device", site()))
    elif origin(target) is None and source_stray is not None:
        refuse(_set_message(source_stray, "a tensor on the rank's device", site(), reverse=True))
    out = _SET(*args, **kwargs)
    (tag(target, source_stray) if source_stray is not None else None)
    return out


_SET = torch.Tensor.set_  # torch's overrides ignore set_: the watch patches it (StrayTensorWatch)


def _tag_outputs(out, args, where: Origin) -> None:
    """Tag the new tensors ``out`` holds (not an input given back: an in-place op keeps its own device)."""
    for t in out if isinstance(out, (list, tuple)) else (out,):
        if isinstance(t, torch.Tensor) and not any(t is a for a in args):
            tag(t, where)


def _op_name(func) -> str:
    name = getattr(func, "__name__", str(func))
    owner = getattr(func, "__objclass__", None) or getattr(func, "__self__", None)
    return f"Tensor.{name}" if owner is not None and "Tensor" in str(owner) else f"torch.{name}"


_HOW = ("Build it on the rank's device (device=ctx.device, or module.to(ctx.device) before use; in an "
        "implementation, the inputs' device) (device-faithful mode, tests/README.md)")  # fmt: skip


def _mixed_message(func, where: Origin, placed: torch.Tensor) -> str:
    return (f"stray CPU tensor: {where.what}, made at {where.site}, meets a tensor of shape {tuple(placed.shape)} on "
            f"the rank's device in {_op_name(func)}. Under NCCL nothing moved it to cuda:local_rank, and the GPU "
            f"fails with 'Expected all tensors to be on the same device'. {_HOW}")  # fmt: skip


def _into_message(func, where: Origin, placed: torch.Tensor) -> str:
    return (
        f"stray CPU tensor: {where.what}, made at {where.site}, is written in place by {_op_name(func)} from a "
        f"tensor of shape {tuple(placed.shape)} on the rank's device. A GPU takes a 0-dim CPU tensor as an "
        f"input, never as the output: it fails with 'Expected all tensors to be on the same device'. {_HOW}"
    )


def _cpu_only_message(func, t: torch.Tensor, site: str) -> str:
    return (f"{_op_name(func)} of a tensor of shape {tuple(t.shape)} on the rank's device, at {site}: a CPU-only op "
            "(NCCL: the tensor is on cuda:local_rank, and 'can't convert cuda:0 device type tensor to numpy'). Move "
            "it first with .cpu() (device-faithful mode, tests/README.md)")  # fmt: skip


def _set_message(where: Origin, other: str, site: str, reverse: bool = False) -> str:
    first, second = (
        ("a tensor on the rank's device", f"{where.what}, made at {where.site}")
        if reverse
        else (f"{where.what}, made at {where.site}", other)
    )
    return (f"set_ at {site} puts {first} over {second}: a GPU refuses a tensor over storage of another device. "
            f"Make the tensor with device= the storage's (device-faithful mode, tests/README.md)")  # fmt: skip


def _sent_message(method: str, where: Origin) -> str:
    return (f"stray CPU tensor in ProcessGroup.{method}: {where.what}, made at {where.site}. Under NCCL it would be "
            "on the CPU, and NCCL refuses it ('No backend type associated with device type cpu'); move it to the "
            "rank's device first (device-faithful mode, tests/README.md)")  # fmt: skip


def _gradient_message(what: str, index: int, grad_stray: bool, site: str) -> str:
    got, expected = ("cpu", "cuda:local_rank") if grad_stray else ("cuda:local_rank", "cpu")
    return (
        f"{what} hands autograd a gradient of input {index} on {got}, but the input is on {expected}: the GPU "
        f"fails with 'invalid gradient at index {index} - expected device {expected} but got {got}' (at "
        f"{site}). Give back each gradient on its input's device (device-faithful mode, tests/README.md)"
    )


def _flat(obj) -> list:
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _flat(o)]
    return [obj]


class Patches:
    """Attributes set for the mode's time and put back after it."""

    def __init__(self) -> None:
        self._saved: dict = {}

    def set(self, owner, name: str, value) -> None:
        """``owner.name = value`` until ``restore`` (a class gets back its own attribute, or none if it inherited
        it)."""
        self._saved.setdefault((owner, name), vars(owner).get(name, _INHERITED) if isinstance(owner, type)
                               else getattr(owner, name))  # fmt: skip
        setattr(owner, name, value)

    def restore(self) -> None:
        for (owner, name), original in self._saved.items():
            (delattr(owner, name) if original is _INHERITED else setattr(owner, name, original))
        self._saved.clear()


class StrayTensorWatch:
    """Installed with DeviceFaithfulMode around one task in a rank: tags Parameters made from stray tensors and
    names them where modules register them; refuses stray tensors in communication and jobs too big; runs the
    autograd engine under the mode and checks the device of the gradients handed back to it; tags tensors made
    from buffers and arrays."""

    def __init__(self, mode) -> None:
        self._mode = mode  # the DeviceFaithfulMode: pushed for backward; its _chain() and _stray() for messages
        self._site = mode._chain
        self._patches = Patches()
        self._hooks: list = []

    def _patch(self, owner, name: str, value) -> None:
        self._patches.set(owner, name, value)

    def __enter__(self) -> StrayTensorWatch:
        new = torch.nn.Parameter.__new__

        def parameter(cls, data=None, requires_grad=True):
            p = new(cls, data, requires_grad)
            if (where := origin(data)) is not None:
                tag(p, where)
            return p

        self._patch(torch.nn.Parameter, "__new__", parameter)
        for method in _PG_METHODS:
            if method in vars(ProcessGroup):
                self._patch(ProcessGroup, method, _refuse_strays(method, getattr(ProcessGroup, method)))
        self._patch(dist, "init_process_group", _within_gpus(dist.init_process_group, self._site))
        self._patch(
            torch.autograd, "_engine_run_backward", _under_mode(torch.autograd._engine_run_backward, self._mode)
        )
        self._patch_functions()
        self._patch(torch.Tensor, "set_", lambda t, *args, **kwargs: _set((t, *args), kwargs, self._site))
        for name in ("from_numpy", "frombuffer"):
            self._patch(torch, name, _made_on_cpu(getattr(torch, name), self._mode, f"torch.{name}(...)"))
        self._hooks = [nn_module.register_module_parameter_registration_hook(_name_it),
                       nn_module.register_module_buffer_registration_hook(_name_it)]  # fmt: skip
        return self

    def _patch_functions(self) -> None:
        """``autograd.Function``: remember which inputs are on the CPU; check the gradients its backward returns."""
        from torch.autograd.function import BackwardCFunction, Function

        apply, backward = Function.apply.__func__, BackwardCFunction.apply
        site = self._site

        def function_apply(cls, *args, **kwargs):
            out = apply(cls, *args, **kwargs)
            kinds = tuple(None if not isinstance(a, torch.Tensor) else origin(a) is not None for a in args)
            for t in _flat(out):
                if isinstance(t, torch.Tensor) and t.grad_fn is not None and hasattr(t.grad_fn, "_forward_cls"):
                    t.grad_fn._cs336_inputs = kinds
                    break
            return out

        def backward_apply(ctx, *grads):
            result = backward(ctx, *grads)
            kinds = getattr(ctx, "_cs336_inputs", None)
            for i, (g, stray) in enumerate(zip(result if isinstance(result, tuple) else (result,), kinds or ())):
                if (
                    isinstance(g, torch.Tensor)
                    and stray is not None
                    and g.dim() > 0
                    and (origin(g) is not None) != stray
                ):
                    refuse(_gradient_message(f"{ctx._forward_cls.__name__}.backward", i, not stray, site()))
            return result

        self._patch(Function, "apply", classmethod(function_apply))
        self._patch(BackwardCFunction, "apply", backward_apply)

    def __exit__(self, *exc) -> None:
        self._patches.restore()
        for hook in self._hooks:
            hook.remove()


def checked_hook(hook, site):
    """A tensor hook whose value keeps its device (CUDA: "hook ... changed the type of its value")."""

    def checked(grad):
        value = hook(grad)
        if isinstance(value, torch.Tensor) and isinstance(grad, torch.Tensor) and value.dim() > 0:
            if (origin(value) is None) != (origin(grad) is None):
                refuse(_gradient_message(f"a tensor hook ({getattr(hook, '__qualname__', hook)})", 0,
                                         origin(value) is not None, site()))  # fmt: skip
        return value

    return checked


def _under_mode(run_backward, mode):
    """The autograd engine, run with the mode on: hooks and ``Function.backward`` are watched as forward is."""

    def run(*args, **kwargs):
        torch.overrides._push_mode(mode)
        try:
            return run_backward(*args, **kwargs)
        finally:
            torch.overrides._pop_mode()

    return run


def _made_on_cpu(factory, mode, what: str):
    def made(*args, **kwargs):
        return mode._stray(factory(*args, **kwargs), what)

    made.__name__ = getattr(factory, "__name__", what)
    return made


def _name_it(module, name, tensor):
    if (where := origin(tensor)) is not None and " (" not in where.what:
        tag(tensor, where.named(f"{type(module).__name__}.{name}"))


def _refuse_strays(method: str, original):
    def checked(pg, *args, **kwargs):
        for t in _flat([*args, *kwargs.values()]):
            if (where := origin(t)) is not None:
                refuse(_sent_message(method, where))
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
