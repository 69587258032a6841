"""A compact Llama-style decoder and a generated corpus: the model of Part 11 (given code, not a task).

    python -m scripts.tools.train --mesh dp1 --steps 200       trains it in one process (a minute on a CPU)

The model is an ``nn.Sequential`` so that pipeline stages can be cut from it (Part 5): its children are
``embed`` (token embedding), ``block0`` ... ``block{L-1}`` and ``head`` (final RMSNorm and LM head).
Every tensor between them is (batch, seq, d_model); the first takes token ids (batch, seq) and the last
returns logits (batch, seq, vocab_size). One block (Touvron et al. 2023, "Llama 2"; Grattafiori et al.
2024, "The Llama 3 herd of models"):

    x = x + attn(attn_norm(x))      RMSNorm, causal grouped-query attention with rotary positions
    x = x + ffn(ffn_norm(x))        RMSNorm, SwiGLU MLP, or a mixture of experts every moe_every-th block

Grouped-query attention (Ainslie et al. 2023): ``n_heads`` query heads share ``n_kv_heads`` key/value
heads; query head h reads key/value head ``h // (n_heads // n_kv_heads)``. Rotary embeddings (Su et al.
2021) rotate each (q, k) pair of channels (i, i + head_dim/2) by angle ``position * theta^(-2i/head_dim)``;
a block reads its tokens' positions from ``positions`` (default 0 .. seq-1), which is what lets a
context-parallel rank that holds scattered tokens (Part 9's zigzag) rotate them right.

The corpus (``make_corpus``) is English-like text from a small seeded grammar, tokenised by characters
(``CharTokenizer``): no download, the same bytes on every machine, and structure a 1-5 M parameter
model learns within a few hundred steps on a CPU (loss from ~3.7 nats/char to below 1 in 150 steps).
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from cs336_systems.models import MoE

__all__ = [
    "TransformerConfig",
    "RMSNorm",
    "apply_rotary",
    "Attention",
    "SwiGLU",
    "Block",
    "LMHead",
    "Transformer",
    "lm_loss",
    "generate",
    "CharTokenizer",
    "make_corpus",
    "get_batch",
]


@dataclass(frozen=True)
class TransformerConfig:
    """Sizes of the model. The defaults (1.7 M parameters) learn the corpus on a CPU in a minute or two."""

    vocab_size: int = 40  # CharTokenizer().vocab_size
    d_model: int = 192
    n_layers: int = 4
    n_heads: int = 6
    n_kv_heads: int = 2  # grouped-query attention: n_heads must be a multiple
    d_ff: int = 512  # SwiGLU hidden size (~ 8/3 d_model, as Llama)
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    moe_every: int = 0  # k > 0: blocks k-1, 2k-1, ... have a mixture-of-experts FFN; 0: none
    num_experts: int = 4
    top_k: int = 2  # experts per token; no capacity limit, so no token is ever dropped

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def is_moe(self, layer: int) -> bool:
        """Whether block ``layer`` has a mixture-of-experts FFN."""
        return self.moe_every > 0 and layer % self.moe_every == self.moe_every - 1

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads or self.head_dim % 2:
            raise ValueError(f"d_model ({self.d_model}) must be n_heads ({self.n_heads}) x an even head_dim")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight over the last dim (Zhang and Sennrich 2019): (..., d) -> (..., d)."""

    def __init__(self, d: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def apply_rotary(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate x (batch, heads, seq, head_dim) by its tokens' ``positions`` (seq,) (integers, any order).

    Channel i and i + head_dim/2 form a pair rotated by angle position * theta^(-2i/head_dim) (the
    "rotate half" layout of Llama's Hugging Face port). Computed in float64, cast to x's dtype.
    """
    half = x.shape[-1] // 2
    freqs = theta ** (-torch.arange(half, dtype=torch.float64, device=x.device) / half)  # (half,)
    angles = positions.to(device=x.device, dtype=torch.float64)[:, None] * freqs  # (seq, half)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Attention(nn.Module):
    """Causal grouped-query self-attention: x (batch, seq, d_model) -> (batch, seq, d_model).

    ``wq`` (n_heads*head_dim, d_model), ``wk`` and ``wv`` (n_kv_heads*head_dim, d_model), ``wo``
    (d_model, n_heads*head_dim), no biases. Keys and values are repeated to the query heads
    (``repeat_interleave``: query head h reads kv head h // group) before ``scaled_dot_product_attention``.
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.wq = nn.Linear(cfg.d_model, cfg.n_heads * hd, bias=False)
        self.wk = nn.Linear(cfg.d_model, cfg.n_kv_heads * hd, bias=False)
        self.wv = nn.Linear(cfg.d_model, cfg.n_kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.n_heads * hd, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        b, s, _ = x.shape
        cfg, hd = self.cfg, self.cfg.head_dim
        positions = torch.arange(s, device=x.device) if positions is None else positions
        q = self.wq(x).view(b, s, -1, hd).transpose(1, 2)  # (b, H, s, hd)
        k = self.wk(x).view(b, s, -1, hd).transpose(1, 2)  # (b, K, s, hd)
        v = self.wv(x).view(b, s, -1, hd).transpose(1, 2)  # (b, K, s, hd)
        q, k = apply_rotary(q, positions, cfg.rope_theta), apply_rotary(k, positions, cfg.rope_theta)
        group = cfg.n_heads // cfg.n_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (b, H, s, hd)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, H, s, hd)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class SwiGLU(nn.Module):
    """w_down(silu(w_gate x) * w_up x) (Shazeer 2020): (..., d_model) -> (..., d_model), no biases."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.w_gate = nn.Linear(d_model, d_ff, bias=False)
        self.w_up = nn.Linear(d_model, d_ff, bias=False)
        self.w_down = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class Block(nn.Module):
    """One pre-norm decoder block: (batch, seq, d_model) -> (batch, seq, d_model).

    ``ffn`` is a ``SwiGLU``, or for an MoE block a ``models.MoE`` (Part 8's oracle; GELU experts,
    ``top_k`` of ``num_experts``, no capacity limit). Its load-balancing ``aux_loss`` is not part of
    the training loss here, so a parallel run reproduces this one exactly.
    """

    def __init__(self, cfg: TransformerConfig, layer: int) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        moe = cfg.is_moe(layer)
        self.ffn = MoE(cfg.d_model, cfg.d_ff, cfg.num_experts, cfg.top_k) if moe else SwiGLU(cfg.d_model, cfg.d_ff)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), positions)
        return x + self.ffn(self.ffn_norm(x))


class LMHead(nn.Module):
    """Final RMSNorm and the output projection: (batch, seq, d_model) -> logits (batch, seq, vocab_size)."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.out = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(x))


class Transformer(nn.Sequential):
    """The decoder as a sequence of layers: ``embed``, ``block0`` ... ``block{n_layers-1}``, ``head``.

    tokens (batch, seq) int64 -> logits (batch, seq, vocab_size). Built deterministically from
    ``seed`` (the global RNG is left as it was): linear weights and the embedding N(0, 0.02), the two
    projections that write into the residual stream (``wo``, ``w_down``) N(0, 0.02 / sqrt(2 n_layers))
    (GPT-2's scaling), norms at 1, MoE routers and experts as ``models.MoE`` draws them.
    """

    def __init__(self, cfg: TransformerConfig, seed: int = 0) -> None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            layers = [("embed", nn.Embedding(cfg.vocab_size, cfg.d_model))]
            layers += [(f"block{i}", Block(cfg, i)) for i in range(cfg.n_layers)]
            layers += [("head", LMHead(cfg))]
            super().__init__(OrderedDict(layers))
            self.cfg = cfg
            residual_std = 0.02 / math.sqrt(2 * cfg.n_layers)
            with torch.no_grad():
                for name, p in self.named_parameters():
                    if p.dim() == 2 and ".experts." not in name and ".router." not in name:
                        p.normal_(0.0, residual_std if name.endswith(("wo.weight", "w_down.weight")) else 0.02)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits (..., vocab) against targets (...) (int64), a scalar."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


@torch.no_grad()
def generate(model: Transformer, prompt: torch.Tensor, num_tokens: int, *, temperature: float = 0.8,
             seed: int = 0) -> torch.Tensor:  # fmt: skip
    """Sample ``num_tokens`` tokens after ``prompt`` (seq,) int64: returns (seq + num_tokens,).

    Recomputes the whole prefix at each step (no KV cache: these models are small)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    tokens = prompt.clone()
    for _ in range(num_tokens):
        logits = model(tokens[None])[0, -1].double().cpu() / temperature  # (vocab,)
        nxt = torch.multinomial(logits.softmax(-1), 1, generator=gen).to(tokens.device)
        tokens = torch.cat([tokens, nxt])
    return tokens


# ---------------------------------------------------------------------------------------------
# The corpus: a seeded grammar of short English sentences, tokenised by characters
# ---------------------------------------------------------------------------------------------

_NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]
_ADJECTIVES = ["red", "small", "quiet", "happy", "old", "bright", "lazy", "quick"]
_NOUNS = ["cat", "dog", "bird", "fox", "horse", "mouse", "robot", "tree"]
_VERBS = ["sees", "likes", "finds", "helps", "follows", "paints", "calls", "feeds"]
_PLACES = ["in the park", "at home", "by the river", "near the hill", "on the road", "under the moon"]


class CharTokenizer:
    """Characters <-> ids: newline, space, ``!',.?``, digits 0-3 and lower-case letters (37 used of 40 ids)."""

    alphabet = "\n !',.?0123abcdefghijklmnopqrstuvwxyz"

    def __init__(self) -> None:
        self._index = {c: i for i, c in enumerate(self.alphabet)}

    @property
    def vocab_size(self) -> int:
        return 40  # room for a few more symbols; ids >= len(alphabet) never occur

    def encode(self, text: str) -> torch.Tensor:
        """(len(text),) int64 ids."""
        return torch.tensor([self._index[c] for c in text], dtype=torch.int64)

    def decode(self, ids: torch.Tensor) -> str:
        return "".join(self.alphabet[i] if i < len(self.alphabet) else "?" for i in ids.tolist())


def _sentence(rng: random.Random) -> str:
    subject = rng.choice(_NAMES)
    article = rng.choice(["the", "a"])
    obj = f"{article} {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}"
    kind = rng.randrange(4)
    if kind == 0:
        return f"{subject} {rng.choice(_VERBS)} {obj} {rng.choice(_PLACES)}."
    if kind == 1:
        count = rng.randrange(4)
        return f"{subject} has {count} {rng.choice(_NOUNS)}{'s' if count != 1 else ''}."
    if kind == 2:
        return f"does {subject} see {obj}? yes, {subject} does!"
    noun = rng.choice(_NOUNS)
    return f"the {noun} and the {noun} play, then the {noun} sleeps."


def make_corpus(num_chars: int = 200_000, seed: int = 0) -> str:
    """Sentences of the grammar above, one per line, until ``num_chars`` characters (exactly that many)."""
    rng, parts, total = random.Random(seed), [], 0
    while total < num_chars:
        line = _sentence(rng) + "\n"
        parts.append(line)
        total += len(line)
    return "".join(parts)[:num_chars]


def get_batch(data: torch.Tensor, batch_size: int, seq_len: int, step: int, seed: int = 0
              ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """The batch of training ``step``: (inputs, targets), each (batch_size, seq_len) int64.

    Row i starts at a random offset o (drawn from ``seed`` and ``step`` only, so every rank draws the
    same batch) and is data[o : o + seq_len]; its targets are shifted by one, data[o + 1 : o + seq_len + 1].
    """
    gen = torch.Generator(device="cpu").manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, len(data) - seq_len - 1, (batch_size,), generator=gen)
    rows = torch.stack([data[o : o + seq_len + 1] for o in starts.tolist()])  # (batch, seq + 1)
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
