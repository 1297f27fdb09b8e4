"""Many models of one shape as one batched computation: :class:`ModelGroup`.

The length lab trains hundreds of small models (seeds x learning rates per encoding).
One model per process leaves a GPU idle (a width-64 model is bound by kernel launches)
and spends a fifth to a third of a CPU step on per-operator overhead. A group of ``G``
members of one class, sizes and encoding runs as one computation instead: the members'
parameters are stacked on a leading dimension ``G``, every matmul is one batched matmul
over the members (``torch.baddbmm`` over ``[G, B*L, F]``), attention runs over
``[G*B, H, T, S]``, and each member's position terms (its own T5 table, FIRE MLP,
learned table, randomized draws) are built from its own parameters and stacked once per
forward. A group is the unit a worker, a Ray task or a GPU takes; it trains through
:mod:`attnlab.training.grouped` (:func:`~attnlab.training.grouped.train_group`).

Equal to each member alone. Each member is built exactly as it would be alone
(:meth:`ModelGroup.build`: ``torch.manual_seed(seed)``, then the model), and its outputs
and gradients are its own: in float64 a member's parameters after training equal the
alone run's to rounding (``tests/models/test_grouped.py``). In float32 on the CPU the
batched matmuls (``baddbmm`` over the members), the attention over ``[G*B, ...]``, the
embedding and their gradients give one model's numbers bit for bit; the layer norms run
member by member (``F.layer_norm`` with the member's own weight and bias) because the fused
kernel's gradient of the weight and bias sums in another order than a separate product's would.

Randomness. A randomized scheme (Ruoss et al. 2023) draws positions from torch's global
generator at every call, in each layer, and dropout draws its masks from it. A group gives
each member its own stream (a CPU ``torch.Generator`` holding the global state the member
left after it was built, which is where training alone begins) and runs that member's draws
on it, in the order the member alone makes them: its positions, and in training its dropout
masks (after the embeddings, on the attention weights, on the feed-forward network's hidden
layer, on both residual branches), each drawn with ``F.dropout`` on the member's own
activations at its own length, as alone. The draws are then the alone run's. On an
accelerator, dropout draws from the device's generator, member after member: each member's
masks are its own, but not those it would draw alone.

Members of different lengths. Members may be given batches of different lengths at one
step (Ruoss et al.'s protocol draws a length per step from each seed's stream): the group
pads each to the longest with ``pad_id`` (keys that an encoder masks, and that a causal
decoder never sees before its own positions), tells the parts that draw each member's own
length, and scores each member on its own columns.

Shape notation: ``G`` members, ``B`` batch, ``L`` length, ``T`` queries, ``S`` keys, ``D``
model dim, ``H`` heads, ``Dh`` head dim, ``F`` features, ``V`` vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, vmap

from attnlab._finite import bounded_pair
from attnlab._validate import check_int
from attnlab.attention.backends.choose import may_attend
from attnlab.attention.functional import attend_unchecked, drop_unseen_keys
from attnlab.encodings.registry import check_table_output, draws_positions
from attnlab.models.decoder_only import DecoderOnlyTransformer
from attnlab.models.encoder_only import EncoderOnlyTransformer
from attnlab.models.sequence_model import SequenceModel

__all__ = ["GROUPABLE", "ModelGroup"]

#: the model classes a group is made of (their forward is written here, batched over the members).
GROUPABLE: tuple[type[SequenceModel], ...] = (EncoderOnlyTransformer, DecoderOnlyTransformer)

#: what must be equal for members to be one computation (the constructor's settings).
_SHAPE = ("vocab_size", "n_features", "d_model", "n_heads", "head_dim", "n_layers", "ff_units", "max_len",
          "max_relative_position", "pad_id", "dropout")


class _Method(nn.Module):
    """Calls one method of a module, so that :func:`torch.func.functional_call` can run it on other parameters."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return getattr(self.module, method)(*args, **kwargs)


@contextmanager
def _stream(generator: torch.Generator) -> Iterator[None]:
    """Run the block with torch's global CPU generator in ``generator``'s state, and keep where it got to.

    The randomized schemes draw from the global generator (:func:`attnlab.encodings.draws.sample_positions`,
    always on the CPU); this gives each member its own stream without touching their code.
    """
    saved = torch.get_rng_state()
    torch.set_rng_state(generator.get_state())
    try:
        yield
    finally:
        generator.set_state(torch.get_rng_state())
        torch.set_rng_state(saved)


_Cut = Callable[[tuple[Tensor, ...], dict[str, Tensor | None], int], tuple[tuple[Tensor, ...], dict[str, Any]]]
_Mend = Callable[[Any, tuple[Tensor, ...], int], Any]


def _to_members(t: Tensor, G: int, B: int) -> Tensor:
    """A stacked per-member result ``[G, B|1, ...]`` as the grouped batch ``[G*B, ...]``."""
    if t.shape[1] != B:
        t = t.expand(G, B, *t.shape[2:])
    return t.reshape(G * B, *t.shape[2:])


class _Part:
    """One position module (an input table or a layer's scheme) of every member, run on each one's parameters.

    How, decided once: ``"shared"`` when it has no parameters, draws nothing and holds equal buffers
    in every member (one call on the whole grouped batch); ``"vmap"`` when it has parameters and
    draws nothing (one :func:`torch.func.vmap` over the members' stacked parameters);
    ``"loop"`` when it draws (each member's own module, on its own stream, at its own length).
    """

    def __init__(self, group: ModelGroup, path: str, modules: list[nn.Module], draws: bool) -> None:
        self.group, self.path = group, path
        self.modules = modules
        self.names = [name for name, _ in modules[0].named_parameters()]
        self.calls = [_Method(m) for m in modules]
        self.draws = draws
        buffers_equal = all(
            torch.equal(a, b) for m in modules[1:]
            for a, b in zip(modules[0].buffers(), m.buffers(), strict=True))
        if draws or not buffers_equal:
            self.mode = "loop"
        elif self.names:
            self.mode = "vmap"
        else:
            self.mode = "shared"
        # What a layer's scheme declares (an input table declares nothing).
        first = modules[0]
        self.rotates = bool(getattr(first, "rotates", False))
        self.adds_score = bool(getattr(first, "adds_score", False))
        self.adds_value = bool(getattr(first, "adds_value", False))
        self.reads_keys = bool(getattr(first, "reads_keys", False))
        self.reads_mask = bool(getattr(first, "reads_mask", False))

    def _params(self) -> dict[str, Tensor]:
        """The members' stacked parameters of this module, ``{name: [G, ...]}``, named as in the module."""
        return {f"module.{n}": self.group.parameter(f"{self.path}.{n}") for n in self.names}

    def run(self, method: str, args: Sequence[Tensor], kwargs: Mapping[str, Tensor | None], shared: dict[str, Any], *,
            B: int, lengths: Sequence[int] | None, cut: _Cut, mend: _Mend) -> Any:
        """``module.method(*args, **kwargs, **shared)`` for every member, as the grouped batch.

        Args:
            method: the module's method.
            args: positional tensors of the grouped batch ``[G*B, ...]``; member ``g`` gets its rows.
            kwargs: keyword tensors of the grouped batch ``[G*B, ...]`` (or None), likewise.
            shared: keyword arguments passed to every member as they are.
            B: rows per member.
            lengths: each member's own length (the loop only: a part that draws draws for it), or None.
            cut: ``cut(args, kwargs, length) -> (args, kwargs)``: a member's arguments at its own length.
            mend: ``mend(out, args, length)``: a member's result back at the group's length.

        Returns:
            A tensor (or a tuple of them) of the grouped batch ``[G*B, ...]``, or broadcastable to it.
        """
        G = self.group.n_members
        if self.mode == "shared":
            return self.calls[0](method, tuple(args), {**kwargs, **shared})
        if self.mode == "vmap":
            present = {name: t for name, t in kwargs.items() if t is not None}
            names = list(present)
            fixed = {**{name: None for name, t in kwargs.items() if t is None}, **shared}
            tensors = [t.view(G, B, *t.shape[1:]) for t in (*args, *present.values())]  # [G, B, ...]

            def one(params: dict[str, Tensor], *member: Tensor) -> Any:
                own_kwargs = dict(zip(names, member[len(args):], strict=True))
                return functional_call(self.calls[0], params, (method, member[:len(args)], {**own_kwargs, **fixed}))

            out = vmap(one)(self._params(), *tensors)  # [G, B|1, ...]
            return tuple(_to_members(o, G, B) for o in out) if isinstance(out, tuple) else _to_members(out, G, B)
        params = self._params()
        results = []
        for g in range(G):
            rows = tuple(t[g * B:(g + 1) * B] for t in args)  # [B, ...] each
            row_kwargs = {name: None if t is None else t[g * B:(g + 1) * B] for name, t in kwargs.items()}
            own_args, own_kwargs = (rows, row_kwargs) if lengths is None else cut(rows, row_kwargs, lengths[g])
            own = {name: p[g] for name, p in params.items()}
            call = (method, own_args, {**shared, **own_kwargs})  # the member's own n_keys wins
            if self.group.streams is not None:
                with _stream(self.group.streams[g]):
                    out = functional_call(self.calls[g], own, call)
            else:
                out = functional_call(self.calls[g], own, call)
            results.append(out if lengths is None else mend(out, rows, lengths[g]))
        if isinstance(results[0], tuple):
            return tuple(_to_members(torch.stack(parts), G, B) for parts in zip(*results, strict=True))
        if results[0] is None:
            return None
        return _to_members(torch.stack(results), G, B)


# -- a member shorter than the group: its arguments cut to its length, its results padded back ----


def _cut(t: Tensor | None, dims: Sequence[int], length: int) -> Tensor | None:
    """``t`` narrowed to ``length`` along each of ``dims`` (None stays None)."""
    if t is None:
        return None
    for d in dims:
        t = t.narrow(d, 0, length)
    return t


def _pad_back(out: Tensor, original: Tensor, dim: int) -> Tensor:
    """``out`` (a member's result at its own length along ``dim``) followed by ``original``'s columns past it."""
    rest = original.narrow(dim, out.shape[dim], original.shape[dim] - out.shape[dim])
    return torch.cat([out, rest.to(out.dtype)], dim=dim)


def _cut_table(args: tuple[Tensor, ...], kwargs: dict[str, Tensor | None],
               length: int) -> tuple[tuple[Tensor, ...], dict[str, Any]]:
    """An input table's ``(h [B, L, D],)`` and ``position_ids [B, L]`` at ``length``."""
    h = _cut(args[0], (1,), length)
    assert h is not None
    return (h,), {name: _cut(t, (1,), length) for name, t in kwargs.items()}


def _mend_table(out: Tensor, args: tuple[Tensor, ...], length: int) -> Tensor:
    return _pad_back(out, args[0], 1)  # [B, L, D]: the padding keeps its embeddings


def _cut_rotate(args: tuple[Tensor, ...], kwargs: dict[str, Tensor | None],
                length: int) -> tuple[tuple[Tensor, ...], dict[str, Any]]:
    """``rotate``'s ``(q, k)`` ``[B, H, L, Dh]`` and ``position_ids [B, L]`` at ``length``."""
    q, k = _cut(args[0], (2,), length), _cut(args[1], (2,), length)
    assert q is not None and k is not None
    return (q, k), {name: _cut(t, (1,), length) for name, t in kwargs.items()}


def _mend_rotate(out: tuple[Tensor, Tensor], args: tuple[Tensor, ...], length: int) -> tuple[Tensor, Tensor]:
    return _pad_back(out[0], args[0], 2), _pad_back(out[1], args[1], 2)  # [B, H, L, Dh] each


def _cut_bias(args: tuple[Tensor, ...], kwargs: dict[str, Tensor | None],
              length: int) -> tuple[tuple[Tensor, ...], dict[str, Any]]:
    """``bias``'s ``(q [B, H, L, Dh],)``, keys ``k``, position ids and ``mask [B, 1, L, L]`` at ``length``."""
    q = _cut(args[0], (2,), length)
    assert q is not None
    cut = {"k": _cut(kwargs.get("k"), (2,), length), "mask": _cut(kwargs.get("mask"), (2, 3), length),
           "position_ids": _cut(kwargs.get("position_ids"), (1,), length),
           "key_position_ids": _cut(kwargs.get("key_position_ids"), (1,), length)}
    return (q,), {**{name: t for name, t in cut.items() if name in kwargs}, "n_keys": length}


def _mend_bias(out: Tensor | None, args: tuple[Tensor, ...], length: int) -> Tensor | None:
    if out is None:
        return None
    pad = args[0].shape[2] - length
    return F.pad(out, (0, pad, 0, pad))  # [B|1, H, L, L]: nothing added at the padding


def _cut_value(args: tuple[Tensor, ...], kwargs: dict[str, Tensor | None],
               length: int) -> tuple[tuple[Tensor, ...], dict[str, Any]]:
    """``value_term``'s ``(weights [B, H, L, L],)`` and position ids at ``length``."""
    weights = _cut(args[0], (2, 3), length)
    assert weights is not None
    return (weights,), {name: _cut(t, (1,), length) for name, t in kwargs.items()}


def _mend_value(out: Tensor | None, args: tuple[Tensor, ...], length: int) -> Tensor | None:
    if out is None:
        return None
    return F.pad(out, (0, 0, 0, args[0].shape[2] - length))  # [B, H, L, Dv]


def _own(t: Tensor | None, rows: slice, n: int, L: int, dims: tuple[int, ...]) -> Tensor | None:
    """A member's ``rows`` of ``t`` (of every member's rows ``[G*B, ...]``, or one shared ``[1|..., L, L]``), with
    each of ``dims`` that spans the group's length ``L`` cut to the member's ``n``."""
    if t is None:
        return None
    if t.dim() == 4 and t.shape[0] > 1:
        t = t[rows]
    return _cut(t, [d for d in dims if t.shape[d] == L], n)


class ModelGroup(nn.Module):
    """``G`` models of one class, sizes and position as one module: parameters stacked on a leading ``G``.

    Args:
        members: the models, each built as it would be alone (e.g. after ``torch.manual_seed(seed)``):
            :class:`~attnlab.models.EncoderOnlyTransformer` or
            :class:`~attnlab.models.DecoderOnlyTransformer`, all of one class, sizes, ``position``,
            dropout, dtype and device. The group keeps them (see :meth:`to_members`).
        streams: a CPU ``torch.Generator`` per member, from which its randomized positions and
            its dropout masks are drawn (what :meth:`build` makes: the global state the member
            left after it was built); required for a ``position`` that draws positions or a
            dropout above 0, else unused.

    Attributes:
        n_members: ``G``.
        pad_id: the members' padding token.
        stacked: the stacked parameters ``[G, ...]``, one per member parameter (the member's name
            with ``__`` for ``.``; :meth:`parameter` finds one by the member's name).
        streams: the members' generators, or None.

    Shapes:
        ``forward(x [G, B, L] (or [G, B, L, F]), *, position_ids [G, B, L] = None,
        mask [G, B, L] = None, lengths = None) -> [G, B, L, V] (or [G, B, L, F])``.

    Raises:
        TypeError: for members that are not all of one groupable class.
        ValueError: naming what differs (a size, the dropout, the position, a parameter's shape,
            dtype or device), or a position that draws positions (or a dropout above 0) without
            ``streams``.

    Example:
        >>> group = ModelGroup.build(lambda: EncoderOnlyTransformer(vocab_size=5, d_model=8, n_heads=2,
        ...                                                         position="t5"), seeds=[0, 1, 2])
        >>> x = torch.randint(1, 5, (3, 4, 6))  # [G, B, L]
        >>> group(x).shape
        torch.Size([3, 4, 6, 5])
    """

    def __init__(self, members: Sequence[SequenceModel], *, streams: Sequence[torch.Generator] | None = None) -> None:
        super().__init__()
        members = list(members)
        if not members:
            raise ValueError("members is empty: a group needs at least one model")
        first = members[0]
        if type(first) not in GROUPABLE:
            raise TypeError(f"members must be {' or '.join(c.__name__ for c in GROUPABLE)}, "
                            f"got {type(first).__name__}")
        for i, m in enumerate(members[1:], start=1):
            if type(m) is not type(first):
                raise TypeError(f"members must all be of one class: member 0 is {type(first).__name__}, "
                                f"member {i} is {type(m).__name__}")
            for attr in _SHAPE:
                if getattr(m, attr) != getattr(first, attr):
                    raise ValueError(f"members must have one shape: member 0 has {attr}={getattr(first, attr)!r}, "
                                     f"member {i} has {attr}={getattr(m, attr)!r}")
            if m.position != first.position:
                raise ValueError(f"members must have one position: member 0 has {first.position!r}, "
                                 f"member {i} has {m.position!r}")
        self.draws = draws_positions(first.position)
        self.dropout = float(first.dropout)
        if streams is None and (self.draws or self.dropout > 0):
            why = (f"position {first.position!r} draws positions at every call" if self.draws
                   else f"dropout={self.dropout} draws masks in training")
            raise ValueError(f"{why}: give streams (a generator per member; ModelGroup.build makes them)")
        if streams is not None:
            streams = list(streams)
            if len(streams) != len(members):
                raise ValueError(f"streams must hold one generator per member ({len(members)}), got {len(streams)}")
            for i, s in enumerate(streams):
                if not isinstance(s, torch.Generator) or s.device.type != "cpu":
                    raise TypeError(f"streams[{i}] must be a CPU torch.Generator, got {s!r}")
        self.streams: list[torch.Generator] | None = streams
        self.n_members = len(members)
        self.pad_id = first.pad_id
        self.causal = isinstance(first, DecoderOnlyTransformer)
        self._members = members  # a plain list: their parameters are not the group's (it holds the stacked ones)
        self._names = [name for name, _ in first.named_parameters()]
        self._eps = {name: m.eps for name, m in first.named_modules() if isinstance(m, nn.LayerNorm)}
        self.stacked = nn.ParameterDict()
        for name, p in first.named_parameters():
            others = [dict(m.named_parameters()).get(name) for m in members]
            for i, q in enumerate(others):
                if q is None or q.shape != p.shape or q.dtype != p.dtype or q.device != p.device:
                    raise ValueError(f"member {i}'s parameter {name} is "
                                     f"{None if q is None else (list(q.shape), q.dtype, str(q.device))}, "
                                     f"member 0's is {(list(p.shape), p.dtype, str(p.device))}")
            stacked = torch.stack([q.detach() for q in others if q is not None])  # [G, ...]
            self.stacked[name.replace(".", "__")] = nn.Parameter(stacked, requires_grad=p.requires_grad)
        # Each member's own position modules, found by name (an input table; a scheme per layer).
        owned = [dict(m.named_modules()) for m in members]
        self._input_part: _Part | None = None
        if first.input_position is not None:
            self._input_part = _Part(self, "input_position", [o["input_position"] for o in owned], self.draws)
        self._schemes: list[_Part | None] = []
        for i in range(first.n_layers):
            path = f"layers.{i}.self_attn.position"
            schemes = [o.get(path) for o in owned]
            if schemes[0] is None:
                self._schemes.append(None)
            else:
                self._schemes.append(_Part(self, path, [s for s in schemes if s is not None],
                                           bool(getattr(schemes[0], "draws_positions", False))))

    # -- building and taking apart ------------------------------------------------------------

    @classmethod
    def build(cls, build: Callable[[], SequenceModel], seeds: Sequence[int]) -> ModelGroup:
        """The group of ``build()`` after ``torch.manual_seed(seed)`` for each seed, each with its own stream.

        As :func:`attnlab.labs.lengths.train.train_one` builds a model: its weights drawn after
        ``torch.manual_seed(seed)``; the stream its randomized positions are then drawn from is
        the global generator where the build left it. torch's global random state comes back as
        it was.

        Raises:
            ValueError: for no seeds, and what :class:`ModelGroup` raises.
        """
        if not seeds:
            raise ValueError("seeds is empty: a group needs at least one model")
        members, streams = [], []
        with torch.random.fork_rng(devices=[]):
            for seed in seeds:
                torch.manual_seed(check_int("seed", seed))
                members.append(build())
                streams.append(torch.Generator().set_state(torch.get_rng_state()))
        return cls(members, streams=streams)

    def parameter(self, name: str) -> nn.Parameter:
        """The members' parameter ``name`` (a member's name, e.g. ``"layers.0.norm1.weight"``), stacked ``[G, ...]``.

        Raises:
            KeyError: naming a parameter the members do not have.
        """
        key = name.replace(".", "__")
        if key not in self.stacked:
            raise KeyError(f"the members have no parameter {name!r}")
        return self.stacked[key]

    def member_state_dict(self, index: int) -> dict[str, Tensor]:
        """Member ``index``'s ``state_dict`` (its buffers, and its parameters as trained in the group), detached."""
        index = check_int("index", index, minimum=0, maximum=self.n_members - 1)
        state = {k: v.detach() for k, v in self._members[index].state_dict().items()}
        for name in self._names:
            state[name] = self.parameter(name).detach()[index].clone()
        return state

    @property
    def members(self) -> list[SequenceModel]:
        """The member models as given, in order (their own parameters are not the group's: see :meth:`to_members`)."""
        return list(self._members)

    def to_members(self) -> list[SequenceModel]:
        """The members as ordinary models, their parameters set to the group's: for evaluation and checkpoints.

        The group keeps the same model objects and writes into them again at every call.
        """
        with torch.no_grad():
            for g, m in enumerate(self._members):
                own = dict(m.named_parameters())
                for name in self._names:
                    own[name].copy_(self.parameter(name)[g])
        return list(self._members)

    def _apply(self, fn, recurse: bool = True):  # type: ignore[no-untyped-def]
        """``.to()`` / ``.double()``: the members (their buffers, their schemes' tables) follow the group."""
        super()._apply(fn, recurse)
        for m in self._members:
            m._apply(fn, recurse)
        return self

    # -- the batched pieces --------------------------------------------------------------------

    def _linear(self, h: Tensor, name: str) -> Tensor:
        """Every member's ``nn.Linear`` ``name`` on its rows: ``h [G, B, L, F] -> [G, B, L, O]``."""
        G, B, L, F_in = h.shape
        weight, bias = self.parameter(f"{name}.weight"), self.parameter(f"{name}.bias")  # [G, O, F], [G, O]
        out = torch.baddbmm(bias.unsqueeze(1), h.reshape(G, B * L, F_in), weight.transpose(1, 2))  # [G, B*L, O]
        return out.view(G, B, L, -1)

    def _norm(self, h: Tensor, name: str) -> Tensor:
        """Every member's ``nn.LayerNorm`` ``name``: ``h [G, B, L, D] -> [G, B, L, D]``.

        Member by member, with its own weight and bias in the fused kernel, as alone: a batched
        ``weight * normed + bias`` gives the same outputs, but its weight's and bias's gradients
        sum in another order than the fused kernel's (float32 would differ in the last bits).
        """
        weight, bias = self.parameter(f"{name}.weight"), self.parameter(f"{name}.bias")  # [G, D] each
        eps, D = self._eps[name], h.shape[-1]
        return torch.stack([F.layer_norm(h[g], (D,), weight[g], bias[g], eps) for g in range(self.n_members)])

    def _dropout(self, h: Tensor, lengths: Sequence[int] | None) -> Tensor:
        """Every member's dropout on its own activations ``h [G, B, L, F]`` (training only): ``[G, B, L, F]``.

        Member ``g``'s mask is drawn on its own stream for ``h[g]`` at its own length ``[B, L_g, F]``
        (its columns past it, padding, pass unchanged), as ``nn.Dropout`` draws it alone.
        """
        if not self.training or self.dropout == 0.0:
            return h
        assert self.streams is not None  # required with dropout (__init__)
        L = h.shape[2]
        dropped = []
        for g in range(self.n_members):
            n = L if lengths is None else lengths[g]
            with _stream(self.streams[g]):
                own = F.dropout(h[g, :, :n], p=self.dropout)  # [B, L_g, F]
            dropped.append(own if n == L else torch.cat([own, h[g, :, n:]], dim=1))
        return torch.stack(dropped)  # [G, B, L, F]

    def _embed(self, x: Tensor) -> Tensor:
        """Tokens ``[G, B, L]`` (or values ``[G, B, L, F]``) -> ``[G, B, L, D]``, each through its member's table."""
        first = self._members[0]
        if first.vocab_size is None:
            return self._linear(x, "embed")
        weight = self.parameter("embed.weight")  # [G, V, D]
        G, V, D = weight.shape
        offsets = torch.arange(G, device=x.device).mul_(V).view(G, 1, 1)  # member g's rows start at g * V
        return F.embedding(x + offsets, weight.reshape(G * V, D))  # [G, B, L, D]

    def _attention(self, i: int, h: Tensor, mask: Tensor | None, ids: Tensor | None,
                   lengths: Sequence[int] | None) -> Tensor:
        """Layer ``i``'s self-attention of every member: ``h [G, B, L, D]`` (normed) -> ``[G, B, L, D]``."""
        G, B, L, _ = h.shape
        first = self._members[0]
        H, Dh = first.n_heads, first.head_dim
        qkv = self._linear(h, f"layers.{i}.self_attn.in_proj").view(G * B, L, 3 * H * Dh)  # rows q | k | v
        q = qkv[..., : H * Dh].view(G * B, L, H, Dh).transpose(1, 2)  # [G*B, H, L, Dh]
        k, v = qkv[..., H * Dh:].view(G * B, L, 2, H, Dh).permute(2, 0, 3, 1, 4).unbind(0)  # [G*B, H, L, Dh]
        part = self._schemes[i]
        bias: Tensor | None = None
        adds = part is not None and (part.adds_score or part.adds_value)
        ids_kwargs = {} if ids is None else {"position_ids": ids}
        if part is not None and part.rotates:
            q, k = part.run("rotate", (q, k), ids_kwargs, {}, B=B, lengths=lengths, cut=_cut_rotate, mend=_mend_rotate)
        if part is not None and adds:
            # As attend_with_position: hidden keys zeroed and the scores bounded before the scheme reads them.
            if mask is not None:
                k, v = drop_unseen_keys(k, v, mask)
            q, k = bounded_pair(q, k, 1.0 / math.sqrt(Dh))
            if part.adds_score:
                extra: dict[str, Tensor | None] = {} if ids is None else {"key_position_ids": ids}
                if part.reads_keys:
                    extra["k"] = k
                if part.reads_mask:
                    seen = may_attend(mask, L, L, is_causal=self.causal, device=q.device)
                    extra["mask"] = None if seen is None else seen.expand(G * B, 1, L, L)
                bias = part.run("bias", (q,), {**ids_kwargs, **extra}, {"n_keys": L}, B=B, lengths=lengths,
                                cut=_cut_bias, mend=_mend_bias)  # [G*B, H, L, L] (or broadcastable)
        value_term = part is not None and part.adds_value
        if self.training and self.dropout > 0:
            out, weights = self._attend_each(q, k, v, mask=mask, bias=bias, need_weights=value_term, guarded=adds,
                                             lengths=lengths)
        else:
            out, weights = attend_unchecked(q, k, v, mask=mask, bias=bias, scale=None, dropout_p=0.0,
                                            need_weights=value_term, is_causal=self.causal, guarded=adds)
        if value_term and weights is not None and part is not None:
            ids_both = {} if ids is None else {"position_ids": ids, "key_position_ids": ids}
            term = part.run("value_term", (weights,), ids_both, {}, B=B, lengths=lengths, cut=_cut_value,
                            mend=_mend_value)
            if term is not None:
                out = out + term.to(out.dtype)  # [G*B, H, L, Dh]
        context = out.transpose(1, 2).reshape(G, B, L, H * Dh)  # [G, B, L, H * Dh], heads side by side
        return self._linear(context, f"layers.{i}.self_attn.linear_out")  # [G, B, L, D]

    def _attend_each(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None, bias: Tensor | None,
                     need_weights: bool, guarded: bool,
                     lengths: Sequence[int] | None) -> tuple[Tensor, Tensor | None]:
        """Attention with dropout on the weights, member by member: each draws its mask on its own stream.

        ``q``, ``k``, ``v`` ``[G*B, H, L, Dh]``; ``mask`` ``[G*B, 1, 1, L]`` (or None); ``bias``
        broadcastable to ``[G*B, H, L, L]`` (or None). Member ``g`` attends on its rows at its own
        length ``L_g``, as alone (its dropout mask is ``[B, H, L_g, L_g]``); its outputs and weights
        are zero past it. Returns ``(out [G*B, H, L, Dh], weights [G*B, H, L, L] or None)``.
        """
        assert self.streams is not None  # required with dropout (__init__)
        G, L = self.n_members, q.shape[2]
        B = q.shape[0] // G
        outs, weights = [], []
        for g in range(G):
            n = L if lengths is None else lengths[g]

            rows = slice(g * B, (g + 1) * B)
            with _stream(self.streams[g]):
                out, w = attend_unchecked(q[rows, :, :n], k[rows, :, :n], v[rows, :, :n],
                                          mask=_own(mask, rows, n, L, (-1,)), bias=_own(bias, rows, n, L, (-2, -1)),
                                          scale=None,
                                          dropout_p=self.dropout, need_weights=need_weights, is_causal=self.causal,
                                          guarded=guarded)  # [B, H, L_g, Dh], [B, H, L_g, L_g]
            outs.append(F.pad(out, (0, 0, 0, L - n)))  # [B, H, L, Dh]
            if w is not None:
                weights.append(F.pad(w, (0, L - n, 0, L - n)))  # [B, H, L, L]
        return torch.cat(outs), (torch.cat(weights) if weights else None)

    # -- the forward ----------------------------------------------------------------------------

    def forward(self, x: Tensor, *, position_ids: Tensor | None = None, mask: Tensor | None = None,
                lengths: Sequence[int] | None = None) -> Tensor:
        """Every member's outputs for its own batch: ``x [G, B, L]`` tokens (or ``[G, B, L, F]`` values).

        Args:
            x: member ``g``'s batch is ``x[g]``.
            position_ids: ``[G, B, L]`` non-negative integer positions from the data (None: the indices).
            mask: a decoder-only group's padding ``[G, B, L]``, True on the real elements (an
                encoder-only group masks ``pad_id`` itself, as its members do).
            lengths: each member's own length, at most ``L``: its columns past it are padding
                (``pad_id``) that a part drawing positions must not draw for (None: ``L`` for every member).

        Returns:
            ``[G, B, L, V]`` logits (or ``[G, B, L, F]`` values).

        Raises:
            TypeError / ValueError: naming ``x``, ``position_ids``, ``mask`` or ``lengths`` when they are bad.
        """
        first = self._members[0]
        G = self.n_members
        if not isinstance(x, Tensor) or x.dim() < 3 or x.shape[0] != G:
            raise ValueError(f"x must be [G={G}, B, L] (a batch per member), got "
                             f"{list(x.shape) if isinstance(x, Tensor) else type(x).__name__}")
        B, L = x.shape[1], x.shape[2]
        first._check("x", x.reshape(G * B, *x.shape[2:]))
        ids = None
        if position_ids is not None:
            if not isinstance(position_ids, Tensor) or list(position_ids.shape) != [G, B, L]:
                raise ValueError(f"position_ids must be [G, B, L] = [{G}, {B}, {L}], got "
                                 f"{list(getattr(position_ids, 'shape', [])) or type(position_ids).__name__}")
            ids = first._position_ids("position_ids", position_ids.reshape(G * B, L), x.reshape(G * B, *x.shape[2:]))
        if lengths is not None:
            lengths = [check_int("lengths", n, minimum=1, maximum=L) for n in lengths]
            if len(lengths) != G:
                raise ValueError(f"lengths must hold one length per member ({G}), got {len(lengths)}")
            if all(n == L for n in lengths):
                lengths = None
        if self.causal:
            padding = None if mask is None else first._padding("mask", mask.reshape(G * B, L), G * B, L,
                                                               device=x.device)
        else:
            if mask is not None:
                raise ValueError("mask is for a decoder-only group; an encoder-only group masks pad_id itself")
            padding = (x != first.pad_id).reshape(G * B, L) if first.vocab_size is not None else None
        keys_mask = None if padding is None else padding[:, None, None, :]  # [G*B, 1, 1, L]
        h = self._embed(x)  # [G, B, L, D]
        D = h.shape[-1]
        if self._input_part is not None:
            table_kwargs = {} if ids is None else {"position_ids": ids}
            flat = h.reshape(G * B, L, D)
            out = self._input_part.run("forward", (flat,), table_kwargs, {}, B=B, lengths=lengths,
                                       cut=_cut_table, mend=_mend_table)
            assert first.input_position is not None  # the part is the members' tables
            h = check_table_output(first.input_position, flat, out).view(G, B, L, D)
        h = self._dropout(h, lengths)
        # A layer's draws in the order of TransformerEncoderLayer's: its scheme's and the attention
        # weights' masks, the attention branch's, the feed-forward network's hidden layer's, its branch's.
        for i in range(first.n_layers):
            a = self._norm(h, f"layers.{i}.norm1")
            h = h + self._dropout(self._attention(i, a, keys_mask, ids, lengths), lengths)
            f = F.relu(self._linear(self._norm(h, f"layers.{i}.norm2"), f"layers.{i}.ffn.0"))
            f = self._dropout(f, lengths)
            h = h + self._dropout(self._linear(f, f"layers.{i}.ffn.3"), lengths)  # [G, B, L, D]
        return self._linear(self._norm(h, "norm"), "head")  # [G, B, L, V]

    def extra_repr(self) -> str:
        first = self._members[0]
        return f"n_members={self.n_members}, member={type(first).__name__}({first.extra_repr()})"
