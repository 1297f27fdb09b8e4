"""A squares run's ``metrics.jsonl``, checked against its checkpoint before a resume writes anything.

``metrics.jsonl`` holds one line per epoch (the trainer's
:data:`~attnlab.training.loop.EpochRecord`: epoch, loss, val_loss, lr, seconds, best),
written just before that epoch's checkpoint. So a run killed at any moment leaves, after
the lines of the epochs its checkpoint holds, at most the line of the next epoch (killed
between the line and its checkpoint) and half a line (killed while writing it): both are
dropped on resume. Anything else is damage (an epoch missing, repeated or past the
checkpoint's, a loss that is not the checkpoint's, a line that is not a record): the
resume is refused, naming the line, and the file is left as it is. A ``metrics.jsonl``
that is not there is rebuilt from the checkpoint's own history (the times are lost).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from attnlab._io import read_text
from attnlab.training.loop import History

__all__ = ["resumed_lines"]


def resumed_lines(path: Path, history: History | None, *, lr: float,
                  checkpoint: str = "checkpoint.pt") -> tuple[list[str], str | None]:
    """The lines ``metrics.jsonl`` keeps when a run resumes from ``history``, and a note if they were rebuilt.

    Args:
        path: the run's ``metrics.jsonl`` (it may be missing).
        history: the checkpoint's history (its epochs and per-epoch losses); None: the run has no
            checkpoint (killed before its first one), so at most one epoch's line may be there.
        lr: the learning rate of every epoch (the squares runs have no scheduler), for rebuilt lines.
        checkpoint: the checkpoint's file name, for messages.

    Returns:
        ``(lines, note)``: the lines of epochs 1 to ``history.epochs``, as found or rebuilt; ``note``
        says what was rebuilt, or is None.

    Raises:
        ValueError: naming ``--resume``, the file and the line, for a history the checkpoint does not
            hold, and for a history of several epochs without a checkpoint.
    """
    epochs = 0 if history is None else history.epochs
    if not os.path.lexists(path):
        if history is None or epochs == 0:
            return [], None
        note = (f"{path.name} was missing: rebuilt epochs 1 to {epochs} from {checkpoint}'s history "
                "(without their times)")
        return _rebuilt(history, lr), note
    where = f"--resume: {str(path)!r}"
    records = _records(read_text(path, what="metrics.jsonl"), where)
    if history is None:
        if len(records) > 1:
            raise ValueError(f"{where} records {len(records)} epochs, but there is no {checkpoint} to resume them "
                             f"from; restore {checkpoint}, or start a new run in another folder")
        return [], None
    restore = f"restore it, or move it away to rebuild it from {checkpoint}'s history"
    for index, (number, _, record) in enumerate(records):
        if index > epochs:  # more than the one line a kill between it and its checkpoint leaves
            raise ValueError(f"{where} line {number} is epoch {record['epoch']}; {checkpoint} holds {epochs} epochs "
                             f"(is it older than the history?); {restore}")
        if record["epoch"] != index + 1:
            raise ValueError(f"{where} line {number} is epoch {record['epoch']}, expected {index + 1}: the history "
                             f"is damaged; {restore}")
        if index < epochs:
            for key, saved in (("loss", history.losses[index]), ("val_loss", history.val_losses[index])):
                if not _same(record.get(key), saved):
                    raise ValueError(f"{where} line {number} (epoch {index + 1}) has {key} {record.get(key)!r}, "
                                     f"but {checkpoint} has {saved!r}: not this run's history; {restore}")
    if len(records) < epochs:
        found = "no epoch" if not records else "epoch 1" if len(records) == 1 else f"epochs 1 to {len(records)}"
        raise ValueError(f"{where} holds {found}, but {checkpoint} holds {epochs}: the history is damaged; {restore}")
    return [line for _, line, _ in records[:epochs]], None


def _records(text: str, where: str) -> list[tuple[int, str, dict[str, Any]]]:
    """``(line number, line, record)`` of every epoch record in ``text``; half a last line is dropped.

    Raises:
        ValueError: naming ``where`` and the line, for any other line that is not a record.
    """
    lines = text.splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: a line nested too deeply for Python's parser
            record = None
        if not isinstance(record, dict) or type(record.get("epoch")) is not int:
            if number == len(lines):
                break  # half a line: the process died while writing it
            raise ValueError(f"{where} line {number} is not an epoch record: {line[:60]!r}; the history is "
                             "damaged") from None
        records.append((number, line, record))
    return records


def _same(found: Any, saved: float | None) -> bool:
    """Whether a record's loss is the checkpoint's: equal (JSON keeps a float's every bit), both NaN or both None."""
    if saved is None or found is None or isinstance(found, bool) or not isinstance(found, (int, float)):
        return found is None and saved is None
    return found == saved or (math.isnan(found) and math.isnan(saved))


def _rebuilt(history: History, lr: float) -> list[str]:
    """The records of ``history``'s epochs as the trainer writes them, but for their times (unknown: null)."""
    lines, best = [], None
    for epoch, (loss, val_loss) in enumerate(zip(history.losses, history.val_losses, strict=True), start=1):
        # The trainer's rule (min_delta 0): the epoch's validation loss is below every earlier one.
        improved = val_loss is not None and not math.isnan(val_loss) and (best is None or val_loss < best)
        if improved:
            best = val_loss
        lines.append(json.dumps({"epoch": epoch, "loss": loss, "val_loss": val_loss, "lr": lr, "seconds": None,
                                 "best": improved}))
    return lines
