"""Training a group of models as one batched computation: :func:`train_group`, its step and its optimizer.

A group (:class:`attnlab.models.grouped.ModelGroup`: ``G`` models of one shape, their
parameters stacked on a leading ``G``) trains here, each member exactly as it would train
alone: :func:`train_group` takes the step :func:`attnlab.labs.lengths.train.train_one`
takes through :func:`attnlab.training.fit`, member by member: the loss of each member on its
own batch (their sum is backpropagated, so each member's gradient is its own), its gradients
clipped to norm ``clip`` over its own parameters (:func:`clip_group_grad_norm_`, as
``nn.utils.clip_grad_norm_``), and ``torch.optim.Adam(foreach=True)``'s update (or ``AdamW``'s,
with a weight decay per parameter) at its own learning rate times the schedule's factor
(``LambdaLR``) (:class:`GroupAdam`). In float64 a member's parameters after training equal the
alone run's to rounding, and in float32 on the CPU bit for bit (``tests/models/test_grouped.py``).

Training imports no model: the group is anything with what :class:`Group` lists. A batch's
model call is a :class:`MemberInputs`; :func:`member_calls` turns ``fit``'s
``loss(model, batch)`` into the call it makes and the loss of given outputs.

Shape notation: ``G`` members, ``B`` batch, ``L`` length, ``V`` vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor, nn

from attnlab._validate import check_finite_float, check_int

__all__ = ["Group", "GroupAdam", "MemberInputs", "clip_group_grad_norm_", "group_inputs", "group_step",
           "member_calls", "train_group"]


class Group(Protocol):
    """What training needs of a group of models (:class:`attnlab.models.grouped.ModelGroup` is one).

    Attributes:
        n_members: ``G``.
        pad_id: the token the members pad with.

    Raises:
        TypeError: if instantiated: it describes a group, it builds none.
    """

    n_members: int
    pad_id: int

    @property
    def members(self) -> Sequence[nn.Module]:
        """The member models, in order; member ``g``'s parameter ``name`` is ``parameter(name)[g]`` in the group."""
        ...

    def parameter(self, name: str) -> nn.Parameter:
        """The members' parameter ``name`` (a member's name), stacked ``[G, ...]``."""
        ...

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]:
        """Every stacked parameter ``[G, ...]``."""
        ...

    def train(self, mode: bool = True) -> Any:
        """Training mode (dropout), as ``nn.Module.train``."""
        ...

    def __call__(self, x: Tensor, *, position_ids: Tensor | None = None, mask: Tensor | None = None,
                 lengths: Sequence[int] | None = None) -> Tensor:
        """Every member's outputs ``[G, B, L, V]`` for its own batch ``x[g]`` (``x [G, B, L]``)."""
        ...


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
        params: the stacked parameters (:meth:`Group.parameters`), ``[G, ...]``: the members first,
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
    def like(cls, group: Group, optimizers: Sequence[torch.optim.Optimizer]) -> GroupAdam:
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
        names_in_order = [name for name, _ in group.members[0].named_parameters()]
        decays: dict[str, set[float]] = {name: set() for name in names_in_order}
        for g, (member, optimizer) in enumerate(zip(group.members, optimizers, strict=True)):
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
            missing = [name for name in names_in_order if name not in seen]
            if missing:
                raise ValueError(f"optimizers[{g}] does not train {', '.join(missing)}")
            lrs.append(rates.pop())
        if len(settings) != 1:
            raise ValueError(f"the optimizers differ in (beta1, beta2, eps): {sorted(settings)}")
        uneven = [name for name, d in decays.items() if len(d) != 1]
        if uneven:
            raise ValueError(f"the optimizers decay {', '.join(uneven)} at different rates")
        beta1, beta2, eps = settings.pop()
        return cls([group.parameter(name) for name in names_in_order], lrs=lrs, betas=(beta1, beta2), eps=eps,
                   weight_decay=[decays[name].pop() for name in names_in_order])

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


def group_inputs(group: Group, calls: Sequence[MemberInputs]) -> tuple[dict[str, Any], list[int]]:
    """The members' calls as one grouped call: ``(kwargs of the group's call, each member's length)``.

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
    pad_id = group.pad_id
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

    def __init__(self, member: nn.Module) -> None:
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

    def __init__(self, member: nn.Module, output: Tensor) -> None:
        self._member, self._output = member, output

    def __getattr__(self, name: str) -> Any:
        return getattr(self._member, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Tensor:
        return self._output


def member_calls(batch_loss: Callable[[Any, Any], Tensor], member: nn.Module) -> tuple[
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


def group_step(group: Group, optimizer: GroupAdam, batches: Sequence[Any], *,
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


def train_group(group: Group, batches: Iterable[Sequence[Any]], *, lrs: Sequence[float], steps: int,
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
