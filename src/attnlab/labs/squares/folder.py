"""A squares run folder's own checks: its saved settings, and what must hold before a run writes into it.

:func:`resume_config` and :func:`check_train_folder` write nothing; :func:`check_outputs` runs once the
folder is held, before anything in it is written (see :func:`attnlab.labs.squares.train.train_run`).
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attnlab._io import check_below, read_json
from attnlab.encodings.registry import SchemeImportError
from attnlab.labs.run_folder import check_claim
from attnlab.labs.squares.config import SquaresConfig

__all__ = ["CHECKPOINT", "check_outputs", "check_train_folder", "read_config", "resume_config"]

CHECKPOINT = "checkpoint.pt"


def read_config(folder: Path, flag: str) -> SquaresConfig | None:
    """The run's ``config.json`` (None if the run was killed before writing it).

    Raises:
        ValueError: naming ``flag`` and the folder, if it is unreadable (a FIFO, bad UTF-8, JSON nested
            too deeply...) or holds no squares run's settings.
    """
    path = folder / "config.json"
    if not os.path.lexists(path):
        return None
    data = read_json(path, what="config.json")  # a FIFO or a device is refused unopened, bad UTF-8 named
    try:
        return SquaresConfig.from_dict(data)
    except SchemeImportError as err:  # the settings are fine: their scheme's module is not on the path here
        raise ValueError(f"{flag} {str(folder)!r}: the run's settings name a scheme that cannot be loaded here: "
                         f"{err}") from None
    except (ValueError, TypeError, AttributeError) as err:
        raise ValueError(f"{flag} {str(folder)!r}: config.json is unreadable: {err}") from None


#: the settings a resume may change: train until another total, on another device, on other threads
_MAY_DIFFER = ("epochs", "device", "threads")


def resume_config(folder: str | os.PathLike[str], given: dict[str, Any], *,
                  names: Mapping[str, str] | None = None) -> SquaresConfig:
    """The config to resume the run in ``folder`` with: its saved settings, ``given`` ones on top.

    Only ``epochs`` (train until that many), ``device`` (where this session trains) and
    ``threads`` (how many intra-op threads it trains on) may differ from the saved settings.

    Args:
        folder: the run folder.
        given: settings given on the command line, ``{name: value}`` (None values ignored).
        names: how to call each setting in messages (the command line's flags); default: its name.

    Raises:
        ValueError: naming them, for given settings that differ from the saved run's,
            an unreadable ``config.json``, or a folder that holds no squares run.
    """
    given = {k: v for k, v in given.items() if v is not None}
    saved = read_config(check_claim(folder, kind="train", resume=True), "--resume")
    if saved is None:  # killed before its config was written: the given settings are the run's
        return SquaresConfig(**given)
    kept = saved.to_dict()
    try:
        config = dataclasses.replace(saved, **given)
        diff = {k: (v, getattr(config, k)) for k, v in kept.items() if k not in _MAY_DIFFER and getattr(config, k) != v}
    except (ValueError, TypeError) as err:
        # What the saved settings cannot take (--model gru on a run with heads): the setting that differs
        # is the mistake to name, not the size the other model lacks.
        diff = {k: (kept[k], v) for k, v in given.items() if k not in _MAY_DIFFER and kept.get(k) != v}
        if not diff:
            raise err from None
    if diff:
        shown = ", ".join(f"{(names or {}).get(k, k)}: saved {a!r}, given {b!r}" for k, (a, b) in diff.items())
        raise ValueError(f"--resume: the run in {str(folder)!r} was made with other settings ({shown})")
    return config


def check_train_folder(config: SquaresConfig, folder: str | os.PathLike[str], *, resume: bool = False) -> Path:
    """Check, writing nothing, that ``folder`` can take this run (see :mod:`attnlab.labs.run_folder`).

    Returns:
        The folder, resolved.

    Raises:
        ValueError: naming ``--out`` / ``--resume`` and the folder, for a folder the
            contract refuses, and (resume) a run of other settings.
    """
    path = check_claim(folder, kind="train", resume=resume)
    if resume:
        resume_config(path, config.to_dict())  # refuses other settings (but epochs), naming the differences
    return path


#: the files a train run writes at the top of its folder
_RUN_FILES = ("config.json", "metrics.jsonl", CHECKPOINT, "summary.json", "report.html")


def check_outputs(folder: Path) -> None:
    """Refuse, before anything is written, what the run could write only through a link, or not at all.

    A link at a file's own name is no danger: :func:`attnlab._io.atomic_write` replaces it. A folder
    there (at the top, or a ``.png`` in ``figures/``: the run writes its figures there), or a link or a file in place of
    ``figures/``, would fail (or write elsewhere) after training.

    Raises:
        ValueError: naming the entry and the folder.
    """
    figures = check_below(folder, folder / "figures" / "losses.png").parent
    pngs = [name for name in (os.listdir(figures) if figures.is_dir() else ()) if name.endswith(".png")]
    names = [*_RUN_FILES, *(f"figures/{name}" for name in pngs)]
    for name in names:
        try:
            mode = os.lstat(folder / name).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(mode):
            raise ValueError(f"{name!r} in {str(folder)!r} is a folder where the run writes a file; remove it")
