"""What attnlab's sequence models share: tokens or values in and out, the positional encoding, decoding.

:class:`SequenceModel` is the base of :class:`attnlab.models.Transformer`,
:class:`attnlab.models.DecoderOnlyTransformer` and :class:`attnlab.models.EncoderOnlyTransformer`:
the input ``embed``, the output ``head``, the ``position=`` a model is given (a name,
``"module:Class"``, a class or a factory: :mod:`attnlab.encodings.registry`), resolved once and
built into the absolute table or each self-attention's scheme, the checks of the inputs and
greedy decoding with or without a cache.
:func:`sequence_model_class` gives the subclass of an architecture.

Positions come from the indices by default, or from the data: ``position_ids [B, L]``
(a left-padded batch: :func:`attnlab.encodings.positions.positions_from_mask`; a
task whose positions come from its structure, Abacus digit indices) reach the
absolute table and every self-attention's scheme alike, and greedy decoding
continues each row from its own last position.

Shape notation: ``B`` batch, ``L`` length, ``D`` model dim, ``V`` vocabulary, ``F`` features.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import torch
from torch import Tensor, nn

from attnlab._limits import check_memory, check_tensor
from attnlab._validate import check_choice, check_device, check_input_dtype, check_int, check_probability
from attnlab.attention.backends.choose import BACKENDS
from attnlab.encodings.positions import check_position_ids
from attnlab.encodings.registry import Position, build_scheme, build_table, check_table_output, resolve, spec_name
from attnlab.encodings.scheme import ModelSizes, PositionScheme

if TYPE_CHECKING:  # annotations only: the cache's module is imported where decoding makes one
    from attnlab.attention import DecodingCache

__all__ = ["ARCHITECTURE_MODELS", "SequenceModel", "sequence_model_class"]


class SequenceModel(nn.Module):
    """What every model of the lab shares: tokens or values in and out, the absolute encoding, checks.

    Not used on its own: :class:`Transformer` (encoder-decoder) and
    :class:`attnlab.models.DecoderOnlyTransformer` take its constructor (the one
    signature of both) and add their layers in ``_build_layers``. It
    holds the input ``embed`` (an ``nn.Embedding`` for tokens, an ``nn.Linear``
    for values), the output ``head``, the absolute ``input_position`` table (for
    ``"sinusoidal"`` / ``"learned"``; None otherwise) and the validated sizes.
    See :class:`Transformer` for the arguments.

    Raises:
        TypeError / ValueError: naming the argument, for bad sizes, an unknown
            ``position``, or neither / both of ``vocab_size`` and ``n_features``;
            a TypeError naming ``position=`` for the keyword ``encoding=``.

    Compiled (``torch.compile(model, fullgraph=True, dynamic=True)``) or exported (``torch.export``),
    the checks of the inputs' values (ids in the vocabulary, positions >= 0) run inside the graph and
    raise a RuntimeError naming the argument; their checks of types and shapes are as uncompiled.
    """

    def __init__(
        self,
        *,
        vocab_size: int | None = None,
        n_features: int | None = None,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        ff_units: int | None = None,
        dropout: float = 0.0,
        position: Position = "sinusoidal",
        max_len: int = 128,
        max_relative_position: int = 16,
        pad_id: int = 0,
        backend: str = "auto",
        **unknown: NoReturn,  # NoReturn: a type checker refuses any other keyword, as it would without this
    ) -> None:
        if unknown:
            raise TypeError(_unknown_keywords(type(self).__name__, unknown))
        super().__init__()
        if (vocab_size is None) == (n_features is None):
            raise ValueError(
                f"give exactly one of vocab_size (tokens) and n_features (real values), "
                f"got vocab_size={vocab_size!r}, n_features={n_features!r}"
            )
        self.vocab_size = None if vocab_size is None else check_int("vocab_size", vocab_size, minimum=2)
        self.n_features = None if n_features is None else check_int("n_features", n_features, minimum=1)
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.n_heads = check_int("n_heads", n_heads, minimum=1)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.head_dim = self.d_model // self.n_heads  # Dh, derived here once: the layers are given it
        self.n_layers = check_int("n_layers", n_layers, minimum=1)
        self.ff_units = 4 * self.d_model if ff_units is None else check_int("ff_units", ff_units, minimum=1)
        self.dropout = check_probability("dropout", dropout)
        self.position = position
        # Resolved once, before anything is built (an unknown name, a module that does not import are
        # refused here); the table and every layer's scheme are built from it.
        self._resolved = resolve(position)
        self.backend = check_choice("backend", backend, BACKENDS)
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.max_relative_position = check_int("max_relative_position", max_relative_position, minimum=1)
        self.pad_id = check_int("pad_id", pad_id, minimum=0)
        self._check_memory()

        if self.vocab_size is not None:
            self.embed: nn.Module = nn.Embedding(self.vocab_size, self.d_model)
            self.head = nn.Linear(self.d_model, self.vocab_size)
        else:
            assert self.n_features is not None
            self.embed = nn.Linear(self.n_features, self.d_model)
            self.head = nn.Linear(self.d_model, self.n_features)
        # Absolute encodings are added to the embeddings; one table serves every input.
        self.input_position: nn.Module | None = build_table(self._resolved, d_model=self.d_model,
                                                            max_len=self.max_len)
        self.input_dropout = nn.Dropout(self.dropout)
        # The subclass's layers, after the shared parts: the parameter creation order
        # (and so the weights a seed gives) is embed, head, tables, then the layers, each
        # layer's scheme before its own weights. A scheme shared across layers (T5's one
        # table) is built with the first layer of its stack, where that layer's own would be.
        self._shared_positions: dict[bool, PositionScheme] = {}  # causal -> the stack's shared scheme
        self._build_layers()
        del self._shared_positions  # only while the layers are built: the layers hold the schemes

    def _check_memory(self) -> None:
        """Refuse, before any weight is made, sizes whose weights cannot fit (naming them).

        The vocabulary's embedding and output layer (or the features' projections), then the
        layers: at least a self-attention's four ``D x D`` projections and the feed-forward
        network's ``D x F`` and ``F x D`` per layer. The position tables check their own.
        """
        if self.vocab_size is not None:
            check_tensor({"vocab_size": self.vocab_size, "d_model": self.d_model},
                         "the embedding and the output layer", copies=2)
        else:
            assert self.n_features is not None
            check_tensor({"n_features": self.n_features, "d_model": self.d_model},
                         "the input and the output layer", copies=2)
        D, F = self.d_model, self.ff_units
        check_memory(f"d_model {D} x n_layers {self.n_layers} (ff_units {F}): the layers' parameters",
                     self.n_layers * (4 * D * D + 2 * D * F) * 4)

    def _caches(self, use_cache: bool) -> bool:
        """Whether greedy decoding keeps a cache: asked for, and every module can (randomized ones cannot)."""
        return use_cache and all(getattr(m, "caches", True) for m in self.modules())

    def _check_decoding(self, *, batch: int, prompt: int, steps: int, use_cache: bool) -> None:
        """Refuse ``steps`` whose decoding cannot fit, before anything is made for it (naming ``steps``).

        With a cache, every layer keeps the keys and values of all ``P + steps`` positions
        (``[B, P + steps, D]`` twice); without one (the randomized schemes), the last step
        re-runs the whole sequence, whose scores are ``[B, H, P + steps, P + steps]``. A
        ``steps`` that fits but is long is only slow: each step is one call, and Ctrl-C stops it.
        """
        B, total = batch, prompt + steps
        if self._caches(use_cache):
            what, n_bytes = "the decoding cache", self.n_layers * 2 * B * total * self.d_model * 4
        else:
            what, n_bytes = "the last step's scores (no cache)", B * self.n_heads * total * total * 4
        # The message made only to refuse: traced by torch.compile, formatting the batch would fix it.
        check_memory(lambda: f"steps {steps}: {what} over {total:,} positions (batch {B})", n_bytes)

    def _build_layers(self) -> None:
        """Create the model's layers (each subclass its own); called once, at the end of ``__init__``."""
        raise NotImplementedError(f"{type(self).__name__} must define _build_layers")

    def _attention_position(self, causal: bool) -> PositionScheme | None:
        """The scheme for one self-attention of a stack (``causal``: a decoder's; None for the absolute encodings).

        A new one per call, except for a scheme that declares ``shared_across_layers``
        (:class:`attnlab.encodings.t5.SharedT5RelativeBias`): the first call of a stack builds
        it and every later call of the same stack returns that same module, so its parameters
        are one set, trained by every layer. An encoder-decoder's two stacks get one each, as
        T5's encoder and decoder each have their own table.
        """
        shared = self._shared_positions.get(causal)
        if shared is not None:
            return shared
        sizes = ModelSizes(n_heads=self.n_heads, head_dim=self.head_dim, d_model=self.d_model, causal=causal,
                           max_len=self.max_len, max_relative_position=self.max_relative_position)
        scheme = build_scheme(self._resolved, sizes, name=self.position)
        if scheme is not None and getattr(scheme, "shared_across_layers", False):
            self._shared_positions[causal] = scheme
        return scheme

    def _layer(self, cls: type[nn.Module], causal: bool) -> nn.Module:
        return cls(self.d_model, self.n_heads, self.ff_units, dropout=self.dropout,
                   position=self._attention_position(causal), head_dim=self.head_dim, backend=self.backend)

    @property
    def task_positions(self) -> str | None:
        """The rule by which the task gives this model its positions (``"abacus"``, ``"coupling"``), or None.

        An input encoding that numbers tokens by the task's structure (Abacus, position coupling)
        declares it; a model with any other encoding reads positions ``0 .. L-1`` itself.
        """
        return getattr(self.input_position, "task_positions", None)

    @property
    def position_name(self) -> str:
        """``position`` as a name another process can rebuild it from (``"alibi"``, ``"pkg.mod:Class"``)."""
        return spec_name(self.position)

    # -- pieces ------------------------------------------------------------------------

    def _check(self, name: str, x: Any) -> None:
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(x).__name__}")
        if self.vocab_size is not None:
            if x.dim() != 2 or x.dtype not in (torch.int64, torch.int32):
                raise ValueError(f"{name} must be token ids [B, L] (int64), got {x.dtype} {list(x.shape)}")
            if torch.compiler.is_compiling():
                # Reading the ids' range back would break the graph (torch.compile) or fail (torch.export):
                # traced, the check runs inside the graph and raises a RuntimeError where it would have.
                torch._assert_async(((x >= 0) & (x < self.vocab_size)).all(),
                                    f"{name} holds ids outside the vocabulary 0..{self.vocab_size - 1}")
            elif x.numel() and (int(x.min()) < 0 or int(x.max()) >= self.vocab_size):
                raise ValueError(
                    f"{name} holds ids from {int(x.min())} to {int(x.max())}; "
                    f"the vocabulary is 0..{self.vocab_size - 1}"
                )
        elif x.dim() != 3 or x.shape[-1] != self.n_features:
            raise ValueError(f"{name} must be floating [B, L, {self.n_features}], got {x.dtype} {list(x.shape)}")
        else:
            check_input_dtype(name, x, self.head.weight.dtype)  # integers too: a TypeError naming both dtypes
        if x.shape[1] == 0:
            raise ValueError(f"{name} is empty (length 0)")

    def _position_ids(self, name: str, position_ids: Any, x: Tensor) -> Tensor | None:
        """``position_ids`` for the elements of ``x [B, L]`` (or ``[B, L, F]``): checked once, ``[B, L]`` int64."""
        if position_ids is None:
            return None
        B, L = x.shape[0], x.shape[1]
        check_device(name, position_ids, x.device)
        return check_position_ids(position_ids, batch=B, length=L, name=name).expand(B, L)

    def _padding(self, name: str, mask: Any, batch: int, length: int, *, device: torch.device) -> Tensor | None:
        """A padding mask checked once: boolean ``[B, L]``, True on the real elements (or None), on ``device``."""
        if mask is None:
            return None
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
            raise TypeError(f"{name} must be a boolean tensor [B, L] (True = a real element, False = padding), "
                            f"got {getattr(mask, 'dtype', type(mask).__name__)}")
        if list(mask.shape) != [batch, length]:
            raise ValueError(f"{name} must be [B, L] = [{batch}, {length}], got shape {list(mask.shape)}")
        check_device(name, mask, device)
        return mask

    def _embed(self, x: Tensor, offset: int = 0, *, position_ids: Tensor | None = None) -> Tensor:
        """Tokens ``[B, L]`` or values ``[B, L, F]`` -> ``[B, L, D]``, with the absolute encoding if any.

        ``position_ids [B, L]`` (checked by the caller) place the elements instead of ``offset``.
        """
        h = self.embed(x)  # [B, L, D]
        if self.input_position is not None:
            if position_ids is None:  # a table written without position ids still serves the default
                out = self.input_position(h, offset=offset)  # [B, L, D]
            else:
                out = self.input_position(h, offset=offset, position_ids=position_ids)  # [B, L, D]
            h = check_table_output(self.input_position, h, out)
        return self.input_dropout(h)

    def _greedy(
        self, first: Tensor, steps: int,
        run: Callable[[Tensor, DecodingCache | None, Tensor | None, Tensor | None], Tensor], use_cache: bool,
        *, position_ids: Tensor | None = None, mask: Tensor | None = None,
    ) -> Tensor:
        """Greedy decoding: feed ``first`` (one step, or a whole prompt), then each output back, ``steps`` times.

        ``run(inputs, cache, position_ids, mask)`` gives the outputs for ``inputs`` (the new
        steps with a cache, the whole prefix without one), given their columns of
        ``position_ids [B, P + steps]`` and of the padding ``mask [B, P + steps]`` (None: the
        indices, no padding). Returns ``[B, steps]`` tokens or ``[B, steps, F]`` values.
        """

        def columns(t: Tensor | None, start: int, stop: int) -> Tensor | None:
            return None if t is None else t[:, start:stop]

        outputs = []
        # Randomized positions are drawn anew at every call: cached keys would hold other draws
        # than the new step's, so such a model re-runs the whole sequence at each step.
        use_cache = self._caches(use_cache)
        if use_cache:
            from attnlab.attention import DecodingCache

            cache = DecodingCache(capacity=first.shape[1] + steps)
            step = first
            for _ in range(steps):
                start, stop = cache.position, cache.position + step.shape[1]
                out = run(step, cache, columns(position_ids, start, stop), columns(mask, start, stop))[:, -1:]
                cache.advance(step.shape[1])  # [B, 1, V] or [B, 1, F] above
                step = out.argmax(-1) if self.vocab_size is not None else out  # [B, 1] or [B, 1, F]
                outputs.append(step)
        else:
            inputs = first
            for _ in range(steps):
                L = inputs.shape[1]
                out = run(inputs, None, columns(position_ids, 0, L), columns(mask, 0, L))[:, -1:]  # the newest step
                step = out.argmax(-1) if self.vocab_size is not None else out
                outputs.append(step)
                inputs = torch.cat([inputs, step], dim=1)
        return torch.cat(outputs, dim=1)  # [B, steps] or [B, steps, F]

    def extra_repr(self) -> str:
        kind = f"vocab_size={self.vocab_size}" if self.vocab_size is not None else f"n_features={self.n_features}"
        try:
            position = self.position if isinstance(self.position, str) else spec_name(self.position)
        except TypeError:  # a factory, or a class another process could not import: its own name
            position = getattr(self.position, "__name__", "factory")
        return (f"{kind}, position={position!r}, d_model={self.d_model}, n_heads={self.n_heads}, "
                f"n_layers={self.n_layers}")


def _unknown_keywords(model: str, unknown: dict[str, Any]) -> str:
    """The message for keywords a model does not take; for ``encoding=`` it names ``position=``."""
    name = next(iter(unknown))
    if name == "encoding":
        return (f"{model}() got an unexpected keyword argument 'encoding': the positional scheme is position= "
                "(a name, 'module:Class', a scheme class or a factory)")
    return f"{model}() got an unexpected keyword argument {name!r}"


#: the sequence model of each architecture a task is laid out for (:data:`attnlab.data.tasks.task.ARCHITECTURES`),
#: as ``"module:Class"``: imported on first use, since each subclasses :class:`SequenceModel`
ARCHITECTURE_MODELS = {"decoder-only": "attnlab.models.decoder_only:DecoderOnlyTransformer",
                       "encoder-decoder": "attnlab.models.transformer:Transformer",
                       "encoder-only": "attnlab.models.encoder_only:EncoderOnlyTransformer"}


def sequence_model_class(architecture: str) -> type[SequenceModel]:
    """The model class of one of :data:`attnlab.data.tasks.task.ARCHITECTURES`; its constructor takes the sizes.

    ``"decoder-only"`` is :class:`~attnlab.models.DecoderOnlyTransformer`, ``"encoder-decoder"``
    :class:`~attnlab.models.Transformer`, ``"encoder-only"``
    :class:`~attnlab.models.EncoderOnlyTransformer`; all take the keyword-only arguments of
    :class:`SequenceModel` (``vocab_size`` or ``n_features``, ``d_model``, ``n_heads``,
    ``n_layers``, ``ff_units``, ``dropout``, ``position``, ``max_len``, ``max_relative_position``,
    ``pad_id``) and check them. Builders only build: seeding the initial weights is the caller's.

    Raises:
        ValueError: for an unknown ``architecture`` (naming the known ones).
    """
    from attnlab.data.tasks.task import ARCHITECTURES  # here: a model is built without the data's code

    module, name = ARCHITECTURE_MODELS[check_choice("architecture", architecture, ARCHITECTURES)].split(":")
    model_class: type[SequenceModel] = getattr(importlib.import_module(module), name)
    return model_class
