"""Many models of one shape trained as one batched computation: :class:`ModelGroup` and :func:`train_group`.

The length lab trains hundreds of small models (seeds x learning rates per encoding).
One model per process leaves a GPU idle (a width-64 model is bound by kernel launches)
and spends a fifth to a third of a CPU step on per-operator overhead. A group of ``G``
members of one class, sizes and encoding runs as one computation instead: the members'
parameters are stacked on a leading dimension ``G``, every matmul is one batched matmul
over the members (``torch.baddbmm`` over ``[G, B*L, F]``), attention runs over
``[G*B, H, T, S]``, and each member's position terms (its own T5 table, FIRE MLP,
learned table, randomized draws) are built from its own parameters and stacked once per
forward. A group is the unit a worker, a Ray task or a GPU takes.

Equal to training each alone. Each member is built exactly as it would be alone
(:meth:`ModelGroup.build`: ``torch.manual_seed(seed)``, then the model), and
:func:`train_group` takes the step :func:`attnlab.labs.lengths.train.train_one` takes
through :func:`attnlab.training.fit`, member by member: the loss of each member on its own
batch (their sum is backpropagated, so each member's gradient is its own), its gradients
clipped to norm ``clip`` over its own parameters (``nn.utils.clip_grad_norm_``), and
``torch.optim.Adam(foreach=True)``'s update (or ``AdamW``'s, with a weight decay per parameter)
at its own learning rate times the schedule's factor (``LambdaLR``) (:class:`GroupAdam`). In
float64 a member's parameters after training equal the alone run's to rounding
(``tests/models/test_grouped.py``). In float32 on the CPU the batched matmuls (``baddbmm``
over the members), the attention over ``[G*B, ...]``, the embedding and their gradients give
one model's numbers bit for bit; the layer norms run member by member (``F.layer_norm`` with
the member's own weight and bias) because the fused kernel's gradient of the weight and bias
sums in another order than a separate product's would.

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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, vmap

from attnlab._finite import bounded_pair
from attnlab._validate import check_finite_float, check_int
from attnlab.attention.backends.choose import may_attend
from attnlab.attention.functional import attend_unchecked
from attnlab.attention.guards import drop_unseen_keys
from attnlab.encodings.registry import draws_positions
from attnlab.models.decoder_only import DecoderOnlyTransformer
from attnlab.models.encoder_only import EncoderOnlyTransformer
from attnlab.models.sequence_model import SequenceModel

__all__ = ["GroupAdam", "MemberInputs", "ModelGroup", "clip_group_grad_norm_", "group_inputs", "group_step",
           "member_calls", "train_group"]

#: the model classes a group is made of (their forward is written here, batched over the members).
GROUPABLE: tuple[type[SequenceModel], ...] = (EncoderOnlyTransformer, DecoderOnlyTransformer)

#: what must be equal for members to be one computation (the constructor's settings).
_SHAPE = ("vocab_size", "n_features", "d_model", "n_heads", "head_dim", "n_layers", "ff_units", "max_len",
          "max_relative_position", "pad_id", "dropout")


class MemberInputs(NamedTuple):
    """One member's model call at one step: what :func:`train_group`'s ``inputs`` returns for a batch.

    Attributes:
        x: tokens ``[B, L]`` (or values ``[B, L, F]``).
        position_ids: positions ``[B, L]`` from the data, or None (the indices).
        mask: a decoder-only model's padding mask ``[B, L]`` (True = real), or None.
    """

    x: Tensor
    position_ids: Tensor | None = None
    mask: Tensor | None = None


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
            padding = None if mask is None else first._padding("mask", mask.reshape(G * B, L), G * B, L)
        else:
            if mask is not None:
                raise ValueError("mask is for a decoder-only group; an encoder-only group masks pad_id itself")
            padding = (x != first.pad_id).reshape(G * B, L) if first.vocab_size is not None else None
        keys_mask = None if padding is None else padding[:, None, None, :]  # [G*B, 1, 1, L]
        h = self._embed(x)  # [G, B, L, D]
        D = h.shape[-1]
        if self._input_part is not None:
            table_kwargs = {} if ids is None else {"position_ids": ids}
            h = self._input_part.run("forward", (h.reshape(G * B, L, D),), table_kwargs, {}, B=B, lengths=lengths,
                                     cut=_cut_table, mend=_mend_table).view(G, B, L, D)
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


# -- the training step ----------------------------------------------------------------------------


def clip_group_grad_norm_(params: Sequence[Tensor], max_norm: float) -> Tensor:
    """Clip each member's gradients to norm ``max_norm`` over its own parameters, as ``nn.utils.clip_grad_norm_``.

    Member ``g``'s norm is the 2-norm of the 2-norms of ``p.grad[g]`` over ``params`` (the stacked
    parameters ``[G, ...]``, the members first, then any shape, that have a gradient), its gradients are multiplied by
    ``min(max_norm / (norm + 1e-6), 1)``: torch's rule, member by member.

    Returns:
        The members' norms before clipping, ``[G]``.

    Raises:
        ValueError: for a ``max_norm`` that is not positive and finite, or no gradients.
    """
    max_norm = check_finite_float("max_norm", max_norm, positive=True)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        raise ValueError("no parameter has a gradient to clip (call backward first)")
    G = grads[0].shape[0]
    norms = torch.stack([torch.linalg.vector_norm(g.reshape(G, -1), dim=1) for g in grads], dim=1)  # [G, n]
    total = torch.linalg.vector_norm(norms, dim=1)  # [G]
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)  # [G]
    torch._foreach_mul_(grads, [coef.view(G, *([1] * (g.dim() - 1))) for g in grads])
    return total


class GroupAdam:
    """Adam (or AdamW) on a group's stacked parameters ``[G, ...]``, member ``g`` at learning rate ``lrs[g]``.

    Member by member the update of ``torch.optim.Adam(foreach=True)`` (Kingma & Ba 2015; torch's
    ``_multi_tensor_adam`` without amsgrad or maximize), in its order of operations: AdamW's
    decoupled weight decay ``p *= 1 - lr * weight_decay`` (Loshchilov & Hutter 2019) first, then
    ``m = lerp(m, grad, 1 - beta1)``, ``v = v * beta2 + (1 - beta2) grad^2``,
    ``p += (-lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)``, the factors computed
    in Python floats per member as torch computes them, then cast to the parameters' dtype.
    :meth:`like` builds the one that matches each member's own torch optimizer.

    Args:
        params: the stacked parameters (:meth:`ModelGroup.parameters`), ``[G, ...]``: the members first,
            then any shape.
        lrs: each member's base learning rate (the schedule multiplies it: :meth:`step`'s ``factor``).
        betas: ``(beta1, beta2)``.
        eps: added to the denominator.
        weight_decay: AdamW's decoupled weight decay, one for every parameter or one per parameter
            of ``params`` (0: Adam).

    Raises:
        TypeError / ValueError: naming ``lrs``, ``betas``, ``eps`` or ``weight_decay`` when they are bad,
            or ``params`` without the members' leading dimension.
    """

    def __init__(self, params: Iterable[Tensor], *, lrs: Sequence[float], betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float | Sequence[float] = 0.0) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.lrs = [check_finite_float("lrs", lr, positive=True) for lr in lrs]
        if not self.params:
            raise ValueError("params is empty: nothing to train")
        for p in self.params:
            if p.dim() == 0 or p.shape[0] != len(self.lrs):
                raise ValueError(f"lrs gives {len(self.lrs)} members, but a parameter is {list(p.shape)} "
                                 "(the members' dimension first)")
        self.beta1, self.beta2 = (check_finite_float(f"betas[{i}]", b) for i, b in enumerate(betas))
        if not (0.0 <= self.beta1 < 1.0 and 0.0 <= self.beta2 < 1.0):
            raise ValueError(f"betas must each be in [0, 1), got {betas!r}")
        self.eps = check_finite_float("eps", eps)
        if self.eps < 0:
            raise ValueError(f"eps must not be negative, got {eps!r}")
        decays = [weight_decay] * len(self.params) if isinstance(weight_decay, (int, float)) else list(weight_decay)
        if len(decays) != len(self.params):
            raise ValueError(f"weight_decay must be one number or one per parameter ({len(self.params)}), "
                             f"got {len(decays)}")
        self.weight_decay = [check_finite_float("weight_decay", d) for d in decays]
        if any(d < 0 for d in self.weight_decay):
            raise ValueError(f"weight_decay must not be negative, got {weight_decay!r}")
        self.steps = 0
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]

    @classmethod
    def like(cls, group: ModelGroup, optimizers: Sequence[torch.optim.Optimizer]) -> GroupAdam:
        """The :class:`GroupAdam` that steps member ``g`` as ``optimizers[g]`` (over that member's parameters) would.

        Each must be a ``torch.optim.Adam`` or ``AdamW`` (foreach or not: the same numbers) with one
        learning rate for all its parameters (it becomes the member's in ``lrs``), the group's
        ``betas`` and ``eps``, and a weight decay per parameter equal in every member (AdamW's, or 0).

        Raises:
            TypeError / ValueError: naming what cannot be matched (another optimizer, amsgrad,
                maximize, fused or capturable, Adam's L2 weight decay, settings that differ).
        """
        if len(optimizers) != group.n_members:
            raise ValueError(f"optimizers must hold one per member ({group.n_members}), got {len(optimizers)}")
        settings: set[tuple[float, float, float]] = set()
        lrs: list[float] = []
        decays: dict[str, set[float]] = {name: set() for name in group._names}
        for g, (member, optimizer) in enumerate(zip(group._members, optimizers, strict=True)):
            if not isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
                raise TypeError(f"optimizers[{g}] is {type(optimizer).__name__}: a group steps with Adam or AdamW only")
            names = {id(p): name for name, p in member.named_parameters()}
            rates = set()
            seen = set()
            for settings_of in optimizer.param_groups:
                for flag in ("amsgrad", "maximize", "fused", "capturable", "differentiable"):
                    if settings_of.get(flag):
                        raise ValueError(f"optimizers[{g}] has {flag}=True, which GroupAdam does not do")
                decoupled = isinstance(optimizer, torch.optim.AdamW) or settings_of.get("decoupled_weight_decay")
                decay = float(settings_of["weight_decay"])
                if decay and not decoupled:
                    raise ValueError(f"optimizers[{g}] is Adam with weight_decay={decay} (an L2 term in the "
                                     "gradient); GroupAdam decays as AdamW does")
                rates.add(float(settings_of["lr"]))
                beta1, beta2 = (float(b) for b in settings_of["betas"])
                settings.add((beta1, beta2, float(settings_of["eps"])))
                for p in settings_of["params"]:
                    if id(p) not in names:
                        raise ValueError(f"optimizers[{g}] holds a parameter that is not member {g}'s")
                    seen.add(names[id(p)])
                    decays[names[id(p)]].add(decay)
            if len(rates) != 1:
                raise ValueError(f"optimizers[{g}] has learning rates {sorted(rates)}: a member steps at one rate")
            missing = [name for name in group._names if name not in seen]
            if missing:
                raise ValueError(f"optimizers[{g}] does not train {', '.join(missing)}")
            lrs.append(rates.pop())
        if len(settings) != 1:
            raise ValueError(f"the optimizers differ in (beta1, beta2, eps): {sorted(settings)}")
        uneven = [name for name, d in decays.items() if len(d) != 1]
        if uneven:
            raise ValueError(f"the optimizers decay {', '.join(uneven)} at different rates")
        beta1, beta2, eps = settings.pop()
        return cls([group.parameter(name) for name in group._names], lrs=lrs, betas=(beta1, beta2), eps=eps,
                   weight_decay=[decays[name].pop() for name in group._names])

    def zero_grad(self) -> None:
        """Forget the gradients (``set_to_none``)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, *, factor: float = 1.0) -> None:
        """One update of every member at learning rate ``lrs[g] * factor`` (a ``LambdaLR`` factor).

        Raises:
            ValueError: if a parameter has no gradient (Adam alone would skip it; in a group every
                member's parameter has one, or none has).
        """
        if any(p.grad is None for p in self.params):
            raise ValueError("a parameter has no gradient: call backward on the members' losses first")
        self.steps += 1
        beta1, beta2 = self.beta1, self.beta2
        grads = [p.grad for p in self.params if p.grad is not None]
        # AdamW: p *= 1 - lr * weight_decay, the factor in Python floats as torch forms it for a group's rate.
        shrink: dict[tuple[float, torch.dtype, torch.device], Tensor] = {}
        for p, decay in zip(self.params, self.weight_decay, strict=True):
            if decay:
                at = (decay, p.dtype, p.device)
                if at not in shrink:
                    shrink[at] = torch.tensor([1 - (lr * factor) * decay for lr in self.lrs], dtype=p.dtype,
                                              device=p.device)  # [G]
                p.mul_(shrink[at].view(-1, *([1] * (p.dim() - 1))))
        torch._foreach_lerp_(self.exp_avg, grads, 1 - beta1)
        torch._foreach_mul_(self.exp_avg_sq, beta2)
        torch._foreach_addcmul_(self.exp_avg_sq, grads, grads, 1 - beta2)
        t = float(self.steps)
        bias_correction1 = 1 - beta1 ** t
        bias_correction2_sqrt = (1 - beta2 ** t) ** 0.5
        # As torch: lr = base * factor (LambdaLR), step size (lr / bias_correction1) * -1, in Python floats.
        sizes = [((lr * factor) / bias_correction1) * -1 for lr in self.lrs]
        denom = torch._foreach_sqrt(self.exp_avg_sq)
        torch._foreach_div_(denom, bias_correction2_sqrt)
        torch._foreach_add_(denom, self.eps)
        step_sizes: dict[tuple[torch.dtype, torch.device], Tensor] = {}
        updates = []
        for p, m in zip(self.params, self.exp_avg, strict=True):
            key = (p.dtype, p.device)
            if key not in step_sizes:
                step_sizes[key] = torch.tensor(sizes, dtype=p.dtype, device=p.device)  # [G]
            updates.append(torch.mul(m, step_sizes[key].view(-1, *([1] * (p.dim() - 1)))))  # [G, ...]
        # addcdiv's order: p + (size * m) / denom
        torch._foreach_div_(updates, denom)
        torch._foreach_add_(self.params, updates)

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state: steps taken, the moments, the learning rates and settings."""
        return {"steps": self.steps, "lrs": list(self.lrs), "betas": (self.beta1, self.beta2), "eps": self.eps,
                "weight_decay": list(self.weight_decay), "exp_avg": [t.clone() for t in self.exp_avg],
                "exp_avg_sq": [t.clone() for t in self.exp_avg_sq]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`'s ``state``.

        Raises:
            ValueError: for a state of other parameters (their count or shapes).
        """
        moments = state["exp_avg"], state["exp_avg_sq"]
        for saved in moments:
            if [list(t.shape) for t in saved] != [list(p.shape) for p in self.params]:
                raise ValueError("state holds the moments of other parameters (their shapes differ)")
        self.steps = int(state["steps"])
        self.lrs = [float(lr) for lr in state["lrs"]]
        self.beta1, self.beta2 = (float(b) for b in state["betas"])
        self.eps = float(state["eps"])
        self.weight_decay = [float(d) for d in state.get("weight_decay", [0.0] * len(self.params))]
        self.exp_avg = [t.to(p.device).clone() for t, p in zip(moments[0], self.params, strict=True)]
        self.exp_avg_sq = [t.to(p.device).clone() for t, p in zip(moments[1], self.params, strict=True)]


def _pad_to(t: Tensor, length: int, value: float | int) -> Tensor:
    """``t [B, L, ...]`` right-padded with ``value`` to ``[B, length, ...]``."""
    pad = length - t.shape[1]
    if pad == 0:
        return t
    return torch.cat([t, t.new_full((t.shape[0], pad, *t.shape[2:]), value)], dim=1)


def group_inputs(group: ModelGroup, calls: Sequence[MemberInputs]) -> tuple[dict[str, Any], list[int]]:
    """The members' calls as one grouped call: ``(kwargs of ModelGroup.forward, each member's length)``.

    Every ``x [B, L_g]`` is right-padded with ``pad_id`` to the longest ``L`` (a decoder-only
    member's ``mask`` with False, its ``position_ids`` with their last value), then stacked.

    Raises:
        ValueError: for a count of calls other than the members', or batch sizes that differ.
    """
    if len(calls) != group.n_members:
        raise ValueError(f"a step needs one batch per member ({group.n_members}), got {len(calls)}")
    sizes = {c.x.shape[0] for c in calls}
    if len(sizes) != 1:
        raise ValueError(f"the members' batches must have one batch size, got {sorted(sizes)}")
    lengths = [int(c.x.shape[1]) for c in calls]
    L = max(lengths)
    pad_id = group._members[0].pad_id
    x = torch.stack([_pad_to(c.x, L, pad_id) for c in calls])  # [G, B, L] (or [G, B, L, F])
    kwargs: dict[str, Any] = {"x": x}
    if any(c.position_ids is not None for c in calls):
        if not all(c.position_ids is not None for c in calls):
            raise ValueError("position_ids given for some members and not others")
        kwargs["position_ids"] = torch.stack([
            torch.cat([c.position_ids, c.position_ids[:, -1:].expand(-1, L - c.position_ids.shape[1])], dim=1)
            for c in calls if c.position_ids is not None])  # [G, B, L]
    if any(c.mask is not None for c in calls):
        masks = [c.mask if c.mask is not None else torch.ones_like(c.x[..., 0] if c.x.dim() == 3 else c.x,
                                                                     dtype=torch.bool) for c in calls]
        kwargs["mask"] = torch.stack([_pad_to(m, L, False) for m in masks])  # [G, B, L]
    return kwargs, lengths


class _Called(Exception):
    """Raised by :class:`_Recorder` with the model call a batch loss made (ends that loss early)."""

    def __init__(self, call: MemberInputs) -> None:
        super().__init__("the model was called")
        self.call = call


class _Recorder:
    """Stands for a member in a batch loss: its attributes are the member's; calling it records the call."""

    def __init__(self, member: SequenceModel) -> None:
        self._member = member

    def __getattr__(self, name: str) -> Any:
        return getattr(self._member, name)

    def __call__(self, x: Tensor, *, position_ids: Tensor | None = None, mask: Tensor | None = None,
                 **rest: Any) -> Tensor:
        if rest:
            raise ValueError(f"a grouped member is called with x, position_ids and mask only, got {sorted(rest)}")
        if position_ids is not None:
            position_ids = position_ids.expand(x.shape[0], x.shape[1])  # [B, L], as the model reads [1, L]
        raise _Called(MemberInputs(x, position_ids, mask))


class _Outputs:
    """Stands for a member in a batch loss: its attributes are the member's; calling it gives its outputs."""

    def __init__(self, member: SequenceModel, output: Tensor) -> None:
        self._member, self._output = member, output

    def __getattr__(self, name: str) -> Any:
        return getattr(self._member, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Tensor:
        return self._output


def member_calls(batch_loss: Callable[[Any, Any], Tensor], member: SequenceModel) -> tuple[
        Callable[[Any], MemberInputs], Callable[[Tensor, Any], Tensor]]:
    """:func:`attnlab.training.fit`'s ``loss(model, batch)`` as :func:`train_group`'s ``inputs`` and ``loss``.

    ``batch_loss`` must call the model once, as ``model(x, position_ids=..., mask=...)``; it may
    read the model's attributes (``member``'s, one of the group: they are every member's).
    ``inputs(batch)`` runs it up to that call and returns the call; ``loss(output, batch)``
    runs it again with the member's outputs as the model's.

    Raises:
        ValueError: (from ``inputs``) for a loss that never calls the model.
    """

    def inputs(batch: Any) -> MemberInputs:
        try:
            batch_loss(_Recorder(member), batch)
        except _Called as called:
            return called.call
        raise ValueError("the batch loss never called the model")

    def loss(output: Tensor, batch: Any) -> Tensor:
        return batch_loss(_Outputs(member, output), batch)

    return inputs, loss


def group_step(group: ModelGroup, optimizer: GroupAdam, batches: Sequence[Any], *,
               inputs: Callable[[Any], MemberInputs], loss: Callable[[Tensor, Any], Tensor],
               factor: float = 1.0, clip: float | None = 1.0) -> Tensor:
    """One training step of every member on its own batch: loss, backward, clipping, Adam.

    Args:
        group: the members.
        optimizer: their :class:`GroupAdam`.
        batches: a batch per member.
        inputs: ``inputs(batch) -> MemberInputs``: the model call a member's batch makes.
        loss: ``loss(output, batch) -> scalar``: a member's loss from its outputs ``[B, L_g, V]``
            (its own columns only) and its batch.
        factor: the schedule's factor of this step (``LambdaLR``'s), multiplying every member's rate.
        clip: the members' gradient-norm bound (None: no clipping).

    Returns:
        The members' losses ``[G]``, detached.

    Raises:
        ValueError: for a step without a batch per member, or a loss that is not a scalar.
    """
    device = optimizer.params[0].device
    calls = [inputs(b) for b in batches]
    calls = [MemberInputs(c.x.to(device), None if c.position_ids is None else c.position_ids.to(device),
                          None if c.mask is None else c.mask.to(device)) for c in calls]
    kwargs, lengths = group_inputs(group, calls)
    optimizer.zero_grad()
    out = group(kwargs.pop("x"), **kwargs, lengths=lengths)  # [G, B, L, V]
    member_losses = []
    for g, (batch, n) in enumerate(zip(batches, lengths, strict=True)):
        value = loss(out[g, :, :n], batch)  # the member's own columns
        if not isinstance(value, Tensor) or value.dim() != 0:
            raise ValueError(f"loss must return a scalar tensor, got {type(value).__name__} "
                             f"of shape {tuple(getattr(value, 'shape', ()))} for member {g}")
        member_losses.append(value)
    losses = torch.stack(member_losses)  # [G]
    losses.sum().backward()  # the members' parameters are apart: each gradient is its member's own
    if clip is not None:
        clip_group_grad_norm_(optimizer.params, clip)
    optimizer.step(factor=factor)
    return losses.detach()


def train_group(group: ModelGroup, batches: Iterable[Sequence[Any]], *, lrs: Sequence[float], steps: int,
                inputs: Callable[[Any], MemberInputs], loss: Callable[[Tensor, Any], Tensor],
                schedule: Callable[[int], float] | None = None, clip: float | None = 1.0,
                betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                optimizer: GroupAdam | None = None,
                on_step: Callable[[int, Tensor], None] | None = None) -> Tensor:
    """Train every member of ``group`` for ``steps`` steps, each exactly as it would train alone.

    Member ``g``'s step is :func:`attnlab.training.fit`'s step with ``torch.optim.Adam(lr=lrs[g],
    foreach=True)``, ``LambdaLR(schedule)`` stepped every batch and norm clipping at ``clip``
    (:func:`attnlab.labs.lengths.train.train_one`): its loss on its own batch, its gradients
    clipped over its own parameters, Adam at ``lrs[g] * schedule(step)`` (:func:`group_step`).

    Args:
        group: the members.
        batches: one item per step, holding a batch per member (e.g. ``zip(*loaders)``).
        lrs: each member's base learning rate (a group may span learning rates).
        steps: optimizer steps to take (``batches`` must hold as many).
        inputs: ``inputs(batch) -> MemberInputs``: the model call a member's batch makes.
        loss: ``loss(output, batch) -> scalar``: a member's loss from its outputs ``[B, L_g, V]``
            (its own columns only) and its batch.
        schedule: the ``LambdaLR`` factor of step ``k`` (from 0); None: 1.
        clip: the members' gradient-norm bound (None: no clipping).
        betas, eps: Adam's.
        optimizer: a :class:`GroupAdam` to continue (e.g. restored from a checkpoint, or :meth:`GroupAdam.like`
            the members' own optimizers); None: a new one (Adam at ``lrs``, ``betas``, ``eps``).
        on_step: called after every step ``k`` with the members' losses ``[G]`` (detached): progress.

    Returns:
        The members' losses at every step, ``[steps, G]`` (detached, on the group's device).

    Raises:
        ValueError: naming ``steps``, ``lrs`` or ``batches`` when they are bad (fewer batches
            than ``steps``, a step without a batch per member), or a loss that is not a scalar.
    """
    steps = check_int("steps", steps, minimum=1)
    if len(lrs) != group.n_members:
        raise ValueError(f"lrs must hold one learning rate per member ({group.n_members}), got {len(lrs)}")
    if clip is not None:
        clip = check_finite_float("clip", clip, positive=True)
    adam = optimizer if optimizer is not None else GroupAdam(group.parameters(), lrs=lrs, betas=betas, eps=eps)
    group.train()
    losses = []
    iterator = iter(batches)
    for k in range(steps):
        try:
            members = list(next(iterator))
        except StopIteration:
            raise ValueError(f"batches ran out after {k} steps of steps={steps}") from None
        losses.append(group_step(group, adam, members, inputs=inputs, loss=loss,
                                 factor=1.0 if schedule is None else schedule(k), clip=clip))
        if on_step is not None:
            on_step(k, losses[-1])
    adam.zero_grad()
    return torch.stack(losses)  # [steps, G]
