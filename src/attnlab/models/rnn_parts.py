"""The attention lab's GRU parts, one step at a time: :class:`Encoder`, :class:`Decoder`, :class:`DecoderAttn`.

The encoder reads the source with a GRU; the decoder starts from its last
hidden state and produces one point per call; :class:`DecoderAttn` also
attends, at every step, from its hidden state (the query) over the encoder's
states (keys and values; Bahdanau et al. 2015, arXiv:1409.0473, with the scaled
dot product of Vaswani et al. 2017). :mod:`attnlab.models.rnn_seq2seq` puts
them together.

Two ways to drive them:

* the lab's, stateful: ``decoder.init_hidden(states)``, then ``decoder(x)`` once
  per step; the running state lives on the module (``hidden``, the attention's
  keys), so one caller at a time;
* the functional one, which the models use: ``state = decoder.start(states)``,
  then ``out, state, weights = decoder.step(x, state)``; the state is a
  :class:`DecoderState` that belongs to the call, so any number of threads can
  decode with one decoder at once. Both compute the same numbers.

Lab fidelity: names, constructor signatures, attributes (``hidden``,
``basic_rnn``, ``regression``, ``attn``, ``init_hidden``) and parameter creation
order are the attention lab's, so after ``torch.manual_seed(k)`` they print the lab's numbers.

Shape notation: ``B`` batch, ``S`` source length, ``L`` steps fed at once
(usually 1), ``F`` features, ``D`` hidden dim (the GRU width).
"""

from __future__ import annotations

from typing import NamedTuple, cast

import torch
from torch import Tensor, nn

from attnlab._validate import check_input_dtype, check_int
from attnlab.attention import Attention
from attnlab.attention.recording import record
from attnlab.models.source_padding import last_steps

__all__ = ["Decoder", "DecoderAttn", "DecoderState", "Encoder"]


def check_sequence(name: str, x: Tensor, n_features: int, dtype: torch.dtype | None = None) -> None:
    """Raise unless ``x`` is a floating ``[B, L, n_features]`` tensor (of ``dtype``, the weights', if given).

    Raises:
        TypeError: naming ``name``, for a non-tensor, or a dtype that is not floating or not ``dtype``.
        ValueError: naming ``name``, for another shape.
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a tensor [B, L, {n_features}], got {type(x).__name__}")
    if dtype is not None:
        check_input_dtype(name, x, dtype)
    if not x.is_floating_point():
        raise TypeError(f"{name} must be floating point, got dtype {x.dtype}")
    if x.dim() != 3 or x.shape[-1] != n_features:
        raise ValueError(f"{name} must have shape [B, L, {n_features}], got {list(x.shape)}")


class DecoderState(NamedTuple):
    """A decoder's running state, owned by the call that decodes.

    Attributes:
        hidden: the GRU's hidden state ``[1, B, D]`` (sequence-first, as ``nn.GRU`` keeps it).
        keys: the projected encoder states ``[B, S, D]`` (:class:`DecoderAttn`; None otherwise).
        values: the encoder states the context averages, ``[B, S, D]`` (likewise).
        source_mask: bool ``[B, 1, S]``, True on the real source steps of a padded
            source (:class:`DecoderAttn` attends to those only); None: every step is real.
    """

    hidden: Tensor
    keys: Tensor | None = None
    values: Tensor | None = None
    source_mask: Tensor | None = None


def _weights_dtype(rnn: nn.GRU) -> torch.dtype:
    return cast(Tensor, rnn.weight_ih_l0).dtype  # a Parameter; nn.Module's __getattr__ hides its type


def _last_state(hidden_seq: Tensor, source_mask: Tensor | None) -> Tensor:
    # The state after the last real step (the GRU read the padding after it, which is never
    # used), sequence-first as the GRU wants it.
    return last_steps(hidden_seq, source_mask).transpose(0, 1).contiguous()  # [B, 1, D] -> [1, B, D]


class Encoder(nn.Module):
    """GRU encoder: reads the source sequence, returns every hidden state.

    Args:
        n_features: ``F``, features per step.
        hidden_dim: ``D``, the GRU's hidden size.

    Attributes:
        basic_rnn: ``nn.GRU(F, D, batch_first=True)``.
        hidden: the final hidden state ``[1, B, D]`` of the last ``forward`` (None before);
            the lab's, so the last caller's: concurrent callers use :meth:`encode`.

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

    def encode(self, X: Tensor) -> tuple[Tensor, Tensor]:
        """Encode ``X [B, S, F]``, keeping nothing: ``(states [B, S, D], last hidden state [1, B, D])``.

        Raises:
            TypeError / ValueError: naming ``X``, for a non-tensor, a dtype other
                than the weights', or a shape other than ``[B, S, F]``.
        """
        check_sequence("X", X, self.n_features, _weights_dtype(self.basic_rnn))
        states, hidden = self.basic_rnn(X)  # [B, S, D], [1, B, D]
        return states, hidden

    def forward(self, X: Tensor) -> Tensor:
        """Encode ``X [B, S, F]``; returns the hidden states ``[B, S, D]`` (keys and values for attention)."""
        rnn_out, self.hidden = self.encode(X)
        return rnn_out


class Decoder(nn.Module):
    """GRU decoder: one step at a time, from the encoder's last hidden state.

    Args:
        n_features: ``F``, features per step (in and out).
        hidden_dim: ``D``, the GRU's hidden size (the encoder's).

    Attributes:
        basic_rnn: ``nn.GRU(F, D, batch_first=True)``.
        regression: ``nn.Linear(D, F)``, hidden state to the next point.
        hidden: the running hidden state ``[1, B, D]``, set by :meth:`init_hidden`. The
            lab's stateful interface, not thread-safe: see :meth:`start` and :meth:`step`.

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

    def _dtype(self) -> torch.dtype:
        return _weights_dtype(self.basic_rnn)

    def start(self, hidden_seq: Tensor, source_mask: Tensor | None = None) -> DecoderState:
        """The state to decode from: the encoder's last state. Keeps nothing on the module.

        Args:
            hidden_seq: the encoder's states ``[B, S, D]``; only the last is used.
            source_mask: bool ``[B, 1, S]`` of a right-padded source, checked by the
                caller (:func:`attnlab.models.source_padding.check_source_mask`): the
                state after each row's last real step is used.

        Raises:
            TypeError / ValueError: naming ``hidden_seq``, for a wrong dtype or shape.
        """
        check_sequence("hidden_seq", hidden_seq, self.hidden_dim, self._dtype())
        return DecoderState(_last_state(hidden_seq, source_mask), source_mask=source_mask)

    def step(self, X: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState, Tensor | None]:
        """One decoding step from ``X [B, L, F]`` (checked by the caller); keeps nothing on the module.

        Returns:
            ``(next point [B, 1, F], the new state, None)`` (no attention weights).
        """
        out, hidden = self.basic_rnn(X, state.hidden)  # [B, L, D], [1, B, D]
        return self.regression(out[:, -1:]), DecoderState(hidden), None  # [B, 1, D] -> [B, 1, F]

    def init_hidden(self, hidden_seq: Tensor) -> None:
        """Start from the encoder's last hidden state (the lab's stateful use; see :meth:`start`).

        Args:
            hidden_seq: the encoder's states ``[B, S, D]``; only the last is used.
        """
        self.hidden = self.start(hidden_seq).hidden

    def keep(self, hidden_seq: Tensor, state: DecoderState, weights: list[Tensor]) -> None:
        """Keep a finished decoding's state as the lab's attributes (``hidden [1, B, D]``).

        ``hidden_seq [B, S, D]`` and ``weights`` (per step) are for :class:`DecoderAttn`.
        """
        self.hidden = state.hidden

    def forward(self, X: Tensor) -> Tensor:
        """One decoding step from ``X [B, L, F]`` (usually ``L = 1``); returns the next point ``[B, 1, F]``.

        Uses (and updates) ``hidden``: call :meth:`init_hidden` first.
        """
        check_sequence("X", X, self.n_features, self._dtype())
        out, state, _ = self.step(X, DecoderState(self.hidden))  # type: ignore[arg-type]
        self.hidden = state.hidden
        return out


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
        hidden: the running hidden state ``[1, B, D]``. Like ``attn``'s keys and weights,
            the lab's stateful interface: see :meth:`start` and :meth:`step` for concurrent use.

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

    def _dtype(self) -> torch.dtype:
        return _weights_dtype(self.basic_rnn)

    def start(self, hidden_seq: Tensor, source_mask: Tensor | None = None) -> DecoderState:
        """The state to decode from: the last encoder state, and all of them projected as keys.

        Args:
            hidden_seq: the encoder's states ``[B, S, D]``.
            source_mask: bool ``[B, 1, S]`` of a right-padded source, checked by the
                caller (:func:`attnlab.models.source_padding.check_source_mask`): the
                state after each row's last real step is used, and every step
                attends to the real steps only.

        Raises:
            TypeError / ValueError: naming ``hidden_seq``, for a wrong dtype or shape.
        """
        check_sequence("hidden_seq", hidden_seq, self.hidden_dim, self._dtype())
        keys, values = self.attn.project_keys(hidden_seq)  # [B, S, D] each
        return DecoderState(_last_state(hidden_seq, source_mask), keys, values, source_mask)

    def step(
        self, X: Tensor, state: DecoderState, mask: Tensor | None = None
    ) -> tuple[Tensor, DecoderState, Tensor | None]:
        """One decoding step from ``X [B, L, F]`` (checked by the caller); keeps nothing on the module.

        Args:
            X: ``[B, L, F]``: the previous point.
            state: from :meth:`start` or the previous step.
            mask: ``[B, 1, S]``: boolean, True = may attend, or the lab's 0/1 floats (``mask == 0`` masked);
                by default the state's ``source_mask``.

        Returns:
            ``(next point [B, 1, F], the new state, this step's weights [B, 1, 1, S])``.
        """
        assert state.keys is not None and state.values is not None
        if mask is None:
            mask = state.source_mask
        out, hidden = self.basic_rnn(X, state.hidden)  # [B, L, D], [1, B, D]
        query = out[:, -1:]  # [B, 1, D]
        context, weights = self.attn.attend_projected(query, state.keys, state.values, mask)  # [B, 1, D]
        concatenated = torch.cat([context, query], dim=-1)  # [B, 1, 2 * D]
        return self.regression(concatenated), state._replace(hidden=hidden), weights  # [B, 1, F]

    def init_hidden(self, hidden_seq: Tensor) -> None:
        """Take the encoder's states ``[B, S, D]`` as keys and values, and its last one as the state.

        The lab's stateful use: see :meth:`start`.
        """
        state = self.start(hidden_seq)
        self.attn.keys, self.attn.proj_keys, self.attn.values = hidden_seq, state.keys, state.values
        self.hidden = state.hidden
        self._step_weights = []

    def keep(self, hidden_seq: Tensor, state: DecoderState, weights: list[Tensor]) -> None:
        """Keep a finished decoding as the lab's attributes: ``hidden``, ``attn``'s keys and weights.

        Args:
            hidden_seq: the encoder's states ``[B, S, D]``.
            state: the state after the last step.
            weights: every step's weights, ``[B, 1, 1, S]`` each.
        """
        self.hidden = state.hidden
        self.attn.keys, self.attn.proj_keys, self.attn.values = hidden_seq, state.keys, state.values
        self._step_weights = list(weights)
        self.attn.keep_weights(weights[-1])  # alphas: the last step's [B, 1, S]
        # From the call's own list: another thread may have replaced _step_weights meanwhile.
        self._keep_steps(torch.cat(weights, dim=2))  # T x [B, 1, 1, S] -> [B, 1, T, S]

    def _keep_steps(self, stacked: Tensor) -> None:
        """Every step's weights ``[B, 1, t, S]`` as ``attn.attn_weights``, and recorded."""
        self.attn.attn_weights = stacked
        record(self.attn, stacked)

    def forward(self, X: Tensor, mask: Tensor | None = None) -> Tensor:
        """One decoding step (the lab's stateful use: call :meth:`init_hidden` first).

        Args:
            X: ``[B, L, F]`` (usually ``L = 1``): the previous point.
            mask: ``[B, 1, S]``: boolean, True = may attend (e.g. ``attnlab.attention.padding_mask``),
                or the lab's 0/1 floats (``mask == 0`` is masked).

        Returns:
            The next point ``[B, 1, F]``.

        Raises:
            RuntimeError: before :meth:`init_hidden`.
        """
        check_sequence("X", X, self.n_features, self._dtype())
        if self.attn.proj_keys is None or self.attn.values is None:
            raise RuntimeError("no keys: call init_hidden(hidden_seq) first")
        state = DecoderState(self.hidden, self.attn.proj_keys, self.attn.values)  # type: ignore[arg-type]
        out, state, weights = self.step(X, state, mask)
        assert weights is not None
        self.hidden = state.hidden
        self.attn.keep_weights(weights)  # [B, 1, 1, S]; alphas [B, 1, S]
        # Stack this step's weights under the previous ones: [B, 1, t, S].
        self._step_weights.append(weights)
        self._keep_steps(torch.cat(self._step_weights, dim=2))  # t x [B, 1, 1, S] -> [B, 1, t, S]
        return out
