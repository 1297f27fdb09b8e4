"""The labs' self-attention encoder-decoder as a textbook writes it: the speed baseline.

The positional-encoding lab builds multi-head attention as a Python list of single-head modules,
loops over the heads, concatenates their contexts, masks with ``-1e9`` and
decodes greedily by recomputing the whole decoder at every step. This file
writes that formulation out (for the benchmarks only: it is not part of attnlab
and attnlab does not import it), so that attnlab's vectorised models can be timed
against it in the same process.

Shapes: B batch, L length, F features, D model dim.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class HeadLoopPE(nn.Module):
    """x * sqrt(D) + the sinusoidal table, as the positional-encoding lab computes it (float32)."""

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.d_model = d_model
        position = torch.arange(0, max_len).float().unsqueeze(1)
        speed = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * speed)
        pe[:, 1::2] = torch.cos(position * speed)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x: Tensor) -> Tensor:
        return x * math.sqrt(self.d_model) + self.pe[:, : x.size(1)]


class OneHead(nn.Module):
    """One full-width head with its own q, k, v projections; keys set by init_keys."""

    def __init__(self, d_model: int, input_dim: int) -> None:
        super().__init__()
        self.d_k = d_model
        self.linear_query = nn.Linear(input_dim, d_model)
        self.linear_key = nn.Linear(input_dim, d_model)
        self.linear_value = nn.Linear(input_dim, d_model)

    def init_keys(self, keys: Tensor) -> None:
        self.proj_keys = self.linear_key(keys)
        self.values = self.linear_value(keys)

    def forward(self, query: Tensor, mask: Tensor | None = None) -> Tensor:
        scores = torch.bmm(self.linear_query(query), self.proj_keys.permute(0, 2, 1)) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        alphas = torch.softmax(scores, dim=-1)
        self.alphas = alphas.detach()
        return torch.bmm(alphas, self.values)


class HeadLoop(nn.Module):
    """The labs' multi-head attention: a loop over OneHead modules, then linear_out."""

    def __init__(self, n_heads: int, d_model: int, input_dim: int | None = None) -> None:
        super().__init__()
        self.linear_out = nn.Linear(n_heads * d_model, d_model)
        self.attn_heads = nn.ModuleList(OneHead(d_model, input_dim or d_model) for _ in range(n_heads))

    def init_keys(self, keys: Tensor) -> None:
        for head in self.attn_heads:
            head.init_keys(keys)

    def forward(self, query: Tensor, mask: Tensor | None = None) -> Tensor:
        return self.linear_out(torch.cat([head(query, mask) for head in self.attn_heads], dim=-1))


class LoopEncoder(nn.Module):
    def __init__(self, n_heads: int, d_model: int, ff_units: int, n_features: int) -> None:
        super().__init__()
        self.pe = HeadLoopPE(100, n_features)
        self.attn = HeadLoop(n_heads, d_model, n_features)
        self.ffn = nn.Sequential(nn.Linear(d_model, ff_units), nn.ReLU(), nn.Linear(ff_units, d_model))

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        x = self.pe(x)
        self.attn.init_keys(x)
        return self.ffn(self.attn(x, mask))


class LoopDecoder(nn.Module):
    def __init__(self, n_heads: int, d_model: int, ff_units: int, n_features: int) -> None:
        super().__init__()
        self.pe = HeadLoopPE(100, n_features)
        self.self_attn = HeadLoop(n_heads, d_model, n_features)
        self.cross_attn = HeadLoop(n_heads, d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, ff_units), nn.ReLU(), nn.Linear(ff_units, n_features))

    def init_keys(self, states: Tensor) -> None:
        self.cross_attn.init_keys(states)

    def forward(
        self, x: Tensor, source_mask: Tensor | None = None, target_mask: Tensor | None = None
    ) -> Tensor:
        x = self.pe(x)
        self.self_attn.init_keys(x)
        return self.ffn(self.cross_attn(self.self_attn(x, target_mask), source_mask))


class LoopEncoderDecoder(nn.Module):
    """Teacher-forced training on the shifted target; greedy decoding by full recompute in eval."""

    def __init__(self, encoder: nn.Module, decoder: nn.Module, input_len: int, target_len: int) -> None:
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.input_len, self.target_len = input_len, target_len
        self.trg_masks = (1 - torch.triu(torch.ones(1, target_len, target_len), diagonal=1))

    def predict(self, source: Tensor, source_mask: Tensor | None) -> Tensor:
        inputs = source[:, -1:]
        for i in range(self.target_len):
            out = self.decoder(inputs, source_mask, self.trg_masks[:, : i + 1, : i + 1])
            inputs = torch.cat([inputs, out[:, -1:]], dim=-2).detach()
        return inputs[:, 1:]

    def forward(self, X: Tensor, source_mask: Tensor | None = None) -> Tensor:
        self.trg_masks = self.trg_masks.type_as(X).bool()
        source = X[:, : self.input_len]
        self.decoder.init_keys(self.encoder(source, source_mask))
        if self.training:
            return self.decoder(X[:, self.input_len - 1: -1], source_mask, self.trg_masks)
        return self.predict(source, source_mask)


def build_lab_model(n_heads: int = 3, d_model: int = 2, ff_units: int = 10, n_features: int = 2,
                     input_len: int = 2, target_len: int = 2) -> LoopEncoderDecoder:
    """The positional-encoding lab's configuration (call ``torch.manual_seed(43)`` first for its initial weights)."""
    enc = LoopEncoder(n_heads, d_model, ff_units, n_features)
    dec = LoopDecoder(n_heads, d_model, ff_units, n_features)
    return LoopEncoderDecoder(enc, dec, input_len, target_len)
