"""``Attention``: the attention lab's single-head attention, with its stateful interface.

The decoder of a recurrent seq2seq model asks, at every step, which encoder
states matter for the next output: its hidden state is the query, the encoder's
states are the keys (and, unprojected, the values), and the answer is the
context vector ``alphas @ values`` (Bahdanau et al. 2015; Luong et al. 2015,
with the scaled dot product of Vaswani et al. 2017 as the score).

Same names, signature, attributes and parameter order as the attention lab
(``linear_query``, ``linear_key``, ``linear_value``; ``init_keys``; ``alphas``),
so after ``torch.manual_seed(k)`` it gives the lab's numbers. Underneath it
calls :func:`attnlab.attention.attend`. It always keeps ``alphas``: the lab's
``EncoderDecoderAttn`` reads them at every step, and with one query per step
the explicit softmax costs the same as the fused kernel.

That stateful interface is the lab's and is not thread-safe: the keys live on
the module. Concurrent callers use the functional pair instead,
:meth:`Attention.project_keys` then :meth:`Attention.attend_projected`, which keep
the keys in the call (attnlab's GRU decoder does).

Shape notation: ``B`` batch, ``T`` queries (1 per decoding step), ``S`` keys,
``F`` input features, ``Dk`` hidden dim.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab._validate import check_bool, check_input_dtype, check_int
from attnlab.attention.functional import attend
from attnlab.attention.masks import as_bool_mask
from attnlab.attention.recording import record

__all__ = ["Attention"]


class Attention(nn.Module):
    """Single-head scaled dot-product attention over keys set by ``init_keys``.

    Args:
        hidden_dim: ``Dk``, the width of the projected queries and keys.
        input_dim: ``F``, width of the raw queries and keys; defaults to ``hidden_dim``.
        proj_values: project the values with ``linear_value`` (default False: the
            values are the raw keys, as in the attention lab).

    Attributes:
        alphas: the last attention weights ``[B, T, S]`` (detached), as in the attention lab.
        attn_weights: the same as ``[B, 1, T, S]`` (attnlab's per-layer layout).
        keys, proj_keys, values: set by :meth:`init_keys`.

    These attributes are the lab's stateful interface: one caller at a time. From
    several threads, use :meth:`project_keys` and :meth:`attend_projected`.

    Shapes:
        ``init_keys(keys [B, S, F])``; ``forward(query [B, T, F], mask=None) -> [B, T, Dv]``
        with ``Dv = Dk`` if ``proj_values`` else ``F``; ``mask`` ``[B, 1, S]`` or ``[B, T, S]``,
        boolean (True = may attend) or the lab's 0/1 floats (``mask == 0`` is masked).

    Example:
        >>> _ = torch.manual_seed(11)
        >>> attnh = Attention(2)
        >>> attnh.init_keys(torch.tensor([[[-.38, .44], [.85, -.05]]]))
        >>> _ = attnh(torch.tensor([[[-1., 1.]]]), mask=torch.tensor([[[True, False]]]))
        >>> attnh.alphas
        tensor([[[1., 0.]]])
    """

    def __init__(self, hidden_dim: int, input_dim: int | None = None, proj_values: bool = False) -> None:
        super().__init__()
        self.d_k = check_int("hidden_dim", hidden_dim, minimum=1)
        self.input_dim = self.d_k if input_dim is None else check_int("input_dim", input_dim, minimum=1)
        self.proj_values = check_bool("proj_values", proj_values)
        # Created even when unused (proj_values=False) so the RNG draws match the attention lab.
        self.linear_query = nn.Linear(self.input_dim, self.d_k)
        self.linear_key = nn.Linear(self.input_dim, self.d_k)
        self.linear_value = nn.Linear(self.input_dim, self.d_k)
        self.alphas: Tensor | None = None
        self.attn_weights: Tensor | None = None
        self.keys: Tensor | None = None
        self.proj_keys: Tensor | None = None
        self.values: Tensor | None = None

    def _check(self, name: str, x: Tensor) -> None:
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != self.input_dim:
            shape = list(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"{name} must have shape [B, L, {self.input_dim}], got {shape}")
        check_input_dtype(name, x, self.linear_query.weight.dtype, owner="module")

    def project_keys(self, keys: Tensor) -> tuple[Tensor, Tensor]:
        """The projected keys ``[B, S, Dk]`` and the values ``[B, S, Dv]`` for ``keys [B, S, F]``; keeps nothing.

        Raises:
            ValueError / TypeError: if ``keys`` is not ``[B, S, F]`` of the module's dtype.
        """
        self._check("keys", keys)
        proj_keys = self.linear_key(keys)  # [B, S, Dk]
        values = self.linear_value(keys) if self.proj_values else keys  # [B, S, Dv]
        return proj_keys, values

    def init_keys(self, keys: Tensor) -> None:
        """Set the keys ``[B, S, F]``: project them, and the values if ``proj_values`` (the lab's stateful use)."""
        self.proj_keys, self.values = self.project_keys(keys)
        self.keys = keys

    def score_function(self, query: Tensor) -> Tensor:
        """Scaled dot products of the projected ``query [B, T, F]`` with the projected keys: ``[B, T, S]``.

        Raises:
            RuntimeError: before :meth:`init_keys`.
        """
        if self.proj_keys is None:
            raise RuntimeError("no keys: call init_keys(keys) first")
        proj_query = self.linear_query(query)  # [B, T, Dk]
        # [B, T, Dk] x [B, Dk, S] -> [B, T, S]
        return torch.bmm(proj_query, self.proj_keys.transpose(1, 2)) / self.d_k**0.5

    def attend_projected(
        self, query: Tensor, proj_keys: Tensor, values: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Attend from ``query [B, T, F]`` to keys from :meth:`project_keys`; keeps nothing.

        Args:
            query: ``[B, T, F]``, checked by the caller (:meth:`forward` does).
            proj_keys: ``[B, S, Dk]``; values: ``[B, S, Dv]``.
            mask: ``[B, 1, S]`` or ``[B, T, S]``, boolean (True = may attend) or the
                lab's 0/1 floats (``mask == 0`` is masked), converted here.

        Returns:
            ``(context [B, T, Dv], weights [B, 1, T, S])``, the weights detached.

        Raises:
            TypeError / ValueError: naming ``mask``, for a mask that is neither boolean
                nor 0/1 valued, or does not broadcast to ``[B, 1, T, S]``.
        """
        if mask is not None:
            mask = as_bool_mask(mask)
            if mask.dim() == 3:
                mask = mask.unsqueeze(1)  # [B, 1|T, S] -> [B, 1, 1|T, S]
        q = self.linear_query(query).unsqueeze(1)  # [B, 1, T, Dk]: one head
        context, weights = attend(
            q, proj_keys.unsqueeze(1), values.unsqueeze(1), mask=mask, need_weights=True
        )  # [B, 1, T, Dv], [B, 1, T, S]
        assert weights is not None
        return context[:, 0], weights.detach()  # [B, T, Dv], [B, 1, T, S]

    def keep_weights(self, weights: Tensor) -> None:
        """Keep ``weights [B, 1, T, S]`` as ``attn_weights`` and ``alphas [B, T, S]``, and record them."""
        self.attn_weights = weights
        self.alphas = weights[:, 0]  # [B, T, S]
        record(self, weights)

    def forward(self, query: Tensor, mask: Tensor | None = None) -> Tensor:
        """Context vectors ``[B, T, Dv]`` for ``query [B, T, F]``; keeps ``alphas [B, T, S]``.

        The lab's stateful use (keys from :meth:`init_keys`, weights kept on the
        module): not thread-safe; see :meth:`attend_projected`.

        Args:
            query: ``[B, T, F]``.
            mask: ``[B, 1, S]`` or ``[B, T, S]``: boolean, True = may attend, or the
                lab's 0/1 floats (``mask == 0`` is masked).

        Raises:
            ValueError: if ``query`` is not ``[B, T, F]``, or ``mask`` holds values other than 0 and 1.
            TypeError: if its dtype is not the module's.
            RuntimeError: before :meth:`init_keys`.
        """
        self._check("query", query)
        if self.proj_keys is None or self.values is None:
            raise RuntimeError("no keys: call init_keys(keys) first")
        context, weights = self.attend_projected(query, self.proj_keys, self.values, mask)
        self.keep_weights(weights)
        return context  # [B, T, Dv]
