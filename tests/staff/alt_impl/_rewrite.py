"""Build an alternative module from a reference module: same work, its own bad-input messages."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import re

MARKER = "[alt] rejected:"
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:\[[^\]\s]*\])?")


def _parameters(fn) -> set[str]:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def _names(message: str, parameters: set[str]) -> list[str]:
    """The words of ``message`` that name an argument or a part of one, in order, once each."""
    kept = []
    for word in _WORD.findall(message):
        root = word.split(".")[0].split("[")[0]
        named = root in parameters or ("_" in word and "." not in word)  # x.shape[-1], num_experts; not torch.float16
        if named and word not in kept:
            kept.append(word)
    return kept


def _answer(exc: Exception, parameters: set[str]) -> Exception:
    message = str(exc)
    if message.startswith(MARKER):  # already answered by an inner wrapped call
        return exc
    names = _names(message, parameters) or ["(no argument named)"]
    return type(exc)(f"{MARKER} {', '.join(names)}")


def _wrap(fn, parameters: set[str] | None = None):
    parameters = parameters if parameters is not None else _parameters(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (ValueError, TypeError) as exc:
            raise _answer(exc, parameters) from None

    return wrapper


def _wrap_class(cls):
    """A subclass whose public methods (and constructor) answer bad input the alternative way."""
    if dataclasses.is_dataclass(cls) or issubclass(cls, tuple) or cls.__module__ != _wrap_class.current:
        return cls  # value types compare by class: keep the reference's
    namespace = {"__module__": cls.__module__, "__doc__": cls.__doc__}
    init_parameters = _parameters(cls.__init__)
    for name, attr in vars(cls).items():
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(attr, (staticmethod, classmethod)):
            namespace[name] = type(attr)(_wrap(attr.__func__, _parameters(attr.__func__) | init_parameters))
        elif inspect.isfunction(attr):
            namespace[name] = _wrap(attr, _parameters(attr) | init_parameters)
    return type(cls.__name__, (cls,), namespace)


def rebuild(namespace: dict, module: str) -> None:
    """Fill ``namespace`` with ``module``'s public names: functions and classes wrapped, the rest as is."""
    reference = importlib.import_module(module)
    _wrap_class.current = module
    for name, value in vars(reference).items():
        if name.startswith("__"):
            continue
        if inspect.isclass(value) and value.__module__ == module:
            import torch

            if issubclass(value, torch.autograd.Function):
                namespace[name] = value
            else:
                namespace[name] = _wrap_class(value)
        elif inspect.isfunction(value) and value.__module__ == module and not name.startswith("_"):
            namespace[name] = _wrap(value)
        else:
            namespace[name] = value
