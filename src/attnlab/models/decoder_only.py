"""A decoder-only Transformer (GPT-style) on attnlab's layers, with the positional encoding as a choice.

The model the length-generalisation literature measures (Kazemnejad et al. 2023,
arXiv:2305.19466; Ruoss et al. 2023, arXiv:2305.16843): one causal stack over
the whole sequence, so every positional scheme sits in the only attention there
is. A sequence-to-sequence task is one sequence, ``source + [BOS] + target``,
and the model learns to continue it (see
:func:`attnlab.data.tasks.decoder_only_batch`)::

    tokens -> embed (+ absolute PE) -> [norm -> causal self-attn -> + -> norm -> FFN -> +] x N -> norm -> head

In the encoder-decoder :class:`attnlab.models.Transformer` the relative schemes
(T5, ALiBi, rotary, Shaw) live only in the self-attentions; the cross-attention
that must find "the source token for this output" has no position at all, so
on reverse or copy those encodings must smuggle absolute positions through
padding boundaries, and the comparison measures that difficulty more than the
encodings. Here a relative scheme can align output ``t`` with its source token
directly, by offset.

A batch of prompts of different lengths is padded on the **left**, so that
every row ends at the last column and generation appends to all of them at
once (transformers #22161): ``generate(prompt, steps, prompt_mask=...)`` masks
the padding out of every attention and places each row's tokens where they
would sit unpadded (``cumsum(mask) - 1``), continuing each row from its own last
position; every scheme that caches then generates for a padded row exactly
what it generates for the row alone.

Shape notation: ``B`` batch, ``L`` sequence length, ``P`` prompt length,
``D`` model dim, ``V`` vocabulary, ``F`` features.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from attnlab._validate import check_device, check_int
from attnlab.encodings.positions import check_position_ids, continue_positions, positions_from_mask
from attnlab.models.sequence_model import SequenceModel
from attnlab.models.transformer_layers import TransformerEncoderLayer

if TYPE_CHECKING:  # annotations only: the cache's module is imported where decoding makes one
    from attnlab.attention import DecodingCache

__all__ = ["DecoderOnlyTransformer"]


class DecoderOnlyTransformer(SequenceModel):
    """A causal stack of pre-norm Transformer blocks for token or real-valued sequences.

    Args: as :class:`attnlab.models.Transformer` (keyword-only): ``vocab_size`` or
        ``n_features``, ``d_model``, ``n_heads``, ``n_layers`` (blocks), ``ff_units``,
        ``dropout``, ``position`` (one of :data:`attnlab.catalog.ENCODINGS` or a scheme of
        one's own, every scheme causal), ``max_len`` (rows of an absolute table: the learned one
        refuses longer sequences), ``max_relative_position``, ``pad_id``.

    Shapes:
        ``forward(x [B, L] or [B, L, F], *, mask [B, L] = None, position_ids [B, L] = None,
        cache = None) -> logits [B, L, V] or values [B, L, F]``: output ``i`` predicts
        element ``i + 1`` and sees elements ``0..i`` only (the real ones, with ``mask``).
        ``generate(prompt [B, P] or [B, P, F], steps, *, prompt_mask [B, P] = None,
        position_ids [B, P + steps] = None) -> [B, steps]`` or ``[B, steps, F]``.

    Right padding needs no mask: with causal attention no real element ever sees
    the padding after it (the loss must ignore the padded outputs).

    Raises:
        TypeError / ValueError: naming the argument, as :class:`attnlab.models.Transformer`.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> model = DecoderOnlyTransformer(vocab_size=13, d_model=32, n_heads=4, position="alibi").eval()
        >>> prompt = torch.randint(3, 13, (2, 6))
        >>> model(prompt).shape
        torch.Size([2, 6, 13])
        >>> model.generate(prompt, steps=7).shape
        torch.Size([2, 7])
    """

    def _build_layers(self) -> None:
        self.layers = nn.ModuleList(self._layer(TransformerEncoderLayer, causal=True) for _ in range(self.n_layers))
        self.norm = nn.LayerNorm(self.d_model)

    def forward(self, x: Tensor, *, mask: Tensor | None = None, position_ids: Tensor | None = None,
                cache: DecodingCache | None = None) -> Tensor:
        """Outputs for every element of ``x [B, L]`` or ``[B, L, F]``.

        Args:
            x: ``[B, L]`` tokens or ``[B, L, F]`` values.
            mask: boolean ``[B, L]``, True on the real elements: padding (False) is never
                attended to. With a ``cache``, the mask of ``x``'s elements; the cache keeps
                the earlier ones'.
            position_ids: the elements' positions ``[B, L]`` (non-negative integers), for the
                absolute table and every scheme; None: the indices, or with a ``cache`` that
                has positions from earlier calls, each row after its own last.
            cache: ``x`` holds the elements from ``cache.position`` on and attends to the
                cached ones too (the caller advances the cache).

        Returns:
            Logits ``[B, L, V]`` or values ``[B, L, F]``.

        Raises:
            TypeError / ValueError: naming ``x``, ``mask`` or ``position_ids`` when they are bad.
        """
        self._check("x", x)
        B, L = x.shape[0], x.shape[1]
        mask = self._padding("mask", mask, B, L, device=x.device)
        position_ids = self._position_ids("position_ids", position_ids, x)  # [B, L] or None
        keys_mask = mask  # [B, S]: every key's, the cached ones' too
        if cache is not None:
            if position_ids is None:
                position_ids = cache.next_positions(L)  # each row after its own last (None: the indices)
            keys_mask = cache.key_mask(mask, L)
        attn_mask = None if keys_mask is None else keys_mask[:, None, :]  # [B, 1, S]: the same for every query
        offset = 0 if cache is None else cache.position
        h = self._embed(x, offset, position_ids=position_ids)  # [B, L, D]
        for i, layer in enumerate(self.layers):
            h = layer(h, attn_mask, is_causal=True, position_ids=position_ids,
                      cache=None if cache is None else cache.layer(f"layers.{i}.self_attn"))
        if cache is not None and position_ids is not None:
            cache.note_positions(position_ids)
        return self.head(self.norm(h))  # [B, L, V] or [B, L, F]

    def generate(self, prompt: Tensor, steps: int, *, prompt_mask: Tensor | None = None,
                 position_ids: Tensor | None = None, use_cache: bool = True) -> Tensor:
        """Greedy continuation of ``prompt`` by ``steps`` elements, each fed back (no grad).

        Args:
            prompt: ``[B, P]`` tokens or ``[B, P, F]`` values (a seq2seq task's
                source and separator: ``source + [BOS]``).
            steps: elements to generate.
            prompt_mask: boolean ``[B, P]``, False on each row's left padding: the
                padding is never attended to, and each row's positions are counted over
                its real elements (``cumsum(mask) - 1``), continuing from its own last
                position; the last column must be real in every row.
            position_ids: every position up front, ``[B, P + steps]`` (non-negative
                integers): a task whose positions come from its structure (Abacus digit
                indices) knows them for the answer too. They win over the positions
                ``prompt_mask`` would give (which still masks the padding).
            use_cache: run the prompt once and then one new element per step with
                a :class:`attnlab.attention.DecodingCache`; False re-runs the whole
                sequence every step (same outputs).

        Returns:
            Tokens ``[B, steps]`` (argmax) or values ``[B, steps, F]``.

        Raises:
            ValueError / TypeError: naming ``steps``, ``x`` (the prompt), ``prompt_mask`` or
                ``position_ids`` if they are bad (a ``prompt_mask`` that is not left padding).

        Thread-safe: the cache belongs to the call.
        """
        steps = check_int("steps", steps, minimum=1)
        self._check("x", prompt)
        B, P = prompt.shape[0], prompt.shape[1]
        self._check_decoding(batch=B, prompt=P, steps=steps, use_cache=use_cache)
        mask = self._padding("prompt_mask", prompt_mask, B, P, device=prompt.device)
        ids: Tensor | None = None  # [B, P + steps]: every position (None: the indices)
        if mask is not None:
            bad = ~mask[:, -1]  # [B]: a row whose last prompt element is padding
            if bool(bad.any()):
                row = int(bad.nonzero()[0, 0])
                raise ValueError(f"prompt_mask must mark left padding (False first, then True): the last element of "
                                 f"every row is real, but row {row} is {mask[row].int().tolist()}")
            prompt_ids = positions_from_mask(mask)  # [B, P]
            ids = torch.cat([prompt_ids, continue_positions(prompt_ids[:, -1], steps)], dim=1)  # [B, P + steps]
            mask = torch.cat([mask, mask.new_ones(B, steps)], dim=1)  # [B, P + steps]: the new elements are real
        if position_ids is not None:
            check_device("position_ids", position_ids, prompt.device)
            ids = check_position_ids(position_ids, batch=B, length=P + steps).expand(B, P + steps)

        def run(x: Tensor, cache: DecodingCache | None, pos: Tensor | None, m: Tensor | None) -> Tensor:
            return self(x, mask=m, position_ids=pos, cache=cache)

        with torch.no_grad():
            return self._greedy(prompt, steps, run, use_cache, position_ids=ids, mask=mask)
