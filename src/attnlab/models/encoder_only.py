"""An encoder-only Transformer that writes its answer into empty slots in one pass (Ruoss et al. 2023).

The model of "Randomized Positional Encodings Boost Length Generalization of
Transformers" (Ruoss et al. 2023, ACL, arXiv:2305.16843; after Delétang et al.
2023): a non-causal stack reads the input, then one empty token per output
position, and predicts every output at once
(:func:`attnlab.data.tasks.layouts.encoder_only_batch`)::

    tokens -> embed (+ absolute PE) -> [norm -> self-attn -> + -> norm -> FFN -> +] x N -> norm -> head

No decoding loop, so no cache, and randomized schemes are used exactly as in
training. The schemes are built with ``causal=False`` (ALiBi breaks the left/right
symmetry as Ruoss et al. do, T5 buckets both directions); padding (``pad_id``) is
masked out of every attention.

Shape notation: ``B`` batch, ``L`` sequence length (input and slots), ``D``
model dim, ``V`` vocabulary, ``F`` features.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab.models.sequence_model import SequenceModel
from attnlab.models.transformer_layers import TransformerEncoderLayer

__all__ = ["EncoderOnlyTransformer"]


class EncoderOnlyTransformer(SequenceModel):
    """A non-causal stack of pre-norm Transformer blocks with an output head at every position.

    Args: as :class:`attnlab.models.Transformer` (keyword-only): ``vocab_size`` or
        ``n_features``, ``d_model``, ``n_heads``, ``n_layers`` (blocks), ``ff_units``,
        ``dropout``, ``position`` (one of :data:`attnlab.catalog.ENCODINGS` or a scheme of
        one's own, every scheme bidirectional), ``max_len`` (rows of an absolute table, and the range
        ``[0, max_len)`` randomized positions are drawn from), ``max_relative_position``,
        ``pad_id``.

    Shapes:
        ``forward(x [B, L], *, position_ids [B, L] = None) -> logits [B, L, V]`` (or
        ``[B, L, F]`` for values): output ``i`` sees every non-padding element.
        ``predict(x [B, L], *, position_ids [B, L] = None) -> [B, L]`` tokens (argmax),
        without gradients.

    Raises:
        TypeError / ValueError: naming the argument, as :class:`attnlab.models.Transformer`.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> model = EncoderOnlyTransformer(vocab_size=5, d_model=16, n_heads=2, position="alibi").eval()
        >>> x = torch.tensor([[3, 4, 4, 1, 1, 1], [4, 3, 1, 1, 0, 0]])  # inputs, empty slots (1), padding (0)
        >>> model(x).shape, model.predict(x).shape
        (torch.Size([2, 6, 5]), torch.Size([2, 6]))
    """

    def _build_layers(self) -> None:
        self.layers = nn.ModuleList(self._layer(TransformerEncoderLayer, causal=False) for _ in range(self.n_layers))
        self.norm = nn.LayerNorm(self.d_model)

    def forward(self, x: Tensor, *, position_ids: Tensor | None = None) -> Tensor:
        """Outputs for every element of ``x [B, L]`` (or ``[B, L, F]``); padding is never attended to.

        ``position_ids [B, L]`` (non-negative integers) place the elements for the absolute
        table and every scheme (None: the indices): a left-padded batch at
        :func:`attnlab.encodings.positions.positions_from_mask`, Abacus digit indices.

        Raises:
            TypeError / ValueError: naming ``x`` or ``position_ids`` when they are bad.
        """
        self._check("x", x)
        position_ids = self._position_ids("position_ids", position_ids, x)  # [B, L] or None
        mask = (x != self.pad_id).unsqueeze(1) if self.vocab_size is not None else None  # [B, 1, L]
        h = self._embed(x, position_ids=position_ids)  # [B, L, D]
        for layer in self.layers:
            h = layer(h, mask, position_ids=position_ids)  # [B, L, D]
        return self.head(self.norm(h))  # [B, L, V] or [B, L, F]

    def predict(self, x: Tensor, *, position_ids: Tensor | None = None) -> Tensor:
        """The argmax token at every position of ``x [B, L]`` (no grad): ``[B, L]``.

        ``position_ids [B, L]``: as :meth:`forward`.

        Raises:
            TypeError / ValueError: naming ``x`` if it is not token ids of this vocabulary, or
                ``position_ids`` when they are bad.
        """
        if self.vocab_size is None:
            raise TypeError("predict is for token models; call the model for values")
        with torch.no_grad():
            return self(x, position_ids=position_ids).argmax(-1)  # [B, L]
