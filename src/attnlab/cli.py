"""The ``attnlab`` command line: train the seed models, print, audit and draw encodings.

One subcommand per verb (``attnlab VERB --help`` for each)::

    attnlab train                                   # seed 000's model, run folder in runs/
    attnlab predict --run runs/NAME --points "-1,-1 -1,1"
    attnlab encode --d-model 8 --max-len 10 --round 4
    attnlab audit --encoding fixed-base --max-len 200
    attnlab plot exponential-dials --out dials.png

Bad input never shows a traceback: the message goes to stderr as one line
and the exit status is 2 (argparse's convention for usage errors). Set
``ATTNLAB_DEBUG=1`` to see the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch

from attnlab import __version__
from attnlab._io import atomic_write, check_writable
from attnlab.encodings import LAYOUTS, RATES, fixed_base, sinusoidal

__all__ = ["main", "build_parser"]

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16,
          "float32": torch.float32, "float64": torch.float64}
ENCODINGS = ("sinusoidal", "fixed-base", "learned", "seed-float32")


class UsageError(Exception):
    """A problem with the command line, reported as one line and exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but its errors are one line on stderr (no usage block) and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


# --- argument types: each names the flag and the bad value in its message ------------

def _int_arg(minimum: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number, at least ``minimum`` when given."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if minimum is not None and value < minimum:
            bound = "positive" if minimum == 1 else f">= {minimum}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    return parse


_positive_int, _non_negative_int, _int = _int_arg(1), _int_arg(0), _int_arg()


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one number, got {text!r}")
    return values


def _add_table_options(p: argparse.ArgumentParser, *, d_model: int | None, max_len: int | None) -> None:
    """The options that choose a sinusoidal table (shared by encode, audit and plot)."""
    p.add_argument("--d-model", type=_positive_int, default=d_model, metavar="D",
                   help=f"model dimension (default: {d_model if d_model else 'per figure'})")
    p.add_argument("--max-len", type=_positive_int, default=max_len, metavar="L",
                   help=f"number of positions (default: {max_len if max_len else 'per figure'})")
    p.add_argument("--layout", choices=LAYOUTS, default="interleaved",
                   help="column layout: interleaved (the paper, the seeds), concat ([sin | cos]), "
                        "t2t (tensor2tensor/fairseq/Whisper)")
    p.add_argument("--rates", choices=RATES, default=None,
                   help="angle rates: vaswani (base^(-2i/D)) or linspace (seed 001, t2t)")
    p.add_argument("--base", type=_positive_float, default=10000.0, help="wavelength scale (default 10000)")


def _add_encoding_options(p: argparse.ArgumentParser) -> None:
    """Which encoding to build, and in what dtype (shared by encode and audit)."""
    _add_table_options(p, d_model=8, max_len=10)
    p.add_argument("--encoding", choices=ENCODINGS, default="sinusoidal",
                   help="sinusoidal (with --layout/--rates), fixed-base (with --bases), learned "
                        "(an untrained N(0, 0.02) table), seed-float32 (the seeds' float32 formula)")
    p.add_argument("--bases", type=_int_list, default=(4, 5, 7), help="fixed-base bases (default 4,5,7)")
    p.add_argument("--seed", type=_int, default=0, help="seed of the random learned table")
    p.add_argument("--dtype", choices=DTYPES, default="float32")


# --- encode ---------------------------------------------------------------------------

def _build_table(args: argparse.Namespace, dtype: torch.dtype) -> torch.Tensor:
    """The table the encode/audit options describe, in ``dtype``."""
    if args.encoding == "fixed-base":
        return fixed_base(args.max_len, args.bases, dtype=dtype)
    if args.encoding == "learned":
        # An untrained learned table: N(0, 0.02) from a private generator, so the
        # audit shows what a learned table does *not* guarantee.
        g = torch.Generator().manual_seed(args.seed)
        return (torch.randn(args.max_len, args.d_model, generator=g, dtype=torch.float64) * 0.02).to(dtype)
    if args.encoding == "seed-float32":
        return _seed_float32_table(args.max_len, args.d_model, args.base).to(dtype)
    return sinusoidal(args.max_len, args.d_model, base=args.base, layout=args.layout,
                      rates=args.rates, dtype=dtype)


def _seed_float32_table(max_len: int, d_model: int, base: float) -> torch.Tensor:
    """The seeds' own formula (float32 angles), kept to show what float64 fixes."""
    position = torch.arange(0, max_len).float().unsqueeze(1)  # [L, 1]
    speed = torch.exp(torch.arange(0, d_model, 2).float() * (-np.log(base) / d_model))  # [ceil(D/2)]
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(speed * position)
    table[:, 1::2] = torch.cos(speed * position)[:, : d_model // 2]
    return table


def _cmd_encode(args: argparse.Namespace) -> int:
    out = check_writable(args.out) if args.out else None
    if out is not None and out.suffix not in (".npy", ".csv"):
        raise UsageError(f"--out {str(args.out)!r}: expected a .npy or .csv file name")
    table = _build_table(args, DTYPES[args.dtype])
    if out is not None:
        array = table.double().numpy() if table.dtype in (torch.bfloat16, torch.float16) else table.numpy()
        if out.suffix == ".npy":
            atomic_write(out, lambda tmp: np.save(tmp, array))
        else:
            atomic_write(out, lambda tmp: np.savetxt(tmp, array, delimiter=",", fmt="%.10g"))
        print(f"wrote {out} ({table.shape[0]} x {table.shape[1]}, {args.dtype})", file=sys.stderr)
        return 0
    if args.round is not None:
        # Round the formula's exact values, not their float32 rounding: cos(0.01) =
        # 0.99995000042 shows as 1.0000 (as the seeds print it), where its nearest
        # float32, 0.99994999, would show as 0.9999. Half types keep their own
        # values, since their rounding is what a user asking for them wants to see.
        exact = table if table.dtype in (torch.float16, torch.bfloat16) else _build_table(args, torch.float64)
        shown_dtype = torch.float64 if table.dtype == torch.float64 else torch.float32
        table = torch.round(exact.double(), decimals=args.round).to(shown_dtype)
    with _print_options(precision=args.round if args.round is not None else 4):
        print(table)
    return 0


class _print_options:
    """torch.set_printoptions for the duration of a block (torch has no context manager for it)."""

    def __init__(self, precision: int) -> None:
        self.precision = precision

    def __enter__(self) -> None:
        torch.set_printoptions(precision=self.precision, sci_mode=False)

    def __exit__(self, *exc: object) -> None:
        torch.set_printoptions(profile="default")


# --- audit ----------------------------------------------------------------------------

def _cmd_audit(args: argparse.Namespace) -> int:
    from attnlab.analysis import audit

    dtype = DTYPES[args.dtype]
    table = _build_table(args, dtype)
    reference = None
    if args.encoding == "sinusoidal" or args.encoding == "seed-float32":
        # Precision is measured against the paper's formula evaluated in float64.
        reference = sinusoidal(args.max_len, args.d_model, base=args.base,
                               layout="interleaved" if args.encoding == "seed-float32" else args.layout,
                               rates=None if args.encoding == "seed-float32" else args.rates,
                               dtype=torch.float64)
    elif args.encoding == "fixed-base":
        reference = fixed_base(args.max_len, args.bases, dtype=torch.float64)
    report = audit(table, reference=reference, max_positions=args.max_positions)
    if args.json:
        print(json.dumps({"encoding": args.encoding, **report.to_dict()}, indent=2))
    else:
        variant = f", layout {args.layout}" if args.encoding == "sinusoidal" else ""
        print(f"encoding: {args.encoding}{variant}")
        print(report.format())
    return 0


# --- plot -----------------------------------------------------------------------------

# Each figure: its defaults (d_model, max_len, rates) taken from the seed it comes from,
# and a function of the parsed arguments that returns a Figure.
FigureBuilder = Callable[[argparse.Namespace], Any]


def _table(a: argparse.Namespace) -> torch.Tensor:
    return sinusoidal(a.max_len, a.d_model, base=a.base, layout=a.layout, rates=a.rates)


def _figures() -> dict[str, tuple[tuple[int | None, int | None, str | None], FigureBuilder, str]]:
    from attnlab import plotting as P
    from attnlab.encodings import angle_rates

    return {
        # seed 000
        "encoding-degrees": ((None, 8, None), lambda a: P.encoding_degrees(3, a.bases, a.max_len),
                             "fixed-base dials for --bases over --max-len positions (seed 000)"),
        "exponential-dials": ((8, 10, None), lambda a: P.exponential_dials(a.d_model, a.max_len, base=a.base),
                              "dials of each sinusoid pair (seed 000)"),
        "encoding-heatmap": ((8, 10, None), lambda a: P.encoding_heatmap(a.d_model, a.max_len),
                             "sines and cosines against position, and as meshes (seed 000)"),
        "distances": ((8, 5, None), lambda a: P.plot_distances(_table(a), n=a.max_len),
                      "distance between every two positions, values in the cells (seed 000)"),
        # seed 001
        "angle-rates": ((100, 50, "linspace"),
                        lambda a: P.plot_angle_rates(
                            angle_rates(a.d_model, base=a.base, rates=a.rates or "vaswani")),
                        "angle rate of each pair, log scale (seed 001)"),
        "angle-map": ((100, 50, "linspace"),
                      lambda a: P.plot_angle_map(a.max_len, angle_rates(a.d_model, base=a.base,
                                                                        rates=a.rates or "vaswani")),
                      "angle of every pair at every position, in degrees (seed 001)"),
        "encoding": ((100, 50, "linspace"), lambda a: P.plot_encoding(_table(a)),
                     "the table as a diverging heatmap (seed 001)"),
        "similarity": ((100, 50, "linspace"), lambda a: P.plot_similarity(_table(a)),
                       "cosine similarity between every two positions (seed 001)"),
        "nearby": ((100, 50, "linspace"), lambda a: P.plot_nearby(_table(a), position=a.position),
                   "dot product and SSE of every position against --position (seed 001)"),
        "shifted": ((100, 50, "linspace"),
                    lambda a: P.plot_shifted(_table(a).double(), a.delta, base=a.base, layout=a.layout,
                                             rates=a.rates),
                    "the table moved --delta positions by the shift matrix (seed 001)"),
        # seed 002
        "columns": ((32, 60, None), lambda a: P.plot_columns(_table(a), columns=a.columns),
                    "columns 6-9 (or --columns) against position (seed 002)"),
        "heatmap-p": ((32, 60, None),
                      lambda a: P.plot_encoding(_table(a), cmap="Blues", vmin=None, vmax=None,
                                                xlabel="Column (encoding dimension)", ylabel="Row (position)",
                                                origin="upper"),
                      "heatmap of the table P (seed 002)"),
        "binary": ((None, 8, None), lambda a: P.plot_binary(a.max_len, d_model=a.d_model),
                   "binary codes of 0..L-1 beside the sinusoids (seed 002)"),
    }


def _cmd_plot(args: argparse.Namespace) -> int:
    out = check_writable(args.out)
    if out.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise UsageError(f"--out {str(args.out)!r}: expected a .png, .pdf or .svg file name")
    if args.name in RUN_FIGURES:
        return _plot_run(args, out)
    if args.run is not None:
        raise UsageError(f"--run goes with the run figures ({', '.join(RUN_FIGURES)}), not {args.name!r}")
    (d_model, max_len, rates), build, _ = _figures()[args.name]
    # Flags the user did not give take the defaults of the seed the figure comes from.
    args.d_model = args.d_model if args.d_model is not None else d_model
    args.max_len = args.max_len if args.max_len is not None else max_len
    args.rates = args.rates if args.rates is not None else (None if args.layout == "t2t" else rates)
    fig = build(args)
    atomic_write(out, lambda tmp: fig.savefig(tmp, dpi=args.dpi, bbox_inches="tight"))
    print(f"wrote {out}", file=sys.stderr)
    return 0


RUN_FIGURES = ("attention", "predictions", "losses")


def _plot_run(args: argparse.Namespace, out: Path) -> int:
    """Figures of a trained run: its losses, its predictions, or its attention maps."""
    from attnlab import plotting as P
    from attnlab.runs import load_run, test_squares

    if args.run is None:
        raise UsageError(f"plot {args.name} needs --run RUN_FOLDER")
    config, model, state = load_run(args.run)
    if args.name == "losses":
        fig = P.plot_losses(state["loss"], state["val_loss"])
    else:
        full_test, directions = test_squares(config)
        if args.name == "predictions":
            fig = P.sequence_pred(model, full_test, directions)
        else:
            fig = _attention_figure(model, full_test, directions, args.layer)
    atomic_write(out, lambda tmp: fig.savefig(tmp, dpi=args.dpi, bbox_inches="tight"))
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _attention_figure(model: Any, full_test: torch.Tensor, directions: Any, layer: str | None) -> Any:
    from attnlab.runs import attention_figures

    figures = attention_figures(model, full_test, directions)
    if not figures:
        raise UsageError("this run's model has no attention layer")
    if layer is None:
        if len(figures) == 1:
            return next(iter(figures.values()))
        raise UsageError(f"the model has several attention layers; choose one with --layer: {', '.join(figures)}")
    if layer not in figures:
        raise UsageError(f"unknown --layer {layer!r}; this model has: {', '.join(figures)}")
    return figures[layer]


# --- train and predict ----------------------------------------------------------------

def _cmd_train(args: argparse.Namespace) -> int:
    from attnlab.runs import RunConfig, check_run_folder, train_run

    extra = {} if args.train_seed is None else {"train_seed": args.train_seed}
    config = RunConfig(model=args.model, epochs=args.epochs, seed=args.seed, lr=args.lr,
                       batch_size=args.batch_size, n_train=args.n_train, **extra)
    folder = args.out if args.out is not None else _default_run_folder(args.model)
    check_run_folder(config, folder, resume=args.resume)  # a bad --out: one line on stderr, nothing printed
    print(f"training {config.model} for {config.epochs} epochs -> {folder}", flush=True)
    result = train_run(config, folder, resume=args.resume, progress=None if args.progress else False)
    print(f"final train MSE {result.train_mse:.4f} | test MSE {result.test_mse:.4f} "
          f"({result.epochs} epochs, {config.n_test} test squares)")
    print(f"run folder: {result.folder} (open {result.folder / 'report.html'})")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from attnlab.compare import QUICK, CompareConfig, check_compare_folder, format_table, run_compare

    settings: dict[str, Any] = {"task": args.task, "train_len": args.train_len, "architecture": args.architecture}
    if args.quick:
        settings.update(QUICK)
    for flag in ("seeds", "epochs", "n_train"):
        value = getattr(args, flag)
        if value is not None:
            settings[flag] = value
    if args.encodings is not None:
        settings["encodings"] = tuple(name.strip() for name in args.encodings.split(",") if name.strip())
    if args.test_lens is not None:
        settings["test_lens"] = args.test_lens
    elif args.train_len != 8:
        # The default test lengths are 1, 1.5, 2 and 3 times the training length.
        n = args.train_len
        settings["test_lens"] = tuple(sorted({n, (3 * n) // 2, 2 * n, 3 * n}))
    config = CompareConfig(**settings)  # every value checked here, before any training
    folder = args.out
    if folder is None:
        folder = _default_run_folder(f"compare-{config.task}")
        folder.parent.mkdir(exist_ok=True)  # runs/ is ours to create; a given --out's parent must exist
    check_compare_folder(folder)  # a bad --out is one line on stderr, before anything is printed or trained
    n_models = len(config.encodings) * config.seeds
    print(f"comparing {len(config.encodings)} encodings x {config.seeds} seed(s) on {config.task}, "
          f"train length {config.train_len}, test lengths {', '.join(map(str, config.test_lens))} -> {folder}",
          flush=True)
    result = run_compare(config, folder, progress=None if args.progress else False)
    print(format_table(result))
    print(f"{n_models} models in {result.seconds:.0f} s; results: {folder / 'results.json'} "
          f"(open {folder / 'report.html'})")
    return 0


def _default_run_folder(model: str) -> Path:
    import datetime as dt

    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{model}-{stamp}"


def _parse_points(text: str) -> torch.Tensor:
    """'x0,y0 x1,y1' -> tensor [1, 2, 2]."""
    pairs = text.replace(";", " ").split()
    if len(pairs) != 2:
        raise UsageError(f"--points {text!r}: expected two points 'x0,y0 x1,y1'")
    values = []
    for pair in pairs:
        parts = pair.split(",")
        try:
            if len(parts) != 2:
                raise ValueError
            x, y = (float(v) for v in parts)
        except ValueError:
            raise UsageError(f"--points {text!r}: cannot read {pair!r} as 'x,y'") from None
        if not all(np.isfinite([x, y])):
            raise UsageError(f"--points {text!r}: {pair!r} is not finite")
        values.append([x, y])
    return torch.tensor([values], dtype=torch.float32)  # [1, 2, 2]


def _cmd_predict(args: argparse.Namespace) -> int:
    from attnlab.runs import load_run, predict_corners

    points = _parse_points(args.points)
    _, model, _ = load_run(args.run)
    corners = predict_corners(model, points)[0].tolist()  # [2, 2]
    if args.json:
        print(json.dumps({"points": points[0].tolist(), "predicted": corners}))
    else:
        for k, (x, y) in enumerate(corners, start=3):
            print(f"corner {k}: {x:.4f}, {y:.4f}")
    return 0


# --- the parser -----------------------------------------------------------------------

FIGURE_NAMES = (
    "encoding-degrees", "exponential-dials", "encoding-heatmap", "distances",
    "angle-rates", "angle-map", "encoding", "similarity", "nearby", "shifted",
    "columns", "heatmap-p", "binary", *RUN_FIGURES,
)


def build_parser() -> argparse.ArgumentParser:
    """The ``attnlab`` argument parser (exposed for the tests and for docs)."""
    parser = _Parser(prog="attnlab", description="Attention and positional encoding, exact and explained.",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"attnlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def add(name: str, help_: str, epilog: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_, description=help_, epilog=epilog,
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    enc = add("encode", "print (or save) a positional-encoding table",
              "examples:\n  attnlab encode --d-model 8 --max-len 10 --round 4\n"
              "  attnlab encode --d-model 512 --max-len 4096 --out pe.npy")
    _add_encoding_options(enc)
    enc.add_argument("--round", type=_non_negative_int, default=None, metavar="N",
                     help="round the printed values to N decimals (the seeds print 4)")
    enc.add_argument("--out", type=Path, default=None, help="write the table to a .npy or .csv file")
    enc.set_defaults(func=_cmd_encode)

    aud = add("audit", "measure an encoding's properties: bounded, unique, shift-invariant, ...",
              "examples:\n  attnlab audit --encoding sinusoidal --d-model 8 --max-len 10\n"
              "  attnlab audit --encoding fixed-base --max-len 200 --json\n"
              "  attnlab audit --encoding seed-float32 --d-model 64 --max-len 100000")
    _add_encoding_options(aud)
    aud.add_argument("--max-positions", type=_positive_int, default=1024,
                     help="positions used by the pairwise checks (default 1024)")
    aud.add_argument("--json", action="store_true", help="print the report as JSON")
    aud.set_defaults(func=_cmd_audit)

    figure_list = "\n".join(f"  {name}" for name in FIGURE_NAMES)
    plo = add("plot", "draw one of the figures to a file",
              f"figures:\n{figure_list}\n\nexamples:\n  attnlab plot exponential-dials --out dials.png\n"
              "  attnlab plot shifted --delta -10 --out shifted.png")
    plo.add_argument("name", choices=FIGURE_NAMES, metavar="NAME", help="which figure (listed below)")
    plo.add_argument("--out", type=Path, required=True, help="output file (.png, .pdf or .svg)")
    _add_table_options(plo, d_model=None, max_len=None)
    plo.add_argument("--bases", type=_int_list, default=(4, 5, 7), help="bases for encoding-degrees")
    plo.add_argument("--position", type=_non_negative_int, default=20, help="position for 'nearby'")
    plo.add_argument("--delta", type=_int, default=-10, help="shift for 'shifted' (seed 001: -10)")
    plo.add_argument("--columns", type=_int_list, default=(6, 7, 8, 9), help="columns for 'columns'")
    plo.add_argument("--run", type=Path, default=None, help="run folder, for attention|predictions|losses")
    plo.add_argument("--layer", default=None, help="attention layer to draw (attention figure)")
    plo.add_argument("--dpi", type=_positive_int, default=100)
    plo.set_defaults(func=_cmd_plot)

    from attnlab.runs import MODELS

    tra = add("train", "train a seed model on the noisy squares and write a run folder",
              "examples:\n  attnlab train\n  attnlab train --model gru-attn --epochs 50 --out runs/gru\n"
              "  attnlab train --epochs 100 --out runs/gru --model gru-attn --resume")
    tra.add_argument("--model", choices=MODELS, default="selfattn-pe",
                     help="selfattn-pe (seed 000, default), gru or gru-attn (seed 003)")
    tra.add_argument("--epochs", type=_positive_int, default=100, help="total epochs (default 100)")
    tra.add_argument("--seed", type=_int, default=43, help="torch seed of the initial weights (default 43)")
    tra.add_argument("--train-seed", type=_non_negative_int, default=None,
                     help="seed of shuffling and teacher forcing (default: the seeds' loader, 67280421310721)")
    tra.add_argument("--lr", type=_positive_float, default=0.01, help="Adam learning rate (default 0.01)")
    tra.add_argument("--batch-size", type=_positive_int, default=16)
    tra.add_argument("--n-train", type=_positive_int, default=128, help="training squares (default 128)")
    tra.add_argument("--out", type=Path, default=None, help="run folder (default runs/MODEL-TIMESTAMP)")
    tra.add_argument("--resume", action="store_true", help="continue the run in --out up to --epochs")
    tra.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    tra.set_defaults(func=_cmd_train)

    pre = add("predict", "predict the last two corners of a square from its first two",
              'examples:\n  attnlab predict --run runs/NAME --points "-1,-1 -1,1"\n'
              '  attnlab predict --run runs/NAME --points "1,1 1,-1" --json')
    pre.add_argument("--run", type=Path, required=True, help="a run folder written by attnlab train")
    pre.add_argument("--points", required=True, help="the first two corners, 'x0,y0 x1,y1'")
    pre.add_argument("--json", action="store_true", help="print JSON")
    pre.set_defaults(func=_cmd_predict)

    from attnlab.data.tasks import TASKS
    from attnlab.models.transformer import ENCODINGS

    cmp_ = add("compare", "train one Transformer per positional encoding and measure accuracy on longer sequences",
               "examples:\n  attnlab compare --quick\n"
               "  attnlab compare --task reverse --encodings sinusoidal,rotary,alibi --train-len 8 "
               "--test-lens 8,12,16,24\n  attnlab compare --task sort --seeds 1 --out runs/sort")
    cmp_.add_argument("--task", default="reverse", help=f"one of {', '.join(TASKS)} (default reverse)")
    cmp_.add_argument("--architecture", default="decoder-only",
                      help="decoder-only (default: one causal stack over source, BOS and target, where every "
                           "encoding sits in the only attention) or encoder-decoder")
    cmp_.add_argument("--encodings", default=None,
                      help=f"comma-separated, from {','.join(ENCODINGS)} (default: all)")
    cmp_.add_argument("--train-len", type=_positive_int, default=8,
                      help="longest training sequence (default 8; trains on lengths 1..8)")
    cmp_.add_argument("--test-lens", type=_int_list, default=None,
                      help="test lengths (default 8,12,16,24: 1, 1.5, 2 and 3 times --train-len)")
    cmp_.add_argument("--seeds", type=_positive_int, default=None, help="models per encoding (default 3)")
    cmp_.add_argument("--epochs", type=_positive_int, default=None, help="passes over the training set (default 12)")
    cmp_.add_argument("--n-train", type=_positive_int, default=None, help="training sequences (default 4096)")
    cmp_.add_argument("--quick", action="store_true", help="one seed, less data: under a minute")
    cmp_.add_argument("--out", type=Path, default=None, help="output folder (default runs/compare-TASK-TIMESTAMP)")
    cmp_.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    cmp_.set_defaults(func=_cmd_compare)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 bad input).

    Never raises for bad input, argparse's own errors included (argparse exits
    by itself; here its status is returned, so ``main`` is callable from Python).
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help (0) or a usage error (2): argparse has printed its message
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        return int(args.func(args))
    except (UsageError, ValueError, TypeError, OSError, FloatingPointError) as err:
        if os.environ.get("ATTNLAB_DEBUG"):
            raise  # the whole traceback, for whoever is debugging attnlab itself
        # One line, no traceback: the library's messages already name the argument.
        message = " ".join(str(err).split())
        print(f"attnlab {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C: one line, the shell's status for SIGINT; files written so far were written whole.
        print(f"attnlab {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
