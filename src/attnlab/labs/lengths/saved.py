"""What a comparison folder holds, read and checked before anything in it is written.

A resume trusts nothing it reads. ``config.json`` is read with :func:`attnlab._io.read_json` and
rebuilt through :class:`~attnlab.labs.lengths.config.CompareConfig`; ``models/`` holds only the
folders of the settings' runs, none of them (nor ``models``) a link; and every finished model's
``record.json`` passes :func:`check_model_record`, the one validator of a saved model. Only
when all of it holds is the folder written (:mod:`attnlab.labs.lengths.compare`), so a refused
resume leaves every file, ``results.json`` included, as it was.

Records are ``{"encoding", "seed", "length", METRIC...}``, one per test length, the metrics
being the task's (:attr:`attnlab.data.tasks.task.Task.metrics`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnlab._io import check_below, read_json
from attnlab._validate import check_finite_float, check_int, check_keys
from attnlab.encodings.registry import SchemeImportError, import_location
from attnlab.labs.lengths.config import CompareConfig
from attnlab.labs.run_folder import is_temporary

__all__ = ["MODELS", "check_model_record", "check_records", "model_name", "read_config", "saved_models"]

#: the folder of the finished models, ``models/ENCODING-seedK/`` each
MODELS = "models"
#: what a model's record.json holds (``n_parameters``: not in the records of the first attnlab that saved models)
_MODEL_KEYS = ("encoding", "seed", "seconds", "n_parameters", "records")


def model_name(encoding: str, seed: int) -> str:
    """The folder of one model under ``models/``: ``ENCODING-seedK``."""
    return f"{encoding}-seed{seed}"


def check_records(records: Any, *, config: CompareConfig, encoding: str, seed: int, what: str) -> list[dict[str, Any]]:
    """Check the records of one model: a record per test length of ``config``, each of this encoding and seed.

    Each record holds ``encoding``, ``seed``, ``length`` and every metric of the task,
    nothing else; a metric is a finite number, an accuracy in [0, 1], an error >= 0.

    Args:
        records: the list to check.
        config: the comparison's settings (its task, metrics and test lengths).
        encoding, seed: the model the records must be of.
        what: how to name the records in messages (``record.json 'PATH'``).

    Returns:
        ``records``.

    Raises:
        ValueError: naming ``what``, the record and the field, for anything else.
    """
    if not isinstance(records, list):
        raise ValueError(f"{what}: 'records' must be a list, got {type(records).__name__}")
    if not records:
        raise ValueError(f"{what} holds no records (one per test length: {list(config.test_lens)})")
    metrics = config.task_object.metrics
    lengths: list[int] = []
    for i, record in enumerate(records):
        where = f"{what}: record {i}"
        try:
            check_keys(where, record, ("encoding", "seed", "length", *metrics), complete=True)
            length = check_int(f"{where}: length", record["length"], minimum=1)
            for metric in metrics:
                value = check_finite_float(f"{where}: {metric}", record[metric])
                if metric.endswith("accuracy") and not 0.0 <= value <= 1.0:
                    raise ValueError(f"{where}: {metric} {record[metric]!r} is an accuracy, in [0, 1]")
                if not value >= 0.0:
                    raise ValueError(f"{where}: {metric} {record[metric]!r} is an error, at least 0")
        except TypeError as err:  # a wrong type is a damaged file here, not a caller's mistake
            raise ValueError(str(err)) from None
        _check_model(where, record, encoding, seed)
        if length in lengths:
            raise ValueError(f"{what} holds length {length} twice: one record per test length")
        lengths.append(length)
    if sorted(lengths) != sorted(config.test_lens):
        raise ValueError(f"{what} holds lengths {sorted(lengths)}, and the settings test lengths "
                         f"{sorted(config.test_lens)}")
    return records


def _check_model(where: str, doc: dict[str, Any], encoding: str, seed: int) -> None:
    """``doc``'s ``encoding`` and ``seed`` are the model's (``seed`` an integer, never a bool)."""
    if doc["encoding"] != encoding:
        raise ValueError(f"{where} names encoding {doc['encoding']!r}, not {encoding!r}")
    if isinstance(doc["seed"], bool) or doc["seed"] != seed or not isinstance(doc["seed"], int):
        raise ValueError(f"{where} names seed {doc['seed']!r}, not seed {seed}")


def check_model_record(doc: Any, *, config: CompareConfig, encoding: str, seed: int, what: str) -> dict[str, Any]:
    """Check one saved model (a ``record.json``'s JSON value): the one validator, for a resume and a save alike.

    Args:
        doc: ``{"encoding", "seed", "seconds", "n_parameters" (optional), "records"}``.
        config: the comparison's settings.
        encoding, seed: the model its folder holds.
        what: how to name it in messages.

    Returns:
        ``doc``.

    Raises:
        ValueError: naming ``what`` and the field: a key missing or unknown, another encoding
            or seed, a time that is not a finite number >= 0, a size that is not a count, and
            what :func:`check_records` refuses.
    """
    required = [key for key in _MODEL_KEYS if key != "n_parameters"]
    check_keys(what, doc, _MODEL_KEYS)
    missing = [key for key in required if key not in doc]
    if missing:
        raise ValueError(f"{what} lacks {', '.join(map(repr, missing))}")
    _check_model(what, doc, encoding, seed)
    try:
        seconds = check_finite_float(f"{what}: seconds", doc["seconds"])
        if seconds < 0:
            raise ValueError(f"{what}: seconds must be at least 0, got {seconds}")
        if "n_parameters" in doc:
            check_int(f"{what}: n_parameters", doc["n_parameters"], minimum=0)
    except TypeError as err:
        raise ValueError(str(err)) from None
    check_records(doc["records"], config=config, encoding=encoding, seed=seed, what=what)
    return dict(doc)


def read_config(folder: Path) -> CompareConfig | None:
    """The settings saved in ``folder``: its ``config.json``.

    Returns:
        The settings, or None if the folder holds none yet (killed before writing them).

    Raises:
        ValueError: naming the file, for one that is a link, not a regular file, not JSON,
            nested too deeply, or settings :class:`CompareConfig` refuses.
    """
    path = folder / "config.json"
    if not os.path.lexists(path):
        return None
    doc = read_json(_not_a_link(folder, path), what=path.name)
    try:
        _check_imports(folder, doc)
        return CompareConfig.from_dict(doc)
    except SchemeImportError as err:  # the settings are fine: their scheme's module is not on the path here
        raise ValueError(f"--resume {str(folder)!r}: the run's settings name a scheme that cannot be loaded here: "
                         f"{err}") from None
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise ValueError(f"--resume {str(folder)!r}: {path.name} is unreadable: {err}") from None


def _check_imports(folder: Path, doc: Any) -> None:
    """Refuse a saved ``"module:Class"`` encoding whose module would be imported from inside the run folder.

    Resuming imports the modules a config names (their code runs): from the environment
    only, never from a folder that came with the results.
    """
    encodings = doc.get("encodings") if isinstance(doc, dict) else None
    for encoding in encodings if isinstance(encodings, list) else []:
        where = import_location(encoding) if isinstance(encoding, str) else None
        if where is not None and where.resolve().is_relative_to(folder.resolve()):
            raise ValueError(f"--resume {str(folder)!r}: encoding {encoding!r} would be imported from {str(where)!r}, "
                             "inside the run folder; attnlab imports a scheme's module from the environment only "
                             "(install it, or put it on PYTHONPATH outside the folder)")


def _not_a_link(root: Path, path: Path) -> Path:
    """``path``, checked to lie inside ``root``: no link on the way, and not itself a link."""
    check_below(root, path)
    if os.path.islink(path):
        raise ValueError(f"{str(path.relative_to(root))!r} in {str(root)!r} is a symbolic link (to "
                         f"{os.readlink(path)!r}); attnlab reads a run's files only inside its folder: "
                         "put the file itself there")
    return path


def saved_models(config: CompareConfig, folder: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """Every finished model of ``config`` in ``folder`` (resolved), read and checked; nothing is written.

    A model folder without a ``record.json`` is unfinished (killed mid-save): it trains again.

    Returns:
        ``{(encoding, seed): record.json's dict}`` for the finished models.

    Raises:
        ValueError: naming the path: ``models`` or a model folder that is a link or not a
            folder, an entry of ``models`` that is no model of the settings, a ``record.json``
            that is a link, a special file, not JSON, or refused by :func:`check_model_record`;
            each saying how to train that model again.
    """
    runs = {model_name(encoding, seed): (encoding, seed) for encoding, seed in config.runs()}
    models = folder / MODELS
    check_below(folder, models / "_")  # `models` itself: a link or a file is refused
    if not os.path.lexists(models):
        return {}
    for entry in sorted(os.listdir(models)):
        path = models / entry
        if entry not in runs and not is_temporary(entry):
            raise ValueError(f"--resume: {str(path)!r} is not a model of this comparison (its models: "
                             f"{_listed(list(runs))}); remove it, or resume with the settings it was made with")
    done = {}
    for name, (encoding, seed) in runs.items():
        record = models / name / "record.json"
        check_below(folder, record)  # the model's folder: a link or a file is refused
        if not os.path.lexists(record):
            continue
        what = f"record.json {str(record)!r}"
        try:
            doc = read_json(_not_a_link(folder, record), what="record.json")
            done[encoding, seed] = check_model_record(doc, config=config, encoding=encoding, seed=seed, what=what)
        except ValueError as err:
            raise ValueError(f"--resume: {err}; delete {str(models / name)!r} to train that model again") from None
    return done


def _listed(names: Sequence[str]) -> str:
    return ", ".join(names[:4]) + (f", ... ({len(names)} in all)" if len(names) > 4 else "")
