"""Rebuild rank replies in the parent from plain data only.

A rank's reply is a pickle made by code under test. Plain ``pickle.loads`` would import any class
it names (so a pipeline ``Action`` from the student package would pull student code into the
judge) and can be made to call arbitrary functions. Here only plain data is rebuilt: tensors,
numbers, strings, containers of them, torch dtypes/devices/sizes, and the harness's own
dataclasses (``tests.*``, e.g. ``CommEvent``). Rank functions convert anything else (an
implementation's objects) to tuples or dicts before returning.
"""

from __future__ import annotations

import dataclasses
import io
import pickle
import types

import torch

_ALLOWED = {
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_parameter"),
    ("torch", "Size"),
    ("torch", "device"),
    ("collections", "OrderedDict"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "complex"),
    ("builtins", "slice"),
    ("builtins", "range"),
    ("builtins", "bytearray"),
}


class RefusedReply(pickle.UnpicklingError):
    """A rank sent back an object the parent does not rebuild."""


class _StorageUnpickler(pickle.Unpickler):
    """The pickle nested inside a tensor's storage: it needs no global at all."""

    def find_class(self, module, name):
        raise RefusedReply(f"a tensor's storage referred to {module}.{name}")


_STORAGE_PICKLE = types.SimpleNamespace(
    __name__="cs336_storage_pickle", Unpickler=_StorageUnpickler, load=lambda f, **kw: _StorageUnpickler(f, **kw).load()
)


def _load_storage(data: bytes):
    return torch.load(io.BytesIO(data), weights_only=False, pickle_module=_STORAGE_PICKLE)


class _ReplyUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if "." in name:
            raise RefusedReply(f"{module}.{name}")
        if (module, name) == ("torch.storage", "_load_from_bytes"):
            return _load_storage
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if module.startswith("tests."):
            obj = super().find_class(module, name)
            if isinstance(obj, type) and dataclasses.is_dataclass(obj):
                return obj
        raise RefusedReply(
            f"a rank sent back an object of type {module}.{name}; results may only hold tensors, numbers, "
            "strings and containers of them (convert the implementation's objects to tuples or dicts)"
        )


def load_reply(data: bytes):
    """Unpickle a rank's reply, refusing anything but plain data (``RefusedReply``)."""
    return _ReplyUnpickler(io.BytesIO(data)).load()
