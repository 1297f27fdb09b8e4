"""Checking a checkpoint's contents against the model, optimizer and scheduler they are to be loaded into.

torch's own ``load_state_dict`` methods check little: a module's checks keys and
shapes; an optimizer's copies its state tensors as they are (casting dtypes
only), and the fused Adam kernel trusts that ``exp_avg`` has its parameter's
size, so a one-element ``exp_avg`` makes it write past the end of it (glibc then
aborts the process); a scheduler's takes any dict; ``random.setstate`` and
``torch.set_rng_state`` raise only once the model and optimizer have changed.
So everything is checked here first, and nothing of a checkpoint reaches a
kernel before all of it has passed:

* the model state: the keys and shapes (every mismatch named), then every entry
  a strided tensor of the model's dtype;
* the optimizer state: the same parameter groups, each with the keys this
  optimizer has and values of the same types (numbers finite; the implementation
  settings ``foreach``, ``fused``, ``capturable``, ``differentiable`` equal), the
  parameter ids listed once; per parameter, for torch's optimizers, only the keys
  that optimizer keeps, all it needs, each tensor of its parameter's shape and
  dtype and densely laid out, each step count a finite float >= 0;
* the scheduler state: the keys and value types of this scheduler's own
  ``state_dict()``, list lengths included;
* the histories, the clipping setting and the random-number state.

Each refusal is a ValueError ``"checkpoint '<path>': <entry>: <problem>"``, the
entry named by its key path, e.g. ``optimizer_state_dict['state'][3]['exp_avg']:
shape (1,) does not fit parameter 3's (2, 6)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NoReturn

import torch

from attnlab.training.checkpoint import check_format
from attnlab.training.state_kinds import is_number, layout_problem, like, short, with_article

__all__ = ["OPTIMIZER_STATE", "SCHEDULER_GROUP_KEYS", "SLACK_BYTES", "check_fits", "check_state_dict",
           "max_checkpoint_bytes"]

#: bytes a checkpoint may hold beyond its model's and optimizer's tensors: the pickle, histories, RNG states
SLACK_BYTES = 64 * 2**20

_MAX_NAMES = 8  # names listed in a mismatch message before "and N more"

# Per-parameter optimizer state, for torch's optimizers: key -> (kind, when it is required). Kinds: "param",
# a tensor of the parameter's shape and dtype; "param?", that or None; "scalar", a finite number >= 0 (a float
# scalar tensor or a Python number). Required: always (True), never (False), or when the named
# param-group setting is true (the optimizer's step then reads it without checking).
_Spec = dict[str, tuple[str, bool | str]]
_STEP: tuple[str, bool | str] = ("scalar", True)
_ADAM: _Spec = {"step": _STEP, "exp_avg": ("param", True), "exp_avg_sq": ("param", True)}
_AMSGRAD: _Spec = {**_ADAM, "max_exp_avg_sq": ("param", "amsgrad")}
OPTIMIZER_STATE: dict[str, _Spec] = {
    "Adam": _AMSGRAD, "AdamW": _AMSGRAD, "SparseAdam": _ADAM, "RAdam": _ADAM,
    "NAdam": {**_ADAM, "mu_product": ("scalar", True)},
    "Adamax": {"step": _STEP, "exp_avg": ("param", True), "exp_inf": ("param", True)},
    "Adagrad": {"step": _STEP, "sum": ("param", True)},
    "Adadelta": {"step": _STEP, "square_avg": ("param", True), "acc_delta": ("param", True)},
    "RMSprop": {"step": _STEP, "square_avg": ("param", True), "momentum_buffer": ("param", "momentum"),
                "grad_avg": ("param", "centered")},
    "Rprop": {"step": _STEP, "prev": ("param", True), "step_size": ("param", True)},
    "ASGD": {"step": _STEP, "eta": ("scalar", True), "mu": ("scalar", True), "ax": ("param", True)},
    "SGD": {"momentum_buffer": ("param?", False)},  # torch < 2.1 kept None when momentum is 0
}
# How the optimizer computes, not what it learned: loading other values would switch its kernel (and some
# combinations, such as fused with differentiable, only fail at the first step).
_IMPLEMENTATION = ("foreach", "fused", "capturable", "differentiable")
#: keys LR schedulers add to the param groups: present or not depending on whether a scheduler was set
SCHEDULER_GROUP_KEYS = ("initial_lr", "max_lr", "min_lr", "base_momentum", "max_momentum", "swa_lr")
# Scheduler counters that torch uses as integers, and their least values.
_COUNTERS = {"last_epoch": -1, "_step_count": 0}
# Scheduler flags that torch's versions since 2.3 (the oldest attnlab supports) gained or lost.
_VERSION_FLAGS = ("verbose", "_is_initial", "_get_lr_called_within_step")



def max_checkpoint_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> int:
    """The most a checkpoint of ``model`` (and ``optimizer``) can hold uncompressed, in bytes.

    The model's storages, the optimizer's state (per parameter, as many
    parameter-sized tensors as that optimizer keeps: 3 for Adam with amsgrad, 1
    for SGD, 4 for one :data:`OPTIMIZER_STATE` does not list), and
    :data:`SLACK_BYTES` for the pickle, the histories and the random-number states.
    """
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in model.state_dict().values() if isinstance(t, torch.Tensor)}
    total = sum(storages.values()) + SLACK_BYTES
    if optimizer is not None:
        spec = _state_spec(optimizer)
        per_param = 4 if spec is None else sum(kind != "scalar" for kind, _ in spec.values())
        total += sum(per_param * p.numel() * p.element_size() for g in optimizer.param_groups for p in g["params"])
    return total


def _state_spec(optimizer: torch.optim.Optimizer) -> _Spec | None:
    """The :data:`OPTIMIZER_STATE` entry of this optimizer, if it is torch's own class of that name."""
    name = type(optimizer).__name__
    return OPTIMIZER_STATE.get(name) if getattr(torch.optim, name, None) is type(optimizer) else None


def _refuse(where: str, entry: str, problem: str) -> NoReturn:
    raise ValueError(f"checkpoint {where!r}: {entry}: {problem}")


def _class_name(value: Any) -> str:
    """A saved class name as it is, anything else (a crafted value) shortened."""
    return value if isinstance(value, str) and value.isidentifier() else short.repr(value)


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:_MAX_NAMES])
    return shown + (f" and {len(names) - _MAX_NAMES} more" if len(names) > _MAX_NAMES else "")


def check_state_dict(expected: Mapping[str, Any], loaded: Any, *, what: str, where: str,
                     key: str = "model_state_dict") -> None:
    """Check that a saved state dict fits a module: same keys, tensors of the same shapes and dtypes.

    Args:
        expected: the module's own ``state_dict()``.
        loaded: the saved one.
        what: what it is, for the message (``"model"``, ``"selfattn-pe model"``).
        where: the checkpoint's path, for the message.
        key: the saved one's key in the checkpoint, for the message.

    Raises:
        ValueError: naming an entry that is not a strided tensor; else all missing and
            unexpected keys and shape mismatches; else the first dtype mismatch.
    """
    if not isinstance(loaded, Mapping):
        raise ValueError(f"checkpoint {where!r}: the {what} state is a {type(loaded).__name__}, not a dict")
    for name, value in loaded.items():
        if not isinstance(expected.get(name), torch.Tensor):
            continue  # an unexpected key (named below), or a module's extra state, which may be anything
        if not isinstance(value, torch.Tensor):
            _refuse(where, f"{key}[{name!r}]", f"{with_article(type(value).__name__)}, not a tensor")
        if value.layout != torch.strided:
            _refuse(where, f"{key}[{name!r}]", f"a {value.layout} tensor, not a strided one")
    missing = [k for k in expected if k not in loaded]
    unexpected = [k for k in loaded if k not in expected]
    shapes = [f"{k} {tuple(loaded[k].shape)} vs {tuple(v.shape)}" for k, v in expected.items()
              if k in loaded and isinstance(v, torch.Tensor) and loaded[k].shape != v.shape]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"missing keys {_names(missing)}")
        if unexpected:
            parts.append(f"unexpected keys {_names(unexpected)}")
        if shapes:
            parts.append(f"shape mismatches (checkpoint vs {what}) {_names(shapes)}")
        raise ValueError(f"checkpoint {where!r} does not fit this {what}: " + "; ".join(parts))
    for name, own in expected.items():
        if isinstance(own, torch.Tensor) and loaded[name].dtype != own.dtype:  # torch would cast it silently
            _refuse(where, f"{key}[{name!r}]", f"dtype {loaded[name].dtype} does not fit the {what}'s {own.dtype}")


def _filled_by_setstate(cls: type[torch.optim.Optimizer]) -> dict[str, Any]:
    """The param-group settings ``cls.__setstate__`` fills in when a checkpoint lacks them.

    torch adds settings to its optimizers over the versions (Adam's
    ``decoupled_weight_decay``) and fills them in when an older checkpoint is
    loaded; such a checkpoint is as good as one that has them.
    """
    probe = cls.__new__(cls)
    try:
        probe.__setstate__({"defaults": {}, "state": {}, "param_groups": [{"params": []}]})
        return {k: v for k, v in probe.param_groups[0].items() if k != "params"}
    except Exception:  # a class whose __setstate__ wants more fills in nothing we can know of
        return {}


def _scalar_problem(value: Any) -> str | None:
    """Why ``value`` is not a finite number >= 0 held as a Python number or a float scalar tensor."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            return f"a tensor of shape {tuple(value.shape)}, not a scalar"
        if not value.is_floating_point():
            return f"a {value.dtype} tensor, not a float one"
        number = float(value)
    elif is_number(value):
        number = float(value)
    else:
        return f"{short.repr(value)} is {with_article(type(value).__name__)}, not a number"
    return None if math.isfinite(number) and number >= 0 else f"{number!r} is not a finite number >= 0"


def _param_problem(value: Any, param: torch.Tensor, pid: int) -> str | None:
    """Why ``value`` cannot be state of parameter ``pid`` (None if it can): its shape, dtype and layout."""
    if not isinstance(value, torch.Tensor):
        return f"{with_article(type(value).__name__)}, not a tensor"
    if value.shape != param.shape:
        return f"shape {tuple(value.shape)} does not fit parameter {pid}'s {tuple(param.shape)}"
    if value.dtype != param.dtype:
        return f"dtype {value.dtype} does not fit parameter {pid}'s {param.dtype}"
    return layout_problem(value)


def _check_group(group: dict[str, Any], own: dict[str, Any], entry: str, cls: type[torch.optim.Optimizer],
                 where: str) -> None:
    """A saved param group against this optimizer's own (of class ``cls``): the same settings, of the same types."""
    name = cls.__name__
    saved = {**_filled_by_setstate(cls), **group}
    for key in own:
        if key not in saved and key not in SCHEDULER_GROUP_KEYS:
            _refuse(where, entry, f"lacks {key!r}, which this {name} has")
    for key, value in saved.items():
        if key == "params":
            continue
        if key not in own:
            if key not in SCHEDULER_GROUP_KEYS:
                _refuse(where, entry, f"unknown key {key!r} for {name}")
            if not is_number(value) or not math.isfinite(value):
                _refuse(where, f"{entry}[{key!r}]", f"{short.repr(value)} is not a finite number")
        elif key in _IMPLEMENTATION:
            if value != own[key] or type(value) is not type(own[key]):
                _refuse(where, f"{entry}[{key!r}]", f"{value!r}, where this {name} has {own[key]!r} (how it "
                        "computes: build the optimizer with the settings the checkpoint's had)")
        else:
            found = like(value, own[key], name, finite=True)
            if found:
                _refuse(where, f"{entry}[{key!r}]{found[0]}", found[1])


def _check_optimizer(saved: Any, optimizer: torch.optim.Optimizer, where: str) -> None:
    """The optimizer state against this optimizer: its groups, then each parameter's state."""
    name = type(optimizer).__name__
    top = "optimizer_state_dict"
    if not isinstance(saved, dict):
        _refuse(where, top, f"{with_article(type(saved).__name__)}, not a dict")
    for key in ("state", "param_groups"):
        if key not in saved:
            _refuse(where, top, f"lacks {key!r}")
    groups, own_groups = saved["param_groups"], optimizer.param_groups
    if not isinstance(groups, list) or not all(isinstance(g, dict) and isinstance(g.get("params"), list)
                                               for g in groups):
        _refuse(where, f"{top}['param_groups']", "not a list of groups, each a dict with a list of 'params'")
    saved_sizes, sizes = [len(g["params"]) for g in groups], [len(g["params"]) for g in own_groups]
    if saved_sizes != sizes:
        raise ValueError(f"checkpoint {where!r}: optimizer parameter groups of sizes {saved_sizes} "
                         f"do not fit this optimizer's {sizes}")
    # torch maps the saved ids to this optimizer's parameters by their order in the groups.
    params: dict[int, torch.Tensor] = {}
    groups_by_id: dict[int, dict[str, Any]] = {}
    for g, (group, own) in enumerate(zip(groups, own_groups, strict=True)):
        entry = f"{top}['param_groups'][{g}]"
        for pid, param in zip(group["params"], own["params"], strict=True):
            if type(pid) is not int:
                _refuse(where, f"{entry}['params']", f"{short.repr(pid)} is not a parameter id (an int)")
            if pid in params:
                _refuse(where, f"{entry}['params']", f"lists parameter {pid} twice")
            params[pid], groups_by_id[pid] = param, group
        _check_group(group, own, entry, type(optimizer), where)
    state = saved["state"]
    if not isinstance(state, dict):
        _refuse(where, f"{top}['state']", f"{with_article(type(state).__name__)}, not a dict")
    spec = _state_spec(optimizer)
    for pid, param_state in state.items():
        entry = f"{top}['state'][{pid!r}]"
        if type(pid) is not int or pid not in params:
            _refuse(where, entry, f"{short.repr(pid)} is not a parameter id listed in param_groups")
        if not isinstance(param_state, dict):
            _refuse(where, entry, f"{with_article(type(param_state).__name__)}, not a dict")
        for key, value in param_state.items():
            if spec is None:  # an optimizer not listed: its keys cannot be checked, its tensors' layout can
                problem = layout_problem(value) if isinstance(value, torch.Tensor) else None
                if problem:
                    _refuse(where, f"{entry}[{key!r}]", problem)
            elif key not in spec:
                _refuse(where, entry, f"unknown key {key!r} for {name}")
        for key, (kind, required) in (spec or {}).items():
            needed = required if isinstance(required, bool) else bool(groups_by_id[pid].get(required))
            if param_state and needed and key not in param_state:  # empty state: the optimizer starts it afresh
                because = "" if isinstance(required, bool) else f" with {required}"
                _refuse(where, entry, f"lacks {key!r}, which {name} needs{because}")
            if key not in param_state or (kind == "param?" and param_state[key] is None):
                continue
            value = param_state[key]
            problem = _scalar_problem(value) if kind == "scalar" else _param_problem(value, params[pid], pid)
            if problem:
                _refuse(where, f"{entry}[{key!r}]", problem)


def _check_scheduler(saved: Any, scheduler: Any, where: str) -> None:
    """The scheduler state against this scheduler's own ``state_dict()``: its keys and value types.

    Its keys become the scheduler's attributes, so an unknown one could shadow a method (``step``).
    """
    own = scheduler.state_dict()
    if isinstance(saved, dict):  # flags of other torch versions: the scheduler keeps its own if one is missing
        saved = {**{k: own[k] for k in _VERSION_FLAGS if k in own},
                 **{k: v for k, v in saved.items() if not (k in _VERSION_FLAGS and k not in own and type(v) is bool)}}
    found = like(saved, own, type(scheduler).__name__, finite=False, counters=_COUNTERS)
    if found:
        _refuse(where, f"scheduler_state_dict{found[0]}", found[1])


def check_fits(state: Mapping[str, Any], *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               scheduler: Any, where: str, model_name: str = "model") -> None:
    """Check a whole checkpoint against a model, optimizer and scheduler before anything of it is loaded.

    Args:
        state: the checkpoint dict (from :func:`~attnlab.training.checkpoint.read_checkpoint`).
        model, optimizer, scheduler: what it is to be loaded into (scheduler may be None; the
            scheduler state is then not checked, as it is not loaded).
        where: the checkpoint's path, for messages.
        model_name: how to name the model in messages (``"selfattn-pe model"``).

    Raises:
        ValueError: naming the checkpoint and the first entry that does not fit (see the module docstring).
    """
    check_format(state, where)
    check_state_dict(model.state_dict(), state["model_state_dict"], what=model_name, where=where)
    if state["optimizer_class"] != type(optimizer).__name__:
        raise ValueError(f"checkpoint {where!r} holds a {_class_name(state['optimizer_class'])} optimizer's state; "
                         f"this trainer's optimizer is a {type(optimizer).__name__}")
    _check_optimizer(state["optimizer_state_dict"], optimizer, where)
    if state["scheduler_class"] is not None and scheduler is not None \
            and state["scheduler_class"] != type(scheduler).__name__:
        raise ValueError(f"checkpoint {where!r} holds a {_class_name(state['scheduler_class'])} scheduler's "
                         f"state; this trainer's scheduler is a {type(scheduler).__name__}")
    if scheduler is not None and state["scheduler_state_dict"] is not None:
        _check_scheduler(state["scheduler_state_dict"], scheduler, where)

