"""``attnlab train``: train a squares model and write (or resume) a run folder.

Under ``torchrun --nproc_per_node N -m attnlab train ...`` the N processes train one
model together (data-parallel, see :mod:`attnlab.training.distributed`): rank 0
decides the settings and the folder and sends them to the others; only it writes
the folder and prints.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnlab.catalog import BACKENDS, SQUARES_MODELS
from attnlab.cli._common import (
    UsageError,
    add_device_option,
    add_progress_option,
    add_size_options,
    add_threads_option,
    default_run_folder,
    folder_arg,
    positive_float,
    positive_int,
    probability,
    seed_int,
    size_flags,
)

if TYPE_CHECKING:
    import torch

    from attnlab.labs.squares.config import SquaresConfig

__all__ = ["add_parser", "run"]

#: the models that feed their own predictions back while decoding in training
TEACHER_FORCED = ("gru", "gru-attn")

EXAMPLES = ("examples:\n  attnlab train\n  attnlab train --model transformer --seed 3 --out runs/t3\n"
            "  attnlab train --model gru-attn --epochs 50 --out runs/gru\n"
            "  attnlab train --model transformer --variable-len --out runs/var\n"
            "  attnlab train --out runs/gru --epochs 100 --resume\n"
            "  attnlab train --device cpu --out runs/cpu\n"
            "  torchrun --nproc_per_node 2 -m attnlab train --model transformer --out runs/ddp  # data-parallel")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``train`` subcommand to ``sub`` (argparse's subparsers)."""
    what = "train a model on the noisy squares and write a run folder"
    p: argparse.ArgumentParser = sub.add_parser("train", help=what, description=what, epilog=EXAMPLES,
                                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=SQUARES_MODELS, default=None,
                   help="selfattn-pe (the positional-encoding lab's model, the default), gru or gru-attn "
                        "(the attention lab's), transformer (the same task with residuals and layer norm)")
    p.add_argument("--epochs", type=positive_int, default=None, help="total epochs (default 100)")
    p.add_argument("--seed", type=seed_int, default=None,
                   help="random seed of the initial weights (default: the lab's own, 43 for selfattn-pe, "
                        "23 for gru-attn; 43 for the others)")
    p.add_argument("--train-seed", type=seed_int, default=None,
                   help="random seed of shuffling and teacher forcing, set before the first epoch as the "
                        "book's set_seed(42) does (default 42)")
    p.add_argument("--teacher-forcing", type=probability, default=None, metavar="P",
                   help="gru and gru-attn: probability of feeding the true point instead of the prediction "
                        "while training (default 0.5, the attention lab's)")
    p.add_argument("--test-draws-global", action=argparse.BooleanOptionalAction, default=None,
                   help="the test loader draws from torch's global generator at every validation pass, as the "
                        "labs' does (it moves the GRU models' teacher-forcing coins; default: yes)")
    p.add_argument("--variable-len", action="store_true", default=None,
                   help="squares of 2 to 4 given corners (padded and masked); the model predicts the two "
                        "corners that follow")
    p.add_argument("--encoding", default=None, metavar="NAME",
                   help="--model transformer's positional encoding: a name attnlab compare takes "
                        "(sinusoidal, the default; rotary, alibi, ...) or module:Class")
    p.add_argument("--backend", choices=BACKENDS, default=None,
                   help="--model transformer's attention path with a scheme: auto (default), dense, flex, chunked")
    p.add_argument("--lr", type=positive_float, default=None, help="Adam learning rate (default 0.01)")
    p.add_argument("--batch-size", type=positive_int, default=None, help="default 16")
    p.add_argument("--n-train", type=positive_int, default=None, help="training squares (default 128)")
    add_size_options(p, defaults="default: the model's own; see README")
    p.add_argument("--out", type=folder_arg, default=None, help="run folder (default runs/MODEL-TIMESTAMP)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out (its saved settings) up to --epochs")
    add_device_option(p)
    add_threads_option(p, what="training (recorded in config.json; a resume keeps it unless given again)")
    add_progress_option(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Train, print the final MSEs and where the run folder is; returns the exit status.

    Raises:
        UsageError, ValueError, TypeError, OSError: for bad input, reported by
            :func:`attnlab.cli.main` as one line and exit status 2.
    """
    from attnlab.cli._device import parse_device
    from attnlab.labs.squares.train import SquaresConfig, train_run
    from attnlab.training.distributed import DistributedContext

    device = parse_device(args.device)  # a device this machine lacks: one line, before anything else
    with DistributedContext.from_env(device=device) as distributed:  # torchrun's processes join their group here
        # Rank 0 alone checks the folder (probing its lock from every rank at once would collide)
        # and picks the default folder's timestamp; the others take its settings and folder.
        if distributed.is_main:
            config, folder = _plan(args, device)
            distributed.broadcast_object((config.to_dict(), str(folder)))
        else:
            settings, where = distributed.broadcast_object(None)
            config, folder = SquaresConfig.from_dict(settings), Path(where)

        def announce() -> None:  # called once the run is known to start: nothing on stdout before that
            print(f"training {config.model} for {config.epochs} epochs -> {folder}", flush=True)

        def note(message: str) -> None:  # what the user should know (a history rebuilt): on stderr, one line
            print(f"attnlab train: {message}", file=sys.stderr, flush=True)

        result = train_run(config, folder, resume=args.resume, progress=None if args.progress else False,
                           announce=announce if distributed.is_main else None, distributed=distributed,
                           note=note if distributed.is_main else None)
    if distributed.is_main:
        print(f"final train MSE {result.train_mse:.4f} | test MSE {result.test_mse:.4f} "
              f"({result.epochs} epochs, {config.n_test} test squares)")
        print(f"run folder: {folder} (open {Path(folder) / 'report.html'})")
    return 0


def _plan(args: argparse.Namespace, device: torch.device) -> tuple[SquaresConfig, Path]:
    """The run's config and folder from the command line, checked (nothing written): ``(config, folder)``."""
    from attnlab.labs.squares.train import SquaresConfig, check_train_folder, resume_config

    given = {"model": args.model, "epochs": args.epochs, "seed": args.seed, "train_seed": args.train_seed,
             "lr": args.lr, "batch_size": args.batch_size, "n_train": args.n_train,
             "teacher_forcing_prob": args.teacher_forcing, "test_draws_global": args.test_draws_global,
             "variable_len": args.variable_len, "device": str(device), "encoding": args.encoding,
             "backend": args.backend, "threads": args.threads,
             **{field: getattr(args, field) for field in size_flags.values()}}
    if args.resume:
        if args.out is None:
            raise UsageError("--resume needs --out RUN_FOLDER, the run to continue")
        # The settings named as the flags that set them (--teacher-forcing sets teacher_forcing_prob).
        flags = {name: "--" + name.replace("_", "-") for name in given} | {"teacher_forcing_prob": "--teacher-forcing"}
        config = resume_config(args.out, given, names=flags)
    else:
        _check_size_flags(args, args.model or "selfattn-pe")
        if args.teacher_forcing is not None and (args.model or "selfattn-pe") not in TEACHER_FORCED:
            raise UsageError(f"--teacher-forcing: the {args.model or 'selfattn-pe'} model has no teacher forcing "
                             f"(only {' and '.join(TEACHER_FORCED)}: the self-attention models see the whole "
                             "target at once)")
        config = SquaresConfig(**{name: value for name, value in given.items() if value is not None})
    folder = args.out if args.out is not None else default_run_folder(config.model)
    check_train_folder(config, folder, resume=args.resume)  # a bad --out: one line on stderr, nothing printed
    return config, Path(folder)


def _check_size_flags(args: argparse.Namespace, model: str) -> None:
    """A size flag the model has no such size for is named, with the ones it has."""
    from attnlab.labs.squares.models import squares_sizes

    has = squares_sizes(model)
    for flag, field in size_flags.items():
        if getattr(args, field) is not None and field not in has:
            own = ", ".join(f for f, name in size_flags.items() if name in has) or "none"
            raise UsageError(f"{flag}: the {model} model has no such size (its size flags: {own})")
