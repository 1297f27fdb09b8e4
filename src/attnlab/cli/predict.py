"""``attnlab predict``: the last two corners of a square, from its first two, by a trained run's model.

A ``--variable-len`` run's model takes 2 to 4 corners and gives the two that follow.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from attnlab.cli._common import FLOAT32_MAX, UsageError, add_threads_option

__all__ = ["add_parser", "parse_points", "run"]

EXAMPLES = ('examples:\n  attnlab predict --run runs/NAME --points "-1,-1 -1,1"\n'
            '  attnlab predict --run runs/NAME --points "1,1 1,-1" --json\n'
            '  attnlab predict --run runs/VARIABLE_LEN_RUN --points "-1,-1 -1,1 1,1"')


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``predict`` subcommand to ``sub`` (argparse's subparsers)."""
    what = "predict the last two corners of a square from its first two"
    p: argparse.ArgumentParser = sub.add_parser("predict", help=what, description=what, epilog=EXAMPLES,
                                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", type=Path, required=True, help="a run folder written by attnlab train")
    p.add_argument("--points", required=True,
                   help="the first two corners, 'x0,y0 x1,y1' (2 to 4 corners for a --variable-len run)")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_threads_option(p, what="the prediction")
    p.set_defaults(func=run)
    return p


def parse_points(text: str, counts: tuple[int, ...] = (2,)) -> list[list[float]]:
    """``'x0,y0 x1,y1 ...'`` -> ``K`` points ``[[x0, y0], [x1, y1], ...]``, ``K`` one of ``counts``.

    Raises:
        UsageError: naming ``--points``, for anything but ``K`` finite points.
    """
    pairs = text.replace(";", " ").split()
    if len(pairs) not in counts:
        many = "two" if counts == (2,) else f"{counts[0]} to {counts[-1]}"
        raise UsageError(f"--points {text!r}: expected {many} points 'x0,y0 x1,y1{' ...' if counts != (2,) else ''}'")
    values: list[list[float]] = []
    for pair in pairs:
        parts = pair.split(",")
        try:
            if len(parts) != 2:
                raise ValueError
            x, y = (float(v) for v in parts)
        except ValueError:
            raise UsageError(f"--points {text!r}: cannot read {pair!r} as 'x,y'") from None
        if not (math.isfinite(x) and math.isfinite(y)):
            raise UsageError(f"--points {text!r}: {pair!r} is not finite")
        if max(abs(x), abs(y)) > FLOAT32_MAX:  # the model computes in float32, where it would be inf
            raise UsageError(f"--points {text!r}: {pair!r} is not finite in float32, the model's dtype "
                             "(|x| <= 3.4e38)")
        values.append([x, y])
    return values


def run(args: argparse.Namespace) -> int:
    """Print the predicted corners; returns the exit status.

    Raises:
        UsageError: if the model's prediction for ``--points`` is not finite.
    """
    from attnlab.labs.squares.train import load_run, run_threads
    from attnlab.training.threads import intra_op_threads

    config, model, _ = load_run(args.run)
    parsed = parse_points(args.points, (2, 3, 4) if config.variable_len else (2,))
    with intra_op_threads(run_threads(config, model, squares=1, threads=args.threads)):
        return _predict(args, config, model, parsed)


def _predict(args: argparse.Namespace, config: Any, model: Any, parsed: list[list[float]]) -> int:
    """Print the corners ``model`` predicts from the ``parsed`` points; returns the exit status."""
    import torch

    from attnlab.labs.squares.train import predict_corners

    points = torch.tensor([parsed], dtype=torch.float32)  # [1, K, 2]
    given = points.shape[1]
    if config.variable_len:  # padded to the model's 4 steps, the padding masked
        padded = torch.cat([points, points.new_zeros(1, 4 - given, 2)], dim=1)  # [1, 4, 2]
        mask = (torch.arange(4) < given).reshape(1, 1, 4)  # [1, 1, 4]
        predicted = predict_corners(model, padded, source_mask=mask)[0]  # [2, 2]
    else:
        predicted = predict_corners(model, points)[0]  # [2, 2]
    if not bool(predicted.isfinite().all()):
        # Points far outside the squares it learned (about -1 to 1) overflow inside the model.
        raise UsageError(f"--points {args.points!r}: the model's prediction is not finite "
                         f"({predicted.flatten().tolist()}); these points are too far from the unit squares "
                         "it was trained on")
    corners = predicted.tolist()
    if args.json:
        print(json.dumps({"points": points[0].tolist(), "predicted": corners}, allow_nan=False))
    else:
        # Numbered along the walk: a square's corners 3 and 4, or the points after the given ones.
        word = "point" if config.variable_len else "corner"
        for k, (x, y) in enumerate(corners, start=given + 1):
            print(f"{word} {k}: {x:.4f}, {y:.4f}")
    return 0
