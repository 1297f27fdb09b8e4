"""The attention lab's GRU encoder-decoder, with and without attention: its parts and the models.

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

The parts (:class:`Encoder`, :class:`Decoder`, :class:`DecoderAttn`) come first and
can be driven two ways:

* the lab's, stateful: ``decoder.init_hidden(states)``, then ``decoder(x)`` once
  per step; the running state lives on the module (``hidden``, the attention's
  keys), so one caller at a time;
* the functional one, which the models use: ``state = decoder.start(states)``,
  then ``out, state, weights = decoder.step(x, state)``; the state is a
  :class:`DecoderState` that belongs to the call, so any number of threads can
  decode with one decoder at once. Both compute the same numbers.

Lab fidelity: the classes keep the attention lab's names, constructor signatures,
attributes (``hidden``, ``basic_rnn``, ``regression``, ``attn``, ``outputs``,
``alphas``, ``init_hidden``, ``init_outputs``, ``store_output``) and parameter
creation order, so after ``torch.manual_seed(k)`` they print the lab's numbers.
The teacher-forcing coin is the lab's ``torch.rand(1) <= prob``, drawn at every
step of ``forward`` (in eval mode too), so a seeded run consumes torch's random
numbers exactly as the lab does. Fixed: teacher forcing can never happen in eval
mode (the lab's ``rand <= 0`` could, in principle, pick a target that does not
exist), outputs are allocated on the input's device and dtype, and arguments are validated.

Concurrency: the decoding state (hidden states, keys, weights, outputs) is kept
in the call, so ``forward`` from several threads computes the right outputs; it
also leaves the lab's attributes (``outputs``, ``alphas``, the parts' ``hidden``)
behind, which are the last caller's. :meth:`EncoderDecoder.predict` is the
prediction path: no attributes written, and no coin drawn, so it touches no
random stream at all.

Shape notation: ``B`` batch, ``S`` source length, ``T`` target length, ``L`` steps
fed at once (usually 1), ``F`` features, ``D`` hidden dim (the GRU width).
"""

from __future__ import annotations

from typing import Any, NamedTuple, cast

import torch
from torch import Tensor, nn

from attnlab._validate import check_finite_float, check_input_dtype, check_int
from attnlab.attention.lab.single_head import Attention
from attnlab.attention.recording import is_recording, record
from attnlab.models.labs.source_padding import check_source_mask, last_steps, zero_padding

__all__ = ["Decoder", "DecoderAttn", "DecoderState", "Encoder", "EncoderDecoder", "EncoderDecoderAttn"]


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
                caller (:func:`attnlab.models.labs.source_padding.check_source_mask`): the
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
                caller (:func:`attnlab.models.labs.source_padding.check_source_mask`): the
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



class _Run(NamedTuple):
    """One decoding, as the call keeps it."""

    outputs: Tensor  # [B, T, F]
    weights: list[Tensor]  # every step's attention weights [B, 1, 1, S]; empty without attention
    hidden_seq: Tensor | None  # the encoder's states [B, S, D] (None for the lab's own parts)
    encoder_hidden: Tensor | None  # [1, B, D]
    state: DecoderState | None  # after the last step


def _check_teacher_forcing_prob(value: float) -> float:
    value = check_finite_float("teacher_forcing_prob", value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"teacher_forcing_prob must be in [0, 1], got {value}")
    return value


class EncoderDecoder(nn.Module):
    """Encoder plus step-by-step decoder, with teacher forcing while training.

    Args:
        encoder: an :class:`Encoder` (or the lab's: anything with ``n_features``
            returning ``[B, S, D]``).
        decoder: a :class:`Decoder` or :class:`DecoderAttn` (or the lab's:
            ``init_hidden``, then one ``[B, 1, F]`` step per call, its state on the module).
        input_len: ``S``, source steps at the start of ``X``.
        target_len: ``T``, steps to generate.
        teacher_forcing_prob: chance, at each step while training, that the next
            input is the true point instead of the prediction. Never used in eval mode.

    Attributes:
        outputs: the predictions ``[B, T, F]`` of the last ``forward`` (the last caller's).

    Shapes:
        ``forward(X [B, S + T, F]) -> [B, T, F]``. In eval mode (or with
        ``teacher_forcing_prob=0``) ``X`` may hold the source alone, ``[B, S, F]``.
        ``predict(source_seq [B, S, F]) -> [B, T, F]``: thread-safe, draws nothing.

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

    def _check(self, X: Any, needed: int) -> None:
        """``X [B, L, F]`` of the weights' dtype, with at least ``needed`` steps."""
        weights = next(self.encoder.parameters(), None)
        check_sequence("X", X, self.encoder.n_features, None if weights is None else weights.dtype)
        if X.shape[1] < needed:
            teacher = f" plus target_len={self.target_len} for teacher forcing" if needed > self.input_len else ""
            raise ValueError(f"X has {X.shape[1]} steps but needs {needed}: input_len={self.input_len}{teacher}")

    def forward(self, X: Tensor, source_mask: Tensor | None = None) -> Tensor:
        """Encode ``X[:, :S]`` and generate ``T`` steps (the attention lab's forward).

        Draws the teacher-forcing coin at every step, in eval mode too, as the lab
        does, and keeps the lab's attributes (``outputs``; ``alphas``; the parts'
        ``hidden`` and keys): those are the last caller's. To predict, from any
        number of threads and without touching the random stream, use :meth:`predict`.

        Args:
            X: ``[B, S + T, F]`` (source then target), or ``[B, S, F]`` when no
                teacher forcing can happen (eval mode, or probability 0).
            source_mask: bool ``[B, 1, S]`` (or 0/1 floats) of a right-padded source,
                True on the real steps: the encoder's state after each row's last real
                step starts the decoder, whose first input is that step's point, and
                attention never looks at the padding. attnlab's parts only.

        Returns:
            The predictions ``[B, T, F]`` (also kept in ``outputs``).

        Raises:
            ValueError: if ``X`` is not ``[B, L, F]`` or is too short for its use, or
                ``source_mask`` does not fit it, is not right padding, or comes with the lab's own parts.
            TypeError: if ``X`` is not a tensor of the model's dtype.
        """
        prob = self.teacher_forcing_prob if self.training else 0.0
        self._check(X, self.input_len + (self.target_len if prob > 0 else 0))
        source = X[:, : self.input_len]  # [B, S, F]
        source_mask = check_source_mask(source_mask, source, right_padded=True)
        source = zero_padding(source, source_mask)  # [B, S, F]
        run = self._run(source, X[:, self.input_len :], prob, coins=True, source_mask=source_mask)
        if run.state is not None:  # attnlab's parts: the lab's attributes, set once, at the end
            assert run.hidden_seq is not None
            self.encoder.hidden = run.encoder_hidden
            self.decoder.keep(run.hidden_seq, run.state, run.weights)
            self._keep(run)
        return run.outputs

    def predict(self, source_seq: Tensor, source_mask: Tensor | None = None) -> Tensor:
        """Greedy prediction of the ``T`` points after ``source_seq``: eval-mode ``forward``, without side effects.

        No teacher forcing, no coin drawn (torch's random stream is left alone), no
        graph, and the decoding state kept in the call, not on the modules, so any
        number of threads can predict with one model at once. Inside :func:`attnlab.attention.record_attention`
        the attention weights ``[B, 1, T, S]`` are recorded for
        :func:`attnlab.attention.collect_attention` (as ``decoder.attn``), and kept
        as the attention modules do (``decoder.attn.attn_weights``, ``alphas``) for
        the labs' readers after the block: those are the last caller's.

        Args:
            source_seq: ``[B, S, F]`` (longer is fine: only the first ``S`` steps are read).
            source_mask: bool ``[B, 1, S]`` of a right-padded source, as :meth:`forward`.

        Returns:
            The predictions ``[B, T, F]``.

        Raises:
            ValueError / TypeError: naming ``X`` or ``source_mask``, as :meth:`forward` in eval mode.
        """
        self._check(source_seq, self.input_len)
        source = source_seq[:, : self.input_len]  # [B, S, F]
        source_mask = check_source_mask(source_mask, source, right_padded=True)
        source = zero_padding(source, source_mask)  # [B, S, F]
        with torch.no_grad():
            run = self._run(source, source_seq[:, :0], 0.0, coins=False, source_mask=source_mask)
        if run.weights and is_recording():
            self._record(torch.cat(run.weights, dim=2))  # T x [B, 1, 1, S] -> [B, 1, T, S]
        return run.outputs

    def _record(self, weights: Tensor) -> None:
        """Record ``weights [B, 1, T, S]`` for this context's block, and as ``decoder.attn.attn_weights``.

        The attribute is for the labs' readers after the block, as every attention module keeps its own.
        """
        attn = self.decoder.attn
        attn.attn_weights = weights
        record(attn, weights)

    def _keep(self, run: _Run) -> None:
        """Keep the lab's attributes of a finished run: ``outputs [B, T, F]``."""
        self.outputs = run.outputs

    def _run(self, source_seq: Tensor, target_seq: Tensor, prob: float, *, coins: bool,
             source_mask: Tensor | None) -> _Run:
        """Decode ``T`` steps from ``source_seq [B, S, F]`` (right-padded under a checked ``source_mask``).

        The state stays in the call. ``target_seq [B, T, F]`` is fed back with probability ``prob`` per step;
        ``coins`` draws the lab's ``torch.rand(1)`` at every step (the lab's forward).
        Parts without ``encode``/``start``/``step`` (the lab's own classes) are run
        the lab's way, their state on the modules.
        """
        if not all(callable(getattr(part, name, None))
                   for part, name in ((self.encoder, "encode"), (self.decoder, "start"), (self.decoder, "step"))):
            if source_mask is not None:
                raise ValueError("source_mask: the lab's own encoder and decoder take no source mask; "
                                 "build the model from attnlab's Encoder and Decoder/DecoderAttn")
            return self._run_stateful(source_seq, target_seq, prob, coins=coins)
        hidden_seq, encoder_hidden = self.encoder.encode(source_seq)  # [B, S, D], [1, B, D]
        state = self.decoder.start(hidden_seq, source_mask)
        if source_mask is not None:
            encoder_hidden = state.hidden  # after the last real step, not after the padding
        # The last (real) source point is the first input of the decoder.
        dec_inputs = last_steps(source_seq, source_mask)  # [B, 1, F]
        outputs, weights = [], []
        for i in range(self.target_len):
            out, state, step_weights = self.decoder.step(dec_inputs, state)  # [B, 1, F], ..., [B, 1, 1, S]
            outputs.append(out)
            if step_weights is not None:
                weights.append(step_weights)
            dec_inputs = self._next_input(i, out, target_seq, prob, coins=coins)
        return _Run(torch.cat(outputs, dim=1), weights, hidden_seq, encoder_hidden, state)  # outputs [B, T, F]

    def _run_stateful(self, source_seq: Tensor, target_seq: Tensor, prob: float, *, coins: bool) -> _Run:
        """The lab's loop (``init_hidden``, one ``decoder(x)`` per step, ``store_output``), for the lab's own parts."""
        self.init_outputs(source_seq.shape[0], device=source_seq.device, dtype=source_seq.dtype)
        hidden_seq = self.encoder(source_seq)  # [B, S, D]
        self.decoder.init_hidden(hidden_seq)
        dec_inputs = source_seq[:, -1:]  # [B, 1, F]
        for i in range(self.target_len):
            out = self.decoder(dec_inputs)  # [B, 1, F]
            self.store_output(i, out)
            dec_inputs = self._next_input(i, out, target_seq, prob, coins=coins)
        assert self.outputs is not None
        return _Run(self.outputs, [], None, None, None)

    @staticmethod
    def _next_input(i: int, out: Tensor, target_seq: Tensor, prob: float, *, coins: bool) -> Tensor:
        """The decoder's next input: the true point ``target_seq[:, i]`` (teacher forcing) or ``out [B, 1, F]``."""
        if not coins:
            return out
        # Drawn at every step, eval mode included, to use torch's RNG as the attention lab does.
        coin = torch.rand(1)
        if prob > 0 and bool(coin <= prob):
            return target_seq[:, i : i + 1]  # teacher forcing: the true point [B, 1, F]
        return out


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

    def _keep(self, run: _Run) -> None:
        """Keep ``outputs [B, T, F]`` and ``alphas [B, T, S]`` of a finished run."""
        super()._keep(run)
        if run.weights:
            self.alphas = torch.cat(run.weights, dim=2)[:, 0]  # T x [B, 1, 1, S] -> [B, 1, T, S] -> [B, T, S]

    def _record(self, weights: Tensor) -> None:
        """Record ``weights [B, 1, T, S]``; ``alphas [B, T, S]`` too, for the labs' readers after the block."""
        super()._record(weights)
        self.alphas = weights[:, 0]  # [B, T, S]
