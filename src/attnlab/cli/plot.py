"""``attnlab plot NAME --out FILE``: draw one figure, of an encoding or of a trained run.

The figure names are listed here, without importing anything heavy; matplotlib, torch and
the functions that draw a figure are imported by :func:`run`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnlab._io import atomic_write, check_writable
from attnlab.cli._common import UsageError, add_threads_option, int_list, non_negative_int, parse_int, positive_int
from attnlab.cli._table_options import add_table_options

__all__ = ["FIGURE_NAMES", "RUN_FIGURES", "add_parser", "run"]

# Each figure: its defaults (d_model, max_len, rates) taken from the lab it comes from,
# a function of the parsed arguments that returns a Figure, and its help line.
FigureBuilder = Callable[[argparse.Namespace], Any]

if TYPE_CHECKING:
    import torch


def _figures() -> dict[str, tuple[tuple[int | None, int | None, str | None], FigureBuilder, str]]:
    from attnlab import plotting as P
    from attnlab.cli._tables import table_of
    from attnlab.encodings import angle_rates
    from attnlab.encodings.axial_rotary import axial_rotary_angles
    from attnlab.encodings.sinusoidal_nd import sinusoidal_2d
    from attnlab.plotting.encodings_nd import plot_axial_rotary, plot_encoding_2d

    def rates(a: argparse.Namespace) -> torch.Tensor:
        return angle_rates(a.d_model, base=a.base, rates=a.rates or "vaswani")

    pe_lab, tf_notebook, d2l = "the positional-encoding lab", "the TensorFlow notebook", "the d2l chapter"
    return {
        "encoding-degrees": ((None, 8, None), lambda a: P.encoding_degrees(3, a.bases, a.max_len),
                             f"fixed-base dials for --bases over --max-len positions ({pe_lab})"),
        "exponential-dials": ((8, 10, None), lambda a: P.exponential_dials(a.d_model, a.max_len, base=a.base),
                              f"dials of each sinusoid pair ({pe_lab})"),
        "encoding-heatmap": ((8, 10, None), lambda a: P.encoding_heatmap(a.d_model, a.max_len),
                             f"sines and cosines against position, and as meshes ({pe_lab})"),
        "distances": ((8, 5, None), lambda a: P.plot_distances(table_of(a), n=a.max_len),
                      f"distance between every two positions, values in the cells ({pe_lab})"),
        "angle-rates": ((100, 50, "linspace"), lambda a: P.plot_angle_rates(rates(a)),
                        f"angle rate of each pair, log scale ({tf_notebook})"),
        "angle-map": ((100, 50, "linspace"), lambda a: P.plot_angle_map(a.max_len, rates(a)),
                      f"angle of every pair at every position, in degrees ({tf_notebook})"),
        "encoding": ((100, 50, "linspace"), lambda a: P.plot_encoding(table_of(a)),
                     f"the table as a diverging heatmap ({tf_notebook})"),
        "similarity": ((100, 50, "linspace"), lambda a: P.plot_similarity(table_of(a)),
                       f"cosine similarity between every two positions ({tf_notebook})"),
        "nearby": ((100, 50, "linspace"), lambda a: P.plot_nearby(table_of(a), position=a.position),
                   f"dot product and SSE of every position against --position ({tf_notebook})"),
        "shifted": ((100, 50, "linspace"),
                    lambda a: P.plot_shifted(table_of(a).double(), a.delta, base=a.base, layout=a.layout,
                                             rates=a.rates),
                    f"the table moved --delta positions by the shift matrix ({tf_notebook})"),
        "columns": ((32, 60, None), lambda a: P.plot_columns(table_of(a), columns=a.columns),
                    f"columns 6-9 (or --columns) against position ({d2l})"),
        "heatmap-p": ((32, 60, None),
                      lambda a: P.plot_encoding(table_of(a), cmap="Blues", vmin=None, vmax=None,
                                                xlabel="Column (encoding dimension)", ylabel="Row (position)",
                                                origin="upper"),
                      f"heatmap of the table P ({d2l})"),
        "binary": ((None, 8, None), lambda a: P.plot_binary(a.max_len, d_model=a.d_model),
                   f"binary codes of 0..L-1 beside the sinusoids ({d2l})"),
        "sinusoidal-2d": ((64, 16, None),
                          lambda a: plot_encoding_2d(sinusoidal_2d(a.max_len, a.max_len, a.d_model, base=a.base)),
                          "2-D sinusoids of a --max-len x --max-len image grid: channels, one pixel's similarity"),
        "axial-rotary": ((32, 16, None),
                         lambda a: plot_axial_rotary(axial_rotary_angles(a.max_len, a.max_len, head_dim=a.d_model,
                                                                         base=a.base)),
                         "axial RoPE over a --max-len x --max-len grid (--d-model = head dim): one pixel's scores"),
    }


# Limits that keep every figure to a few seconds of drawing and its image within memory.
MAX_DIALS = 160  # each dial is its own axes, about 20 ms apiece to draw
MAX_PAIRWISE_POSITIONS = 2048  # distances and similarity draw every pair of positions
MAX_PIXELS = 100_000_000  # an RGBA image of 400 MB
GRID_FIGURES = ("sinusoidal-2d", "axial-rotary")
MAX_GRID_SIDE = 512  # the grid figures draw --max-len x --max-len pixels per panel


def _check_size(name: str, args: argparse.Namespace) -> None:
    """Refuse, naming the flags and values, a figure that would take minutes to draw.

    Raises:
        UsageError: for too many dials, too many positions for a pairwise figure, or
            too large a grid.
        ValueError: for a grid table that cannot fit in the memory available.
    """
    if name in ("exponential-dials", "encoding-degrees"):
        if name == "exponential-dials":
            rows, flag = (args.d_model + 1) // 2, f"--d-model {args.d_model}"
        else:
            rows, flag = min(3, len(args.bases)), f"--bases {','.join(map(str, args.bases))}"
        dials = rows * args.max_len
        if dials > MAX_DIALS:
            culprit = f"--max-len {args.max_len}" if args.max_len >= rows else flag
            raise UsageError(f"{culprit}: {rows} rows x {args.max_len} positions = {dials} dials; at most "
                             f"{MAX_DIALS} (each dial is its own axes: more take minutes to draw)")
    if name in GRID_FIGURES:
        if args.max_len > MAX_GRID_SIDE:
            raise UsageError(f"--max-len {args.max_len}: {name} draws a --max-len x --max-len grid; at most "
                             f"{MAX_GRID_SIDE} a side")
        from attnlab._limits import check_memory

        # The float32 table or angles and their float64 copy for drawing.
        check_memory(f"--max-len {args.max_len} squared x --d-model {args.d_model}: the grid table",
                     args.max_len**2 * args.d_model * 12)
    if name == "binary":
        from attnlab.plotting._common import check_cells

        bits = max(1, (args.max_len - 1).bit_length())  # the codes' columns, beside the table's
        check_cells({"--max-len": args.max_len, "(bits + --d-model)": bits + (args.d_model or 2 * bits)},
                    "the binary codes and the table")
    if name in ("distances", "similarity") and args.max_len > MAX_PAIRWISE_POSITIONS:
        raise UsageError(f"--max-len {args.max_len}: {name} draws every pair of positions; at most "
                         f"{MAX_PAIRWISE_POSITIONS} positions (more take minutes and gigabytes)")


def _check_pixels(fig: Any, dpi: int) -> None:
    """Refuse a ``--dpi`` that would make an image too big to hold, before it is drawn.

    Raises:
        UsageError: naming ``--dpi``, the image's size and the largest dpi that fits.
    """
    width, height = fig.get_size_inches()
    pixels = width * dpi * height * dpi
    if pixels > MAX_PIXELS or max(width, height) * dpi >= 2**16:  # Agg draws at most 2**16 pixels a side
        fits = int(min((MAX_PIXELS / (width * height)) ** 0.5, (2**16 - 1) / max(width, height)))
        raise UsageError(f"--dpi {dpi}: the figure would be {width * dpi:.0f} x {height * dpi:.0f} pixels; "
                         f"at most {MAX_PIXELS // 1_000_000} megapixels (--dpi {fits} or less for this figure)")


RUN_FIGURES = ("attention", "predictions", "losses")
FIGURE_NAMES = (
    "encoding-degrees", "exponential-dials", "encoding-heatmap", "distances",
    "angle-rates", "angle-map", "encoding", "similarity", "nearby", "shifted",
    "columns", "heatmap-p", "binary", *GRID_FIGURES, *RUN_FIGURES,
)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``plot`` subcommand to ``sub`` (argparse's subparsers)."""
    figure_list = "\n".join(f"  {name}" for name in FIGURE_NAMES)
    p: argparse.ArgumentParser = sub.add_parser(
        "plot", help="draw one of the figures to a file", description="draw one of the figures to a file",
        epilog=f"figures:\n{figure_list}\n\nexamples:\n  attnlab plot exponential-dials --out dials.png\n"
               "  attnlab plot shifted --delta -10 --out shifted.png",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=FIGURE_NAMES, metavar="NAME", help="which figure (listed below)")
    p.add_argument("--out", type=Path, required=True, help="output file (.png, .pdf or .svg)")
    add_table_options(p, d_model=None, max_len=None)
    p.add_argument("--bases", type=int_list, default=(4, 5, 7), help="bases for encoding-degrees")
    p.add_argument("--position", type=non_negative_int, default=20, help="position for 'nearby'")
    p.add_argument("--delta", type=parse_int, default=-10, help="shift for 'shifted' (default -10)")
    p.add_argument("--columns", type=int_list, default=(6, 7, 8, 9), help="columns for 'columns'")
    p.add_argument("--run", type=Path, default=None, help="run folder, for attention|predictions|losses")
    p.add_argument("--layer", default=None, help="attention layer to draw (attention figure)")
    p.add_argument("--dpi", type=positive_int, default=100)
    add_threads_option(p, what="a run figure's model (--run)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Draw the figure into ``--out``; returns the exit status.

    Raises:
        UsageError, ValueError, TypeError, OSError: for bad input, reported by
            :func:`attnlab.cli.main` as one line and exit status 2.
    """
    out = check_writable(args.out)
    if out.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise UsageError(f"--out {str(args.out)!r}: expected a .png, .pdf or .svg file name")
    if args.name in RUN_FIGURES:
        fig = _run_figure(args)
    else:
        for flag, value in (("--run", args.run), ("--threads", args.threads)):
            if value is not None:
                raise UsageError(f"{flag} goes with the run figures ({', '.join(RUN_FIGURES)}), not {args.name!r}")
        (d_model, max_len, rates), build, _ = _figures()[args.name]
        # Flags the user did not give take the defaults of the lab the figure comes from.
        args.d_model = args.d_model if args.d_model is not None else d_model
        args.max_len = args.max_len if args.max_len is not None else max_len
        args.rates = args.rates if args.rates is not None else (None if args.layout == "t2t" else rates)
        _check_size(args.name, args)
        fig = build(args)
    _check_pixels(fig, args.dpi)
    atomic_write(out, lambda tmp: fig.savefig(tmp, dpi=args.dpi, bbox_inches="tight"))
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _run_figure(args: argparse.Namespace) -> Any:
    """Figures of a trained squares run: its losses, its predictions, or one attention map."""
    from attnlab.labs.squares.train import load_run, run_threads
    from attnlab.training.threads import intra_op_threads

    if args.run is None:
        raise UsageError(f"plot {args.name} needs --run RUN_FOLDER")
    config, model, state = load_run(args.run)
    # The predictions figure runs the model on 10 squares, the attention maps on 2.
    with intra_op_threads(run_threads(config, model, squares=10, threads=args.threads)):
        return _draw_run_figure(args, config, model, state)


def _draw_run_figure(args: argparse.Namespace, config: Any, model: Any, state: dict[str, Any]) -> Any:
    """The run figure ``args.name`` of a loaded run."""
    from attnlab import plotting as P
    from attnlab.labs.squares.figures import attention_figures, predictions_figure
    from attnlab.labs.squares.train import test_squares

    if args.name == "losses":
        return P.plot_losses(state["loss"], state["val_loss"])
    squares = test_squares(config)
    if args.name == "predictions":
        return predictions_figure(model, squares)
    figures = attention_figures(model, squares)
    if not figures:
        raise UsageError("this run's model has no attention layer")
    if args.layer is None:
        if len(figures) == 1:
            return next(iter(figures.values()))
        raise UsageError(f"the model has several attention layers; choose one with --layer: {', '.join(figures)}")
    if args.layer not in figures:
        raise UsageError(f"unknown --layer {args.layer!r}; this model has: {', '.join(figures)}")
    return figures[args.layer]
