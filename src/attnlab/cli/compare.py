"""``attnlab compare``: which positional encoding still works on sequences longer than the training ones."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from attnlab.catalog import BACKENDS, DEFAULT_ENCODINGS, ENCODINGS, PRESETS, PROTOCOLS, TASKS
from attnlab.cli._common import (
    UsageError,
    add_device_option,
    add_progress_option,
    add_size_options,
    add_threads_option,
    default_run_folder,
    folder_arg,
    int_list,
    parse_int,
    positive_float,
    positive_int,
    probability,
    size_flags,
)

__all__ = ["add_parser", "run"]

EXAMPLES = ("examples:\n  attnlab compare --quick\n"
            "  attnlab compare --preset ruoss2023 --quick\n"
            "  attnlab compare --preset kazemnejad2023 --settings\n"
            "  attnlab compare --preset ruoss2023 --task duplicate --out runs/ruoss-duplicate\n"
            "  attnlab compare --preset kazemnejad2023 --task reverse --seeds 5\n"
            "  attnlab compare --task reverse --encodings sinusoidal,rotary,alibi --test-lens 8,12,16,24\n"
            "  attnlab compare --task sort --seeds 1 --d-model 32 --n-layers 1 --out runs/sort\n"
            "  attnlab compare --resume --out runs/sort\n"
            "  attnlab compare --jobs 2\n"
            "  attnlab compare --ray auto")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``compare`` subcommand to ``sub`` (argparse's subparsers)."""
    what = "train one Transformer per positional encoding and measure accuracy on longer sequences"
    p: argparse.ArgumentParser = sub.add_parser("compare", help=what, description=what, epilog=EXAMPLES,
                                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default=None, choices=None, metavar="NAME",
                   help=f"start from a paper's setup, scaled to this machine: {', '.join(PRESETS)}; every "
                        "other flag overrides it, and the report checks the paper's claims")
    p.add_argument("--settings", action="store_true",
                   help="with --preset: print its settings table (each setting beside the paper's, with the "
                        "source) and exit")
    p.add_argument("--task", default=None,
                   help=f"one of {', '.join(TASKS)} (default reverse; with a --preset of several tasks: all of "
                        "them, one comparison each, in OUT/tasks/TASK)")
    p.add_argument("--protocol", choices=PROTOCOLS, default=None,
                   help="how the models train: fixed (default: one padded set of mixed lengths, --epochs passes), "
                        "ruoss2023 (a fresh batch of one length per step, the loss summed per string: Ruoss et "
                        "al.'s code) or kazemnejad2023 (a fixed set, exact match, rotary on a quarter of each head)")
    p.add_argument("--architecture", default=None,
                   help="decoder-only (default: one causal stack over source, BOS and target, where every "
                        "encoding sits in the only attention), encoder-only (the target written into empty "
                        "slots after the source, in one pass) or encoder-decoder")
    p.add_argument("--encodings", default=None,
                   help=f"comma-separated: names from {','.join(ENCODINGS)}, a scheme a package "
                        "registers, 'module:Class' (e.g. mypkg.schemes:Sandwich, imported from the environment), "
                        f"'random-' before any of them, or 'all' (default: {','.join(DEFAULT_ENCODINGS)})")
    p.add_argument("--backend", choices=BACKENDS, default=None,
                   help="the path of every self-attention with a scheme: auto (default: dense up to 2**20 scores "
                        "and for drawn positions, then FlexAttention on CUDA, query chunks on the CPU), dense, "
                        "flex or chunked")
    p.add_argument("--symbols", dest="n_symbols", type=_symbols, default=None,
                   help="alphabet size of copy, reverse, duplicate and sort, at least 2 (2: binary strings; "
                        "default 10); the other tasks' vocabularies are fixed, and refuse it")
    p.add_argument("--l-max", dest="l_max", type=positive_int, default=None,
                   help="the randomized encodings draw positions from [0, L_MAX) (default 4 x the longest "
                        "sequence a model reads); at least that sequence")
    p.add_argument("--train-len", type=positive_int, default=None,
                   help="longest training sequence (default 8; trains on lengths 1..8)")
    p.add_argument("--test-lens", type=int_list, default=None,
                   help="test lengths (default 8,12,16,24: 1, 1.5, 2 and 3 times --train-len)")
    p.add_argument("--seeds", dest="n_seeds", type=positive_int, default=None,
                   help="models per encoding, at random seeds 0..N-1 (default 3)")
    p.add_argument("--epochs", type=positive_int, default=None, help="passes over the training set (default 12)")
    p.add_argument("--n-train", type=positive_int, default=None, help="training sequences (default 4096)")
    p.add_argument("--min-train-len", type=positive_int, default=None,
                   help="shortest training sequence (default: the task's shortest, 1 for most: lengths 1..--train-len)")
    p.add_argument("--n-test", type=positive_int, default=None, help="sequences per test length (default 256)")
    p.add_argument("--batch-size", type=positive_int, default=None, help="sequences per step (default 32)")
    p.add_argument("--lr", type=positive_float, default=None, help="Adam's peak learning rate (default 0.003)")
    p.add_argument("--dropout", type=probability, default=None,
                   help="dropout after the embeddings, in attention and in the feed-forward network (default 0)")
    add_size_options(p, defaults="default 64; heads 4, layers 2, feed-forward 4 x width")
    p.add_argument("--quick", action="store_true",
                   help="one seed, less data: under a minute (with --preset, the preset's own small version: "
                        "under 5 minutes)")
    p.add_argument("--out", type=folder_arg, default=None, help="output folder (default runs/compare-TASK-TIMESTAMP)")
    p.add_argument("--resume", action="store_true",
                   help="train only the models missing from --out (its saved settings), then write the results; "
                        "an encoding saved as module:Class is imported from the environment (its code runs), "
                        "never from inside --out")
    p.add_argument("--jobs", type=positive_int, default=None,
                   help="train N models at once in N local worker processes, one core each (default: the "
                        "cores this process may use; 1 trains them here, one after another); the records are "
                        "the same whatever N")
    p.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="train every model as a task on the Ray cluster at ADDRESS (auto, ray://host:port, or "
                        "local for a private instance on this machine); needs pip install 'attnlab[ray]'")
    p.add_argument("--group-size", dest="group_size", type=positive_int, default=None, metavar="N",
                   help="train the models of one encoding N seeds at a time as one batched computation (a "
                        "worker, a Ray task or this process takes a group); each model's records are the ones "
                        "it gets alone (default 1: one model at a time; decoder-only and encoder-only models)")
    add_device_option(p)
    add_threads_option(p, what="each model (recorded with the settings: the records can differ in the last bits "
                                "with another count, never with --jobs)")
    add_progress_option(p)
    p.set_defaults(func=run)
    return p


def _symbols(text: str) -> int:
    """``--symbols``: an integer of at least 2 (with one symbol, copy, reverse and sort are one task)."""
    value = parse_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"must be at least 2 (a binary alphabet is 2; with {value} every string "
                                         "is the same), got {text!r}".replace("{text!r}", repr(text)))
    return value


def _given(args: argparse.Namespace, *, task: str | None = None) -> dict[str, Any]:
    """The settings given on the command line (None: not given), over the preset's and ``--quick``'s.

    Order, each overriding the one before: the defaults, the preset, ``--quick`` (the
    preset's own quick version, or :data:`attnlab.labs.lengths.config.QUICK`), the preset's
    settings for ``task`` (or ``--task``), the flags.
    """
    from attnlab.labs.lengths.config import QUICK
    from attnlab.labs.lengths.presets import preset

    flags: dict[str, Any] = {
        name: getattr(args, name)
        for name in ("task", "architecture", "train_len", "n_seeds", "epochs", "n_train", "test_lens", "n_symbols",
                     "l_max", "min_train_len", "n_test", "batch_size", "lr", "dropout", "backend", "protocol",
                     "threads", "group_size")}
    flags.update({field: getattr(args, field) for field in size_flags.values()})
    if args.encodings is not None:
        names = tuple(name.strip() for name in args.encodings.split(",") if name.strip())
        flags["encodings"] = ENCODINGS if names == ("all",) else names
    given: dict[str, Any] = {}
    if args.preset is not None:
        chosen = preset(args.preset)  # an unknown name: ValueError listing the known ones
        given.update(chosen.settings, preset=chosen.name)
        if args.quick:
            given.update(chosen.quick)
        given.update(chosen.per_task.get(task or args.task, {}))  # one task's own settings (SCAN's lengths)
        if args.quick:
            given.update(chosen.quick_per_task.get(task or args.task, {}))
    elif args.quick:
        given.update(QUICK)
    given.update({k: v for k, v in flags.items() if v is not None})
    if (args.test_lens is None and args.train_len is not None and not args.resume
            and (args.preset is not None or args.train_len != 8)):
        # The default test lengths are 1, 1.5, 2 and 3 times the training length.
        n = args.train_len
        given["test_lens"] = tuple(sorted({n, (3 * n) // 2, 2 * n, 3 * n}))
    return given


def run(args: argparse.Namespace) -> int:
    """Train the comparison, print its table and where its folder is; returns the exit status.

    Raises:
        UsageError, ValueError, TypeError, OSError: for bad input, reported by
            :func:`attnlab.cli.main` as one line and exit status 2.
    """
    from attnlab.cli._device import parse_device
    from attnlab.labs.lengths.compare import check_compare_folder, resume_config, run_compare
    from attnlab.labs.lengths.config import CompareConfig
    from attnlab.labs.lengths.report import format_table

    if args.settings:
        if args.preset is None:
            raise UsageError("--settings prints a preset's settings table: give --preset NAME")
        from attnlab.labs.lengths.presets import format_settings

        print(format_settings(args.preset))
        return 0
    device = parse_device(args.device)  # a device this machine lacks: one line, before anything else
    given = _given(args)
    if args.preset is not None and args.task is None:
        from attnlab.labs.lengths.presets import preset

        if preset(args.preset).tasks:
            return _run_suite(args, given, device)
    if args.resume:
        if args.out is None:
            raise UsageError("--resume needs --out FOLDER, the comparison to continue")
        config = resume_config(args.out, given)  # every value checked here, before any training
    else:
        config = CompareConfig(**given)
    folder = args.out
    if folder is None:
        folder = default_run_folder(f"compare-{config.task}")
    check_compare_folder(folder, resume=args.resume)  # a bad --out: one line on stderr, before anything runs
    n_models = len(config.runs())
    _check_workers(args)

    def announce() -> None:  # called once the comparison is known to start: nothing on stdout before that
        print(f"comparing {len(config.encodings)} encodings x {config.n_seeds} seed(s) on {config.task}, "
              f"train length {config.train_len}, test lengths {', '.join(map(str, config.test_lens))} -> {folder}",
              flush=True)

    result = run_compare(config, folder, resume=args.resume, progress=None if args.progress else False,
                         announce=announce, jobs=_jobs(args, n_models), ray_address=args.ray, device=device)
    print(format_table(result))
    print(f"{n_models} models in {result.seconds:.0f} s; results: {Path(folder) / 'results.json'} "
          f"(open {Path(folder) / 'report.html'})")
    return 0


def _run_suite(args: argparse.Namespace, given: dict[str, Any], device: Any) -> int:
    """A preset over several tasks: a comparison per task in ``OUT/tasks/TASK``, then the paper's table beside ours."""
    from attnlab.labs.lengths.compare import run_compare
    from attnlab.labs.lengths.config import CompareConfig
    from attnlab.labs.lengths.presets import preset
    from attnlab.labs.lengths.report import format_table
    from attnlab.labs.lengths.suite import format_suite, run_suite, suite_rows, suite_verdicts
    from attnlab.labs.run_folder import check_claim

    chosen = preset(args.preset)
    # Each task: the preset's settings and --quick's, its own (SCAN's lengths), then the command line's.
    configs = [CompareConfig(**{**_given(args, task=task), "task": task})
               for task in chosen.tasks]  # all checked before any work
    folder = args.out if args.out is not None else default_run_folder(f"compare-{chosen.name}")
    check_claim(folder, kind="suite", resume=args.resume)
    _check_workers(args)
    n_models = sum(len(c.runs()) for c in configs)
    tasks = f"{len(configs)} task{'s' if len(configs) > 1 else ''} ({', '.join(chosen.tasks)})"

    def announce() -> None:  # once every task is checked: nothing on stdout before that
        print(f"preset {chosen.name}: {tasks}, {n_models} models -> {folder}", flush=True)
        print(f"its settings beside the paper's: attnlab compare --preset {chosen.name} --settings "
              "(and in suite.txt)", flush=True)

    def run_one(config: CompareConfig, where: Path, resume: bool) -> Any:
        result = run_compare(config, where, resume=resume, progress=None if args.progress else False,
                             jobs=_jobs(args, len(config.runs())), ray_address=args.ray, device=device)
        print(format_table(result, claims=False), flush=True)
        return result

    results, path = run_suite(configs, folder, chosen, resume=args.resume, run_one=run_one, announce=announce)
    print(format_suite(suite_rows(results, chosen), chosen, seconds=sum(r.seconds for r in results),
                       verdicts=suite_verdicts(results, chosen)))
    print(f"results: {path / 'suite.json'}, and a comparison per task in {path / 'tasks'}")
    return 0


def _check_workers(args: argparse.Namespace) -> None:
    """``--jobs`` and ``--ray``: not both; Ray installed and its cluster reachable, before any training."""
    from attnlab.labs.lengths.sweep import connect_ray, cpu_count

    if args.ray is not None:
        if args.jobs not in (None, 1):
            raise UsageError(f"--jobs {args.jobs} and --ray {args.ray!r}: choose local workers or a Ray cluster")
        try:
            connect_ray(args.ray)
        except ModuleNotFoundError as err:
            raise UsageError(str(err)) from None
    elif args.jobs is not None and args.jobs > cpu_count():
        print(f"attnlab compare: warning: --jobs {args.jobs} is more than the {cpu_count()} cores this process "
              "may use; the workers will share them", file=sys.stderr)


def _jobs(args: argparse.Namespace, n_models: int) -> int:
    """``--jobs``, or by default one worker per core (never more workers than models; 1 with ``--ray``)."""
    from attnlab.labs.lengths.sweep import cpu_count

    if args.ray is not None:
        return 1
    return args.jobs if args.jobs is not None else max(1, min(cpu_count(), n_models))
