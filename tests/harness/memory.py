"""What an object really holds in memory, whatever its attribute names (used by the ZeRO tests)."""

from __future__ import annotations

import functools
import types

import torch


def storage_bytes(root, skip: set[int]) -> int:
    """Bytes of the distinct tensor storages reachable from ``root`` through attributes, containers,
    closures and ``.grad``, except storages whose data_ptr is in ``skip``. Measures what an object
    really holds, whatever its attribute names (a view's whole storage counts)."""
    seen, storages, stack = set(), {}, [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType, str, bytes, int, float)):
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            if storage.data_ptr() not in skip:
                storages[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
                stack.append(obj.grad)
        elif isinstance(obj, dict):
            stack.extend([*obj.keys(), *obj.values()])
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif isinstance(obj, functools.partial):
            stack.extend([obj.func, obj.args, obj.keywords])
        elif isinstance(obj, types.FunctionType):
            stack.extend(c.cell_contents for c in obj.__closure__ or () if c.cell_contents is not None)
        elif isinstance(obj, types.MethodType):
            stack.extend([obj.__func__, obj.__self__])
        elif hasattr(obj, "__dict__"):
            stack.append(vars(obj))
    return sum(storages.values())
