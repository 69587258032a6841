"""Mutant: FSDP gathers the weight with an autograd-aware all-gather and calls F.linear on it:
autograd saves the gathered weight for backward, so it lives from forward to backward."""

import functools

import torch
import torch.nn.functional as F
from torch import nn

from reference_solutions import fsdp as _ref
from reference_solutions.fsdp import *  # noqa: F403


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, shard, info):
        ctx.info, ctx.dtype = info, shard.dtype
        return info.gather(shard)

    @staticmethod
    def backward(ctx, grad_weight):
        return ctx.info.reduce_scatter(grad_weight, ctx.dtype), None


def _forward(layer, info, x):
    dtype = info.compute_dtype or x.dtype
    weight = _Gather.apply(layer.weight, info)  # Bug: F.linear below saves this full weight for backward.
    bias = None if layer.bias is None else layer.bias.to(dtype)
    return F.linear(x.to(dtype), weight, bias).to(x.dtype)


class FSDP(_ref.FSDP):
    def __init__(self, module, *, compute_dtype=None, group=None):
        super().__init__(module, compute_dtype=compute_dtype, group=group)
        for layer in module.modules():
            if isinstance(layer, nn.Linear):
                layer.forward = functools.partial(_forward, layer, self._shards[id(layer.weight)])
