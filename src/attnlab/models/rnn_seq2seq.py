"""Recurrent sequence-to-sequence models: the attention lab's GRU encoder-decoder, with and without attention.

The encoder reads the source sequence with a GRU; its last hidden state starts the
decoder, which then produces the target one step at a time, each step fed either
its own previous prediction or, while training, the true previous point
(teacher forcing; Williams & Zipser 1989, Sutskever et al. 2014)::

    source x_0 .. x_{S-1}  ->  Encoder  ->  h_0 .. h_{S-1}
                                             |  last state starts the decoder
    x_{S-1} -> Decoder -> y_0 -> Decoder -> y_1 -> ...   (T steps)

With attention (Bahdanau et al. 2015, arXiv:1409.0473; scaled dot product of
Vaswani et al. 2017) the decoder's hidden state is a query over all encoder
states, and the context it gets back is concatenated to it before the
regression: :class:`DecoderAttn`, wrapped by :class:`EncoderDecoderAttn`, which
keeps every step's weights in ``alphas``.

Lab fidelity: the classes keep the attention lab's names, constructor signatures,
attributes (``hidden``, ``basic_rnn``, ``regression``, ``attn``, ``outputs``,
``alphas``, ``init_hidden``, ``init_outputs``, ``store_output``) and parameter
creation order, so after ``torch.manual_seed(k)`` they print the lab's numbers.
The teacher-forcing coin is the lab's ``torch.rand(1) <= prob``, drawn at every
step (in eval mode too), so a seeded run consumes torch's random numbers exactly
as the lab does. Fixed: teacher forcing can never happen in eval mode (the lab's
``rand <= 0`` could, in principle, pick a target that does not exist), outputs are
allocated on the input's device and dtype, and arguments are validated.

Shape notation: ``B`` batch, ``S`` source length, ``T`` target length,
``F`` features, ``D`` hidden dim (the GRU width).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attnlab._validate import check_finite_float, check_int
from attnlab.attention import Attention

__all__ = ["Decoder", "DecoderAttn", "Encoder", "EncoderDecoder", "EncoderDecoderAttn"]


def _check_sequence(name: str, x: Tensor, n_features: int) -> None:
    """Raise unless ``x`` is a floating ``[B, L, n_features]`` tensor."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a tensor [B, L, {n_features}], got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be floating point, got dtype {x.dtype}")
    if x.dim() != 3 or x.shape[-1] != n_features:
        raise ValueError(f"{name} must have shape [B, L, {n_features}], got {list(x.shape)}")


class Encoder(nn.Module):
    """GRU encoder: reads the source sequence, returns every hidden state.

    Args:
        n_features: ``F``, features per step.
        hidden_dim: ``D``, the GRU's hidden size.

    Attributes:
        basic_rnn: ``nn.GRU(F, D, batch_first=True)``.
        hidden: the final hidden state ``[1, B, D]`` of the last call (None before).

    Raises:
        TypeError / ValueError: naming the argument, for non-integer or non-positive sizes.

    Example:
        >>> _ = torch.manual_seed(21)
        >>> encoder = Encoder(n_features=2, hidden_dim=2)
        >>> source = torch.tensor([[[-1., -1.], [-1., 1.]]])
        >>> encoder(source).detach().round(decimals=4)
        tensor([[[ 0.0832, -0.0356],
                 [ 0.3105, -0.5263]]])
    """

    def __init__(self, n_features: int, hidden_dim: int) -> None:
        super().__init__()
        self.hidden_dim = check_int("hidden_dim", hidden_dim, minimum=1)
        self.n_features = check_int("n_features", n_features, minimum=1)
        self.hidden: Tensor | None = None
        self.basic_rnn = nn.GRU(self.n_features, self.hidden_dim, batch_first=True)

    def forward(self, X: Tensor) -> Tensor:
        """Encode ``X [B, S, F]``; returns the hidden states ``[B, S, D]`` (keys and values for attention)."""
        _check_sequence("X", X, self.n_features)
        rnn_out, self.hidden = self.basic_rnn(X)  # [B, S, D], [1, B, D]
        return rnn_out


class Decoder(nn.Module):
    """GRU decoder: one step at a time, from the encoder's last hidden state.

    Args:
        n_features: ``F``, features per step (in and out).
        hidden_dim: ``D``, the GRU's hidden size (the encoder's).

    Attributes:
        basic_rnn: ``nn.GRU(F, D, batch_first=True)``.
        regression: ``nn.Linear(D, F)``, hidden state to the next point.
        hidden: the running hidden state ``[1, B, D]``, set by :meth:`init_hidden`.

    Raises:
        TypeError / ValueError: naming the argument, for non-integer or non-positive sizes.
    """

    def __init__(self, n_features: int, hidden_dim: int) -> None:
        super().__init__()
        self.hidden_dim = check_int("hidden_dim", hidden_dim, minimum=1)
        self.n_features = check_int("n_features", n_features, minimum=1)
        self.hidden: Tensor | None = None
        self.basic_rnn = nn.GRU(self.n_features, self.hidden_dim, batch_first=True)
        self.regression = nn.Linear(self.hidden_dim, self.n_features)

    def init_hidden(self, hidden_seq: Tensor) -> None:
        """Start from the encoder's last hidden state.

        Args:
            hidden_seq: the encoder's states ``[B, S, D]``; only the last is used.
        """
        _check_sequence("hidden_seq", hidden_seq, self.hidden_dim)
        # The GRU wants its state sequence-first.
        self.hidden = hidden_seq[:, -1:].transpose(0, 1).contiguous()  # [B, 1, D] -> [1, B, D]

    def forward(self, X: Tensor) -> Tensor:
        """One decoding step from ``X [B, L, F]`` (usually ``L = 1``); returns the next point ``[B, 1, F]``.

        Uses (and updates) ``hidden``: call :meth:`init_hidden` first.
        """
        _check_sequence("X", X, self.n_features)
        out, self.hidden = self.basic_rnn(X, self.hidden)  # [B, L, D], [1, B, D]
        return self.regression(out[:, -1:])  # [B, 1, D] -> [B, 1, F]


class DecoderAttn(nn.Module):
    """GRU decoder whose hidden state attends over the encoder's states at every step.

    The GRU's output is the query; the encoder states are the keys and (raw) values
    of an :class:`attnlab.attention.Attention`; the regression reads the context
    concatenated with the query.

    Args:
        n_features: ``F``, features per step (in and out).
        hidden_dim: ``D``, the GRU's hidden size (the encoder's).

    Attributes:
        basic_rnn: ``nn.GRU(F, D, batch_first=True)``.
        attn: ``Attention(D)``; its ``alphas`` are the last step's weights ``[B, 1, S]``
            (as in the attention lab), its ``attn_weights`` every step since :meth:`init_hidden`,
            ``[B, 1, t, S]`` after ``t`` steps, so :func:`attnlab.attention.collect_attention`
            shows the whole decoded sequence.
        regression: ``nn.Linear(2 * D, F)``.
        hidden: the running hidden state ``[1, B, D]``.

    Raises:
        TypeError / ValueError: naming the argument, for non-integer or non-positive sizes.

    Example:
        >>> _ = torch.manual_seed(21)
        >>> encoder, decoder = Encoder(2, 2), DecoderAttn(2, 2)
        >>> source = torch.tensor([[[-1., -1.], [-1., 1.]]])
        >>> decoder.init_hidden(encoder(source))
        >>> decoder(source[:, -1:]).detach().round(decimals=4)
        tensor([[[-0.3555, -0.1220]]])
    """

    def __init__(self, n_features: int, hidden_dim: int) -> None:
        super().__init__()
        self.hidden_dim = check_int("hidden_dim", hidden_dim, minimum=1)
        self.n_features = check_int("n_features", n_features, minimum=1)
        self.hidden: Tensor | None = None
        self.basic_rnn = nn.GRU(self.n_features, self.hidden_dim, batch_first=True)
        self.attn = Attention(self.hidden_dim)
        self.regression = nn.Linear(2 * self.hidden_dim, self.n_features)
        self._step_weights: list[Tensor] = []

    def init_hidden(self, hidden_seq: Tensor) -> None:
        """Take the encoder's states ``[B, S, D]`` as keys and values, and its last one as the state."""
        _check_sequence("hidden_seq", hidden_seq, self.hidden_dim)
        self.attn.init_keys(hidden_seq)
        self.hidden = hidden_seq[:, -1:].transpose(0, 1).contiguous()  # [B, 1, D] -> [1, B, D]
        self._step_weights = []

    def forward(self, X: Tensor, mask: Tensor | None = None) -> Tensor:
        """One decoding step.

        Args:
            X: ``[B, L, F]`` (usually ``L = 1``): the previous point.
            mask: boolean ``[B, 1, S]``, True = may attend (e.g. ``attnlab.attention.padding_mask``).

        Returns:
            The next point ``[B, 1, F]``.
        """
        _check_sequence("X", X, self.n_features)
        out, self.hidden = self.basic_rnn(X, self.hidden)  # [B, L, D], [1, B, D]
        query = out[:, -1:]  # [B, 1, D]
        context = self.attn(query, mask=mask)  # [B, 1, D]
        # Stack this step's weights under the previous ones: [B, 1, t, S].
        assert self.attn.attn_weights is not None
        self._step_weights.append(self.attn.attn_weights)  # [B, 1, 1, S]
        self.attn.attn_weights = torch.cat(self._step_weights, dim=2)  # [B, 1, t, S]
        concatenated = torch.cat([context, query], dim=-1)  # [B, 1, 2 * D]
        return self.regression(concatenated)  # [B, 1, F]


def _check_teacher_forcing_prob(value: float) -> float:
    value = check_finite_float("teacher_forcing_prob", value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"teacher_forcing_prob must be in [0, 1], got {value}")
    return value


class EncoderDecoder(nn.Module):
    """Encoder plus step-by-step decoder, with teacher forcing while training.

    Args:
        encoder: an :class:`Encoder` (anything with ``n_features`` returning ``[B, S, D]``).
        decoder: a :class:`Decoder` or :class:`DecoderAttn` (``init_hidden``, then
            one ``[B, 1, F]`` step per call).
        input_len: ``S``, source steps at the start of ``X``.
        target_len: ``T``, steps to generate.
        teacher_forcing_prob: chance, at each step while training, that the next
            input is the true point instead of the prediction. Never used in eval mode.

    Attributes:
        outputs: the last predictions ``[B, T, F]``.

    Shapes:
        ``forward(X [B, S + T, F]) -> [B, T, F]``. In eval mode (or with
        ``teacher_forcing_prob=0``) ``X`` may hold the source alone, ``[B, S, F]``.

    Raises:
        TypeError / ValueError: naming the argument, for an encoder or decoder that
            is not an ``nn.Module`` (or an encoder without an integer ``n_features``),
            non-positive lengths, or a probability outside [0, 1].

    Example (the attention lab's free-running decoder with attention):
        >>> _ = torch.manual_seed(21)
        >>> encoder, decoder = Encoder(2, 2), DecoderAttn(2, 2)
        >>> model = EncoderDecoder(encoder, decoder, input_len=2, target_len=2, teacher_forcing_prob=0.0)
        >>> full_seq = torch.tensor([[[-1., -1.], [-1., 1.], [1., 1.], [1., -1.]]])
        >>> model(full_seq).detach().round(decimals=4)
        tensor([[[-0.3555, -0.1220],
                 [-0.2641, -0.2521]]])
    """

    def __init__(
        self,
        encoder: nn.Module,
        decoder: nn.Module,
        input_len: int,
        target_len: int,
        teacher_forcing_prob: float = 0.5,
    ) -> None:
        super().__init__()
        for name, module in (("encoder", encoder), ("decoder", decoder)):
            if not isinstance(module, nn.Module):
                raise TypeError(f"{name} must be an nn.Module, got {type(module).__name__}")
        n_features = getattr(encoder, "n_features", None)
        if isinstance(n_features, bool) or not isinstance(n_features, int):
            raise TypeError(
                f"encoder must have an integer n_features (e.g. Encoder), got {type(encoder).__name__} "
                f"with n_features={n_features!r}"
            )
        # Typed Any: the attention lab's duck-typed interface (n_features, init_hidden, attn).
        self.encoder: Any = encoder
        self.decoder: Any = decoder
        self.input_len = check_int("input_len", input_len, minimum=1)
        self.target_len = check_int("target_len", target_len, minimum=1)
        self.teacher_forcing_prob = _check_teacher_forcing_prob(teacher_forcing_prob)
        self.outputs: Tensor | None = None

    def init_outputs(
        self, batch_size: int, *, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> None:
        """Allocate ``outputs [B, T, F]`` (zeros) on ``device`` with ``dtype``."""
        self.outputs = torch.zeros(
            batch_size, self.target_len, self.encoder.n_features, device=device, dtype=dtype
        )  # [B, T, F]

    def store_output(self, i: int, out: Tensor) -> None:
        """Write step ``i``'s prediction ``out [B, 1, F]`` into ``outputs``."""
        assert self.outputs is not None
        self.outputs[:, i : i + 1, :] = out

    def forward(self, X: Tensor) -> Tensor:
        """Encode ``X[:, :S]`` and generate ``T`` steps.

        Args:
            X: ``[B, S + T, F]`` (source then target), or ``[B, S, F]`` when no
                teacher forcing can happen (eval mode, or probability 0).

        Returns:
            The predictions ``[B, T, F]`` (also kept in ``outputs``).

        Raises:
            ValueError: if ``X`` is not ``[B, L, F]`` or is too short for its use.
        """
        _check_sequence("X", X, self.encoder.n_features)
        prob = self.teacher_forcing_prob if self.training else 0.0
        needed = self.input_len + (self.target_len if prob > 0 else 0)
        if X.shape[1] < needed:
            raise ValueError(
                f"X has {X.shape[1]} steps but needs {needed}: input_len={self.input_len}"
                + (f" plus target_len={self.target_len} for teacher forcing" if prob > 0 else "")
            )
        source_seq = X[:, : self.input_len]  # [B, S, F]
        target_seq = X[:, self.input_len :]  # [B, T, F], or empty
        self.init_outputs(X.shape[0], device=X.device, dtype=X.dtype)

        hidden_seq = self.encoder(source_seq)  # [B, S, D]
        self.decoder.init_hidden(hidden_seq)
        # The last source point is the first input of the decoder.
        dec_inputs = source_seq[:, -1:]  # [B, 1, F]
        for i in range(self.target_len):
            out = self.decoder(dec_inputs)  # [B, 1, F]
            self.store_output(i, out)
            # Drawn at every step, eval mode included, to use torch's RNG as the attention lab does.
            coin = torch.rand(1)
            if prob > 0 and bool(coin <= prob):
                dec_inputs = target_seq[:, i : i + 1]  # teacher forcing: the true point
            else:
                dec_inputs = out
        assert self.outputs is not None
        return self.outputs


class EncoderDecoderAttn(EncoderDecoder):
    """:class:`EncoderDecoder` that also keeps the attention weights of every step.

    Use it with a :class:`DecoderAttn`. Same arguments as :class:`EncoderDecoder`.

    Attributes:
        outputs: the last predictions ``[B, T, F]``.
        alphas: the attention weights of the last call, ``[B, T, S]``: row ``t``
            is how step ``t`` weighed the ``S`` source positions (detached).

    Raises:
        TypeError: if the decoder has no ``attn`` (an attention module with ``alphas``).
    """

    def __init__(
        self,
        encoder: nn.Module,
        decoder: nn.Module,
        input_len: int,
        target_len: int,
        teacher_forcing_prob: float = 0.5,
    ) -> None:
        super().__init__(encoder, decoder, input_len, target_len, teacher_forcing_prob)
        if not isinstance(getattr(decoder, "attn", None), nn.Module):
            raise TypeError(
                "decoder must have an attention module `attn` (e.g. DecoderAttn), "
                f"got {type(decoder).__name__}"
            )
        self.alphas: Tensor | None = None

    def init_outputs(
        self, batch_size: int, *, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> None:
        """Allocate ``outputs [B, T, F]`` and ``alphas [B, T, S]`` (zeros)."""
        super().init_outputs(batch_size, device=device, dtype=dtype)
        self.alphas = torch.zeros(batch_size, self.target_len, self.input_len, device=device, dtype=dtype)

    def store_output(self, i: int, out: Tensor) -> None:
        """Write step ``i``'s prediction ``[B, 1, F]`` and its attention weights ``[B, 1, S]``."""
        super().store_output(i, out)
        assert self.alphas is not None
        self.alphas[:, i : i + 1, :] = self.decoder.attn.alphas

