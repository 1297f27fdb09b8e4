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

Shape notation: ``B`` batch, ``L`` sequence length, ``P`` prompt length,
``D`` model dim, ``V`` vocabulary, ``F`` features.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab._validate import check_int
from attnlab.attention import DecodingCache
from attnlab.models.sequence_model import SequenceModel
from attnlab.models.transformer_layers import TransformerEncoderLayer

__all__ = ["DecoderOnlyTransformer"]


class DecoderOnlyTransformer(SequenceModel):
    """A causal stack of pre-norm Transformer blocks for token or real-valued sequences.

    Args: as :class:`attnlab.models.Transformer` (keyword-only): ``vocab_size`` or
        ``n_features``, ``d_model``, ``n_heads``, ``n_layers`` (blocks), ``ff_units``,
        ``dropout``, ``encoding`` (one of :data:`attnlab.models.ENCODINGS`, every
        scheme causal), ``max_len`` (rows of an absolute table: the learned one
        refuses longer sequences), ``max_relative_position``, ``pad_id``.

    Shapes:
        ``forward(x [B, L] or [B, L, F]) -> logits [B, L, V] or values [B, L, F]``:
        output ``i`` predicts element ``i + 1`` and sees elements ``0..i`` only.
        ``generate(prompt [B, P] or [B, P, F], steps) -> [B, steps]`` or ``[B, steps, F]``.

    Right padding needs no mask: with causal attention no real element ever sees
    the padding after it (the loss must ignore the padded outputs).

    Raises:
        TypeError / ValueError: naming the argument, as :class:`attnlab.models.Transformer`.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> model = DecoderOnlyTransformer(vocab_size=13, d_model=32, n_heads=4, encoding="alibi").eval()
        >>> prompt = torch.randint(3, 13, (2, 6))
        >>> model(prompt).shape
        torch.Size([2, 6, 13])
        >>> model.generate(prompt, steps=7).shape
        torch.Size([2, 7])
    """

    def _build_layers(self) -> None:
        self.layers = nn.ModuleList(self._layer(TransformerEncoderLayer, causal=True) for _ in range(self.n_layers))
        self.norm = nn.LayerNorm(self.d_model)

    def forward(self, x: Tensor, *, cache: DecodingCache | None = None) -> Tensor:
        """Outputs for every element of ``x [B, L]`` or ``[B, L, F]``.

        With a ``cache``, ``x`` holds the elements from ``cache.position`` on and
        attends to the cached ones too (the caller advances the cache).
        """
        self._check("x", x)
        offset = 0 if cache is None else cache.position
        h = self._embed(x, offset)  # [B, L, D]
        for i, layer in enumerate(self.layers):
            h = layer(h, is_causal=True, cache=None if cache is None else cache.layer(f"layers.{i}.self_attn"))
        return self.head(self.norm(h))  # [B, L, V] or [B, L, F]

    def generate(self, prompt: Tensor, steps: int, *, use_cache: bool = True) -> Tensor:
        """Greedy continuation of ``prompt`` by ``steps`` elements, each fed back (no grad).

        Args:
            prompt: ``[B, P]`` tokens or ``[B, P, F]`` values (a seq2seq task's
                source and separator: ``source + [BOS]``).
            steps: elements to generate.
            use_cache: run the prompt once and then one new element per step with
                a :class:`attnlab.attention.DecodingCache`; False re-runs the whole
                sequence every step (same outputs).

        Returns:
            Tokens ``[B, steps]`` (argmax) or values ``[B, steps, F]``.

        Raises:
            ValueError / TypeError: naming ``steps`` or ``x`` (the prompt) if they are bad.

        Thread-safe: the cache belongs to the call.
        """
        steps = check_int("steps", steps, minimum=1)
        self._check("x", prompt)
        with torch.no_grad():
            return self._greedy(prompt, steps, lambda x, cache: self(x, cache=cache), use_cache)
