"""Position encodings by name, class or factory: one door for the built-in schemes and a user's own.

Whatever a model, the length lab or the command line is given as ``position`` goes
through :func:`resolve`, which returns something with ``for_model(sizes)``:

* a **name**: a built-in one (:data:`attnlab.catalog.SCHEMES`, each a ``"module:Class"``
  imported on first use), one added with :func:`register`, or one an installed package
  declares in the entry-point group ``attnlab.schemes`` (``name = "pkg.module:Class"``);
* ``"module:Class"``: a class anywhere importable, e.g. ``"mypkg.schemes:Sandwich"``;
* ``"random-" + any of these``: Ruoss et al. 2023's randomized version of a scheme that
  takes positions (:class:`~attnlab.encodings.randomized.Randomized`);
* a **class**: a :class:`~attnlab.encodings.PositionScheme` (one per self-attention) or an
  input table (anything else with a ``for_model`` classmethod: added to the embeddings);
* a **factory**: any other callable, ``factory(sizes) -> PositionScheme``, called once per
  self-attention.

A model resolves its ``position`` once and builds from what :func:`resolve` returned:
:func:`build_table` (the input table, or None) and :func:`build_scheme` per self-attention
(:func:`input_position` and :func:`attention_position` do both steps for one use).

A class built from a ``"module:Class"`` runs that module's code: the name is imported
from the environment (``sys.path``), as ``import`` would, never from a run folder.

:func:`spec_name` gives the string that rebuilds a scheme elsewhere (a worker, ``--resume``).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from importlib.machinery import PathFinder
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from torch import Tensor, nn

from attnlab import catalog
from attnlab._validate import check_bool
from attnlab.encodings.scheme import ModelSizes, PositionScheme

if TYPE_CHECKING:  # built only for a randomized name: imported there
    from attnlab.encodings.randomized import RandomizedPositions

__all__ = ["ADDED_TO_INPUT", "CAUSAL_ONLY", "DEFAULT_ENCODINGS", "ENCODINGS", "INSIDE_ATTENTION", "RANDOMIZED",
           "Position", "Randomized", "attention_position", "build_scheme", "build_table", "check_table_output",
           "draws_positions", "import_location", "input_position", "is_input_table", "register", "registered",
           "resolve", "spec_name", "task_positions"]


class Buildable(Protocol):
    """What :func:`resolve` returns: something that builds a module for a model's sizes."""

    def for_model(self, sizes: ModelSizes) -> nn.Module:
        """The module for a model of ``sizes``: a scheme for one self-attention, or an input table."""
        ...


@dataclass(frozen=True)
class Randomized:
    """Ruoss et al.'s randomized version of a scheme class, built like a class (``for_model``).

    What ``"random-alibi"`` (or ``"random-mypkg.schemes:Sandwich"``) names: the scheme built for
    the model's sizes, wrapped in :class:`RandomizedPositions` with the model's ``max_len`` and
    the draw the class declares (:attr:`~attnlab.encodings.PositionScheme.randomize_by`).

    Attributes:
        scheme: the class to randomize.

    Example:
        >>> from attnlab.encodings import ALiBi, ModelSizes
        >>> Randomized(ALiBi).for_model(ModelSizes(n_heads=2, head_dim=4, d_model=8, causal=False, max_len=64))
        RandomizedPositions(
          max_len=64, sample='distances'
          (scheme): ALiBi(n_heads=2, causal=False, left_offset=0.5)
        )
    """

    scheme: type[PositionScheme]

    def for_model(self, sizes: ModelSizes) -> RandomizedPositions:
        """The wrapped scheme for ``sizes``, drawing from ``[0, sizes.max_len)``.

        Raises:
            ValueError: without ``sizes.max_len``, or what the scheme or the wrapper raise.
        """
        if sizes.max_len is None:
            raise ValueError(f"a randomized {self.scheme.__name__} draws positions from [0, max_len): give max_len")
        from attnlab.encodings.randomized import RandomizedPositions

        return RandomizedPositions(self.scheme.for_model(sizes), max_len=sizes.max_len,
                                   sample=self.scheme.randomize_by)


#: what ``position=`` takes: a name or ``"module:Class"``, a class, a ``Randomized`` spec, or a factory.
Position = str | type[nn.Module] | Randomized | Callable[[ModelSizes], PositionScheme]

# The names attnlab lists: attnlab.catalog's tuples, which need no torch (the CLI lists them before importing it).
#: every name attnlab lists: the built-in schemes, then the randomized ones.
ENCODINGS = catalog.ENCODINGS
#: what ``attnlab compare`` compares unless told: the classic seven.
DEFAULT_ENCODINGS = catalog.DEFAULT_ENCODINGS
#: every randomized name attnlab lists (Ruoss et al. 2023): the tables' and the schemes'.
RANDOMIZED: tuple[str, ...] = tuple(name for name in ENCODINGS if name.startswith("random-"))
#: the listed names added to the embeddings.
ADDED_TO_INPUT = catalog.INPUT_TABLES
#: the listed names that act inside attention.
INSIDE_ATTENTION: tuple[str, ...] = tuple(name for name in ENCODINGS if name not in ADDED_TO_INPUT)
#: the listed schemes defined for causal attention only.
CAUSAL_ONLY = catalog.CAUSAL_ONLY
_PREFIX = "random-"
_IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")  # matched whole (fullmatch)
_NAME = re.compile(r"[a-z0-9][a-z0-9_\-]*")  # matched whole (fullmatch)
#: what ``--encodings`` reads as every listed encoding, so no scheme can be registered under it
_ALL = "all"

_registered: dict[str, type[nn.Module]] = {}
_entry_points: dict[str, str] | None = None


@dataclass(frozen=True)
class _Factory:
    """A user's callable ``factory(sizes) -> PositionScheme``, called once per self-attention."""

    factory: Callable[[ModelSizes], PositionScheme]

    def for_model(self, sizes: ModelSizes) -> PositionScheme:
        scheme = self.factory(sizes)
        if not isinstance(scheme, PositionScheme):
            raise TypeError(f"position factory {self.factory!r} must return an attnlab.encodings.PositionScheme, "
                            f"got {type(scheme).__name__}")
        return scheme


def register(name: str, scheme_class: type[nn.Module], *, replace: bool = False) -> None:
    """Make ``name`` build ``scheme_class`` wherever attnlab takes an encoding by name.

    Args:
        name: lower-case letters, digits, ``-`` and ``_``, starting with a letter or digit; not a
            built-in name, not ``all`` (``--encodings all``), and not starting with ``random-``
            (that prefix randomizes any scheme).
        scheme_class: a :class:`~attnlab.encodings.PositionScheme` subclass, or an input
            table class with a ``for_model(sizes)`` classmethod.
        replace: replace a name registered before (never a built-in one).

    Raises:
        TypeError: if ``name`` is not a string, ``scheme_class`` not such a class, or ``replace``
            not a bool.
        ValueError: for a malformed or taken name (whitespace, a control character, ``:``, an
            empty name: anything but the characters above).

    Example:
        >>> from attnlab.encodings import ALiBi
        >>> class SteepALiBi(ALiBi):
        ...     pass
        >>> register("steep-alibi", SteepALiBi)
        >>> resolve("steep-alibi") is SteepALiBi
        True
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {name!r} ({type(name).__name__})")
    # fullmatch: a pattern's "$" also matches before a final newline, and "mine\n" is no name a command line takes.
    if not _NAME.fullmatch(name) or name.startswith(_PREFIX) or name == _ALL:
        raise ValueError(f"name must be lower-case letters, digits, '-' and '_', starting with a letter or digit, "
                         f"not starting with {_PREFIX!r} and not {_ALL!r} (--encodings all); got {name!r}")
    _check_class("scheme_class", scheme_class)
    check_bool("replace", replace)  # "no" is truthy: it would replace
    if name in catalog.SCHEMES:
        raise ValueError(f"name {name!r} is a built-in encoding; choose another name")
    if name in _registered and not replace and _registered[name] is not scheme_class:
        raise ValueError(f"name {name!r} is registered already (to {_registered[name].__qualname__}); "
                         "pass replace=True to replace it")
    _registered[name] = scheme_class


def registered() -> dict[str, str]:
    """Every name a scheme can be given by now: built-in, registered and from entry points -> ``"module:Class"``."""
    names = dict(catalog.SCHEMES)
    names.update({name: f"{cls.__module__}:{cls.__qualname__}" for name, cls in _registered.items()})
    for name, path in _plugin_paths().items():
        names.setdefault(name, path)
    return names


def resolve(position: Position) -> Buildable:
    """What ``position`` builds: a class, a :class:`~attnlab.encodings.randomized.Randomized`, or a factory.

    Raises:
        TypeError: for something that is none of the kinds (module docstring).
        ValueError: for an unknown name or a ``"module:Class"`` that does not import,
            naming the known names.
    """
    if isinstance(position, str):
        known = position in _registered or position in catalog.SCHEMES or position in _plugin_paths()
        if position.startswith(_PREFIX) and not known:
            inner = resolve(position.removeprefix(_PREFIX))
            if not (isinstance(inner, type) and issubclass(inner, PositionScheme)) or inner.draws_positions:
                raise ValueError(f"encoding {position!r}: only a scheme inside attention that takes positions "
                                 f"can be randomized; {position.removeprefix(_PREFIX)!r} is not one")
            return Randomized(inner)
        return cast(Buildable, _named(position))
    if isinstance(position, Randomized):
        return position
    if isinstance(position, type):
        _check_class("position", position)
        return cast(Buildable, position)
    if callable(position):
        return _Factory(position)
    raise TypeError(f"position must be a name, 'module:Class', a scheme class or a factory, "
                    f"got {type(position).__name__}")


def spec_name(position: Position) -> str:
    """The string that rebuilds ``position`` in another process: its name, or ``"module:Class"``.

    Raises:
        TypeError: for a factory, a class defined inside a function or in ``__main__``,
            which another process cannot import.
        ValueError: for an unknown name.
    """
    if isinstance(position, str):
        resolve(position)  # an unknown name is refused here, not in a worker
        return position
    if isinstance(position, Randomized):
        return _PREFIX + spec_name(position.scheme)
    if isinstance(position, type):
        for name, cls in _registered.items():
            if cls is position:
                return name
        path = f"{position.__module__}:{position.__qualname__}"
        for name, builtin in catalog.SCHEMES.items():
            if builtin == path:
                return name
        if "<locals>" in position.__qualname__ or position.__module__ == "__main__":
            raise TypeError(f"{position.__qualname__} cannot be imported by another process (defined in "
                            f"{position.__module__}); define it in a module, or register() it in every process")
        return path
    raise TypeError(f"a factory ({position!r}) cannot be named for another process; give a class or a name")


def build_scheme(resolved: Buildable, sizes: ModelSizes, *, name: Position | None = None) -> PositionScheme | None:
    """The scheme a resolved position puts inside one self-attention of ``sizes``; None for an input table.

    What a model calls per self-attention with what :func:`resolve` returned once.

    Args:
        resolved: what :func:`resolve` returned.
        sizes: the model's sizes; ``sizes.causal``: the attention is causal (T5 buckets one
            side, ALiBi penalises one side; a scheme that declares ``causal_only`` requires it).
        name: what the position was given as, for messages (default: what was resolved).

    Raises:
        ValueError: for a causal-only scheme in a bidirectional attention, a randomized one
            without ``sizes.max_len``, and what the scheme raises for its sizes.
        TypeError: naming the class, when its ``for_model`` returns anything but a scheme.
    """
    if _is_table(resolved):
        return None
    scheme = resolved.for_model(sizes)
    if not isinstance(scheme, PositionScheme):
        raise TypeError(f"position scheme {_label(resolved)}: for_model(sizes) must return an "
                        f"attnlab.encodings.PositionScheme (the scheme for one self-attention), "
                        f"got {type(scheme).__name__}")
    if scheme.causal_only and not sizes.causal:
        raise ValueError(f"encoding {_label(resolved if name is None else name)!r} is defined for causal attention "
                         "only; this attention is bidirectional (an encoder-only model, or an encoder-decoder's "
                         "encoder): use a decoder-only model")
    return scheme


def build_table(resolved: Buildable, *, d_model: int, max_len: int) -> nn.Module | None:
    """The table a resolved absolute position adds to the embeddings; None for a scheme inside attention.

    Called as ``table(h [B, L, D], offset=0, position_ids=None) -> [B, L, D]`` (``position_ids [B, L]``
    replace the offset: every built-in table takes them; a table written without them still
    serves a model called without position ids).

    Raises:
        ValueError: what the table raises for its sizes.
        TypeError: naming the class, when its ``for_model`` returns anything but a module.
    """
    if not _is_table(resolved):
        return None
    table = resolved.for_model(ModelSizes(n_heads=1, head_dim=d_model, d_model=d_model, causal=False,
                                          max_len=max_len))
    if not isinstance(table, nn.Module):
        raise TypeError(f"input table {_label(resolved)}: for_model(sizes) must return the table, an nn.Module "
                        f"called as table(h [B, L, D], offset=0), got {type(table).__name__}")
    return table


def check_table_output(table: nn.Module, h: Tensor, out: object) -> Tensor:
    """``out``, what ``table(h)`` returned, if it is ``h [B, L, D]`` with the positions added: a tensor of h's shape.

    Checked on the shape alone where a model adds its table: a table that returns another shape
    (its rows alone ``[1, L, D]``, a row too few) was otherwise broadcast into the model's output
    (a ``[B, 1, V]`` for a ``[B, L]`` input), or failed later naming something else (the loss's batch).

    Raises:
        TypeError: naming the table's class, for anything but a floating tensor.
        ValueError: naming the table's class, the expected shape and the one it returned.
    """
    def expected() -> str:  # the message is built only when it is raised (a string of sizes is no graph op)
        return (f"input table {type(table).__name__}: forward(h) must return h with its positions added, a tensor "
                f"[B, L, D] = {list(h.shape)} (the shape of h)")

    if not isinstance(out, Tensor) or not out.is_floating_point():
        got = f"dtype {out.dtype}" if isinstance(out, Tensor) else type(out).__name__
        raise TypeError(f"{expected()}, got {got}")
    if out.shape != h.shape:
        raise ValueError(f"{expected()}, got shape {list(out.shape)}")
    return out


def attention_position(position: Position, *, n_heads: int, head_dim: int, causal: bool,
                       max_relative_position: int = 16, max_len: int | None = None,
                       d_model: int | None = None) -> PositionScheme | None:
    """The scheme ``position`` puts inside one self-attention; None for an input table.

    Args:
        position: a name, ``"module:Class"``, a class or a factory (module docstring).
        n_heads: ``H``; head_dim: ``Dh``; d_model: ``D`` (default ``H * Dh``).
        causal: the attention is causal (see :func:`build_scheme`).
        max_relative_position: Shaw's clipping distance ``k``.
        max_len: the longest sequence; the randomized schemes draw from ``[0, max_len)``.

    Raises:
        ValueError: for an unknown name (naming the known ones), and what :func:`build_scheme` raises.
    """
    sizes = ModelSizes(n_heads=n_heads, head_dim=head_dim, d_model=n_heads * head_dim if d_model is None else d_model,
                       causal=causal, max_len=max_len, max_relative_position=max_relative_position)
    return build_scheme(resolve(position), sizes, name=position)


def input_position(position: Position, *, d_model: int, max_len: int) -> nn.Module | None:
    """The table an absolute ``position`` adds to the embeddings (:func:`build_table`); None for a scheme.

    Raises:
        ValueError: for an unknown name, and what the table raises for its sizes.
    """
    return build_table(resolve(position), d_model=d_model, max_len=max_len)


def import_location(encoding: str) -> Path | None:
    """Where the module of a ``"module:Class"`` encoding would be imported from, found without importing it.

    None for a name (built-in, registered or from an installed package's entry point) and
    for a module that cannot be found. What ``attnlab compare --resume`` checks before it
    imports a module a run folder names: a folder from elsewhere must not run its own code.
    """
    if not isinstance(encoding, str) or ":" not in encoding:
        return None
    top = encoding.removeprefix(_PREFIX).partition(":")[0].split(".")[0]
    module = sys.modules.get(top)
    if module is not None:
        where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", [])), None)
        return None if where is None else Path(where)
    spec = PathFinder.find_spec(top)
    if spec is None:
        return None
    if spec.origin and spec.origin != "namespace":
        return Path(spec.origin)
    locations = list(spec.submodule_search_locations or [])
    return Path(locations[0]) if locations else None


def draws_positions(position: Position) -> bool:
    """True when ``position`` draws its positions anew at every call (a randomized scheme or table).

    Read from the declarations (``draws_positions``), without building anything.
    """
    resolved = resolve(position)
    if isinstance(resolved, Randomized):
        return True
    return bool(getattr(resolved, "draws_positions", False))


def task_positions(position: Position) -> str | None:
    """The rule by which the task numbers the tokens for ``position`` (``"abacus"``, ``"coupling"``), or None.

    Abacus embeddings and position coupling take their positions from the task's structure
    (``position_ids [B, L]``, required), not from the tokens' order; read from the class's
    ``task_positions`` declaration, without building anything.
    """
    return getattr(resolve(position), "task_positions", None)


def is_input_table(position: Position) -> bool:
    """True when ``position`` is added to the embeddings rather than acting inside attention."""
    return _is_table(resolve(position))


# -- names -------------------------------------------------------------------------------------


def _named(name: str) -> type[nn.Module]:
    """The class a name or ``"module:Class"`` stands for."""
    if name in _registered:
        return _registered[name]
    path = catalog.SCHEMES.get(name) or _plugin_paths().get(name)
    if path is None and _IMPORT_PATH.fullmatch(name):
        path = name
    if path is None:
        known = ", ".join(repr(n) for n in (*registered(), *catalog.RANDOMIZED))
        raise ValueError(f"unknown encoding {name!r}; known: {known}; or 'module:Class', "
                         "or 'random-' before a scheme's name")
    cls = _load(path, name)
    _check_class(f"encoding {name!r}", cls)
    return cls


class SchemeImportError(ValueError):
    """A ``module:Class`` whose module cannot be loaded here (not on Python's path, or failing as it is imported).

    A run folder whose settings name such a scheme is not unreadable: it needs the module back on the path.
    """


def _load(path: str, name: str) -> Any:
    module_name, _, attr = path.partition(":")
    try:
        found = importlib.util.find_spec(module_name) is not None
    except (ImportError, ValueError):  # a parent package that is missing, or a malformed name
        found = False
    if not found:
        # The `attnlab` console script's path holds its environment, not the folder it is run from.
        raise SchemeImportError(f"encoding {name!r}: no module {module_name!r} where Python looks (sys.path: the "
                         "environment's packages and PYTHONPATH; the attnlab command does not look in the current "
                         f"folder): install it, or run with PYTHONPATH=<its folder>, e.g. PYTHONPATH=. attnlab ...")
    try:
        target: Any = importlib.import_module(module_name)
    except SystemExit as err:  # a module that exits as it is imported would end attnlab with nothing said
        raise SchemeImportError(f"encoding {name!r}: module {module_name!r} called sys.exit({err.code!r}) while it was "
                         "imported") from None
    except Exception as err:  # its own error, a syntax error or a missing import of its own: named, with where
        where = ""  # a SyntaxError's own message names its file and line
        if not isinstance(err, SyntaxError) and err.__traceback__ is not None:
            last = traceback.extract_tb(err.__traceback__)[-1]
            where = f" ({last.filename}, line {last.lineno})"
        raise SchemeImportError(f"encoding {name!r}: importing module {module_name!r} failed: "
                         f"{type(err).__name__}: {err}{where}") from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise SchemeImportError(f"encoding {name!r}: module {module_name!r} has no {attr!r}")
        target = getattr(target, part)
    return target


def _plugin_paths() -> dict[str, str]:
    """The schemes installed packages declare in the entry-point group (read once)."""
    global _entry_points
    if _entry_points is None:
        _entry_points = {ep.name: ep.value for ep in entry_points(group=catalog.ENTRY_POINT_GROUP)}
    return _entry_points


def _check_class(what: str, cls: Any) -> None:
    if not isinstance(cls, type) or not issubclass(cls, nn.Module) or not callable(getattr(cls, "for_model", None)):
        raise TypeError(f"{what} must be an attnlab.encodings.PositionScheme subclass (or an input table class "
                        f"with a for_model classmethod), got {cls!r}")


def _is_table(resolved: Buildable) -> bool:
    """Whether a resolved position is an input table (any class but a scheme's), added to the embeddings."""
    return isinstance(resolved, type) and not issubclass(resolved, PositionScheme)


def _label(position: Position | Buildable) -> str:
    if isinstance(position, str):
        return position
    if isinstance(position, _Factory):
        position = position.factory
    return getattr(position, "__name__", repr(position))

