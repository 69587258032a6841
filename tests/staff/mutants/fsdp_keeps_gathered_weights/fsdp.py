"""Mutant: FSDP caches each layer's gathered weight after forward to reuse it in backward (one
gather saved, but every full weight stays alive: no memory saved)."""

import functools

import torch
import torch.nn.functional as F
from torch import nn

from reference_solutions import fsdp as _ref
from reference_solutions.fsdp import *  # noqa: F403


class _CachingLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, shard, bias, info):
        dtype = info.compute_dtype or x.dtype
        info.full = info.gather(shard)  # Bug: kept for backward instead of freed.
        ctx.save_for_backward(x, shard, bias)
        ctx.info = info
        return F.linear(x.to(dtype), info.full, None if bias is None else bias.to(dtype)).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_y):
        x, shard, bias = ctx.saved_tensors
        info = ctx.info
        dtype = info.compute_dtype or x.dtype
        grad_y = grad_y.to(dtype)
        grad_x = (grad_y @ info.full).to(x.dtype)
        grad_w = grad_y.reshape(-1, info.shape[0]).T @ x.to(dtype).reshape(-1, info.shape[1])
        grad_b = None if bias is None else grad_y.reshape(-1, info.shape[0]).sum(0).to(bias.dtype)
        return grad_x, info.reduce_scatter(grad_w, shard.dtype), grad_b, None


def _forward(layer, info, x):
    return _CachingLinear.apply(x, layer.weight, layer.bias, info)


class FSDP(_ref.FSDP):
    def __init__(self, module, *, compute_dtype=None, group=None):
        super().__init__(module, compute_dtype=compute_dtype, group=group)
        for layer in module.modules():
            if isinstance(layer, nn.Linear):
                layer.forward = functools.partial(_forward, layer, self._shards[id(layer.weight)])
