"""``MatmulLog``: a log of the matrix products (and fused attention calls) code computes.

    from tests.oracles.matmul_log import MatmulLog
    with MatmulLog() as log:
        out = ring_attention(q, k, v)
    log.events    # [(time.perf_counter(), FLOPs, in backward), ...], one per outermost product

While active it wraps every torch function and method that spells attention's arithmetic
(matmul, @, bmm, mm, einsum, baddbmm, addmm, scaled_dot_product_attention) with one that records
the call's FLOPs (2 per multiply-add) and whether autograd's backward is running.

Used by tests/test_context_parallel.py (how much attention work each rank does, and whether a
transfer overlaps a block's compute), through its rank functions by the hidden Part 9 tests, and
by scripts/bench/context_parallel.py.
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F

from tests.harness.recorder import in_backward


def _matmul_flops(a: torch.Tensor, b: torch.Tensor) -> int:
    """FLOPs (2 per multiply-add) of a @ b with broadcasting: (..., m, k) @ (..., k, n)."""
    if a.dim() == 1 or b.dim() == 1:
        return 2 * max(a.numel(), b.numel())
    x, y = list(a.shape[:-2]), list(b.shape[:-2])
    x, y = [1] * (len(y) - len(x)) + x, [1] * (len(x) - len(y)) + y  # broadcast the batch dims
    batch = math.prod(max(i, j) for i, j in zip(x, y))
    return 2 * batch * a.shape[-2] * a.shape[-1] * b.shape[-1]


def _einsum_flops(equation: str, *operands) -> int:
    """2 x the product of every index's size: the multiply-adds of the contraction."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = operands[0]
    sizes, ellipsis = {}, 1
    for letters, t in zip(equation.replace(" ", "").split("->")[0].split(","), operands):
        dims = list(t.shape)
        if "..." in letters:  # the dims the ellipsis stands for: a batch of the same contraction
            at, extra = letters.index("..."), t.dim() - len(letters) + 3
            ellipsis = max(ellipsis, math.prod(dims[at : at + extra]))
            dims, letters = dims[:at] + dims[at + extra :], letters.replace("...", "")
        sizes.update(zip(letters, dims))
    return 2 * ellipsis * math.prod(sizes.values())


def _sdpa_flops(q, k, v, *args, **kwargs) -> int:
    return 2 * q.shape[:-1].numel() * k.shape[-2] * (q.shape[-1] + v.shape[-1])


# Every way to spell attention's arithmetic in torch, and what each call costs.
_PRODUCTS = [
    (torch, "matmul", _matmul_flops), (torch.Tensor, "matmul", _matmul_flops),
    (torch.Tensor, "__matmul__", _matmul_flops), (torch, "bmm", _matmul_flops), (torch.Tensor, "bmm", _matmul_flops),
    (torch, "mm", _matmul_flops), (torch.Tensor, "mm", _matmul_flops), (torch, "einsum", _einsum_flops),
    (torch, "baddbmm", lambda c, a, b, *x, **k: _matmul_flops(a, b)),
    (torch, "addmm", lambda c, a, b, *x, **k: _matmul_flops(a, b)),
    (F, "scaled_dot_product_attention", _sdpa_flops),
]  # fmt: skip


class MatmulLog:
    """Records every matrix product (and fused attention call) as (time, FLOPs, in backward).

    It wraps torch's product functions and methods while active (a torch function mode would be
    simpler, but autograd runs a custom Function's backward without the modes of its caller).
    Only the outermost product counts (``a @ b`` calls ``torch.matmul`` inside).
    """

    def __init__(self):
        self.events: list[tuple[float, int, bool]] = []
        self._saved: list = []
        self._depth = 0

    def __enter__(self) -> MatmulLog:
        for owner, name, flops in _PRODUCTS:
            self._saved.append((owner, name, vars(owner).get(name, _INHERITED)))
            setattr(owner, name, self._wrap(getattr(owner, name), flops))
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, original in reversed(self._saved):
            if original is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        self._saved.clear()

    def _wrap(self, original, flops):
        def product(*args, **kwargs):
            if self._depth:
                return original(*args, **kwargs)
            self._depth += 1
            try:
                self.events.append((time.perf_counter(), flops(*args, **kwargs), in_backward()))
                return original(*args, **kwargs)
            finally:
                self._depth -= 1

        return product


_INHERITED = object()  # marks a method the class inherits (restored by deleting the wrapper)
