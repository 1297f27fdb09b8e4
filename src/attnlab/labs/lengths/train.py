"""One model of the length-generalisation lab: build it, train it through :func:`attnlab.training.fit`, score it.

The settings (:class:`~attnlab.labs.lengths.config.CompareConfig`) build nothing; this module
builds from them: :func:`build_model` (one encoding's model), :func:`task_sets` (the data), and
:func:`check_models`, which refuses the sizes a scheme cannot be built for before a run folder
is claimed. :func:`train_one` is everything a worker runs for one ``(encoding, seed)`` of a
comparison (:mod:`attnlab.labs.lengths.sweep`); it depends on nothing else, so the records
are the same wherever it runs. :func:`train_seeds` trains the models of one encoding at
several seeds as one :class:`~attnlab.models.grouped.ModelGroup` (``group_size``): each
model's records are the ones :func:`train_one` gives it.

Shape notation: ``B`` batch, ``N`` test sequences, ``S`` source length, ``T`` target
width, ``M`` output slots, ``V`` vocabulary.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import torch
from torch import nn

from attnlab.data.tasks import PAD, TaskSets, make_task_sets
from attnlab.encodings.registry import Position
from attnlab.encodings.scheme import ModelSizes
from attnlab.labs.lengths.config import CompareConfig
from attnlab.models import DecoderOnlyTransformer, Transformer, sequence_model_class
from attnlab.models.grouped import ModelGroup
from attnlab.training import Callback, StepProgress, fit
from attnlab.training.batches import to_device
from attnlab.training.clipping import GradientClipping
from attnlab.training.grouped import GroupAdam, member_calls, train_group
from attnlab.training.nonfinite import check_initial_loss
from attnlab.training.rng import preserved_rng
from attnlab.training.threads import intra_op_threads, step_work, threads_for

__all__ = ["ModelResult", "build_model", "check_first_steps", "check_models", "evaluate", "one_thread",
           "run_threads", "task_sets", "train_one", "train_seeds"]


@dataclass
class ModelResult:
    """One trained model: its records (one per test length), its weights, size and training time.

    ``state_dict`` maps each parameter name to its tensor, of the parameter's own shape (e.g. ``[D, D]``).
    """

    encoding: str
    seed: int
    records: list[dict[str, Any]]
    state_dict: dict[str, torch.Tensor]
    seconds: float
    n_parameters: int


# -- what the settings build --------------------------------------------------------------


def check_models(config: CompareConfig) -> None:
    """Refuse the sizes a scheme cannot be built for (an odd head size with rotary), before anything is written.

    Each scheme inside attention is built once at the model's sizes, from the encoding as the
    settings resolved it (:meth:`~attnlab.labs.lengths.config.CompareConfig.scheme`: no name is
    looked up again). Building a scheme is cheap (no table of the model's length), and done on a
    copy of torch's random state, so no stream moves. :func:`attnlab.labs.lengths.compare.run_compare`
    calls it before it claims the run folder.

    Raises:
        ValueError: what a scheme raises for the sizes.
    """
    # The encoder-decoder's encoder attends both ways: a scheme is checked at its stricter attention (the
    # settings refuse a causal-only one there).
    sizes = ModelSizes(n_heads=config.n_heads, head_dim=config.d_model // config.n_heads, d_model=config.d_model,
                       causal=config.architecture == "decoder-only", max_len=config.l_max,
                       max_relative_position=config.max_relative_position)
    with torch.random.fork_rng(devices=[]):
        for encoding in config.encodings:
            if not config.is_input_table(encoding):
                config.scheme(encoding).for_model(sizes)


#: rows of the one batch :func:`check_first_steps` runs through each encoding's fresh model
PROBE_ROWS = 2


def check_first_steps(config: CompareConfig, *, device: torch.device | str = "cpu") -> None:
    """Run one batch through each encoding's freshly built model, as its first step would, before anything is written.

    What only a forward pass shows is refused in milliseconds, before a run folder is claimed,
    instead of after it is written: a loss that is NaN or inf with the initial weights, named by
    where it starts (a position scheme or an input table: :func:`attnlab.training.nonfinite.check_initial_loss`),
    a scheme or table that returns a term of the wrong shape or raises, and a path the device
    cannot train on (``backend="flex"`` without a FlexAttention backward there). The batch is
    :data:`PROBE_ROWS` rows of the task at the training length, drawn for the probe alone; each
    model is built as the first seed's (``torch.manual_seed``), on a copy of the random state, so
    no stream moves and the comparison's numbers are what they would be without it.

    Raises:
        ValueError: naming the encoding, and what its first step raised or where its loss stops being finite.
    """
    spec = dataclasses.replace(config.spec(), n_train=PROBE_ROWS, n_test=1, test_lens=(config.train_len,))
    probe = make_task_sets(spec).train
    assert probe is not None  # n_train rows were asked for
    batch = to_device(probe, torch.device(device))
    loss = config.protocol_object.loss(config)
    with preserved_rng({}):
        for encoding in config.encodings:
            torch.manual_seed(0)  # the first seed's weights
            model = build_model(config, encoding).to(device)
            first_loss = partial(loss, model, batch)
            try:
                # Recording autograd is what surfaces a forced FlexAttention path the device has no backward for.
                check_initial_loss(model, first_loss, what=f"encoding {encoding!r}", record=config.backend == "flex")
            except ValueError as err:
                if str(err).startswith(f"encoding {encoding!r}"):
                    raise
                raise ValueError(f"encoding {encoding!r}: {err}") from err


def build_model(config: CompareConfig, encoding: str) -> DecoderOnlyTransformer | Transformer:
    """The model of ``config`` for one encoding, its weights drawn from torch's global generator (see ``train_one``)."""
    # Rows for the longest sequence (+1 for a decoder-only model's rows past its last input: as before).
    longest = (config.sequence_length(max(config.train_len, *config.test_lens))
               + (config.architecture == "decoder-only"))
    if config.draws_positions(encoding):
        assert config.l_max is not None  # resolved by the settings
        longest = config.l_max  # the positions are drawn from [0, l_max)
    model_class = sequence_model_class(config.architecture)
    io = config.task_object.model_io(config.n_symbols)
    model = model_class(vocab_size=io["vocab_size"], n_features=io["n_features"], d_model=config.d_model,
                        n_heads=config.n_heads, n_layers=config.n_layers, ff_units=config.ff_units,
                        # as the settings resolved it (a class or a randomized one): no name looked up again
                        position=cast(Position, config.scheme(encoding)),
                        max_len=longest, dropout=config.dropout,
                        max_relative_position=config.max_relative_position, pad_id=PAD, backend=config.backend)
    return cast(DecoderOnlyTransformer | Transformer, model)


def task_sets(config: CompareConfig) -> TaskSets:
    """The comparison's data: the test sets, and the training set where the protocol trains on a fixed one."""
    spec = config.spec()
    if config.protocol_object.builds_training_set:
        return make_task_sets(spec)
    return make_task_sets(dataclasses.replace(spec, n_train=1))._replace(train=None)


# -- one model ---------------------------------------------------------------------------


def evaluate(model: nn.Module, config: CompareConfig, sets: TaskSets, encoding: str,
             seed: int) -> list[dict[str, Any]]:
    """One record per test length: the whole test set predicted by the task's decoding and scored on the CPU."""
    model.eval()
    device = next(model.parameters()).device
    task, architecture = config.task_object, config.architecture
    records = []
    for length, batch in sorted(sets.tests.items()):
        # The architecture, not the model's class, decides how to call it (the tests pass stand-ins).
        # EVAL_ROWS rows at a time: a long test set's scores [rows, H, L, L] would not fit at once.
        n = batch[0].shape[0]
        parts = [task.predict(model, _rows(batch, i, i + EVAL_ROWS).to(device), architecture).cpu()
                 for i in range(0, n, EVAL_ROWS)]
        pred = torch.cat(parts)
        scores = task.score(pred, batch, architecture)
        records.append({"encoding": encoding, "seed": seed, "length": int(length), **scores})
    return records


#: test rows decoded at once (Ruoss et al.'s evaluation runs sub-batches of 64 too).
EVAL_ROWS = 64


def _rows(batch: Any, start: int, stop: int) -> Any:
    """Rows ``start:stop`` of a task's batch (every field of the NamedTuple sliced)."""
    return type(batch)(*(None if t is None else t[start:stop] for t in batch))


@contextmanager
def one_thread() -> Iterator[None]:
    """Run the block on one intra-op thread; torch's thread count comes back after."""
    with intra_op_threads(1):
        yield


def run_threads(config: CompareConfig, model: nn.Module) -> int:
    """The intra-op threads one run of ``config`` computes on: ``config.threads``, else the rule of
    :mod:`attnlab.training.threads` for a training batch (``batch_size`` x the longest training sequence)."""
    if config.threads is not None:
        return config.threads
    return threads_for(work=step_work(model, tokens=config.batch_size * config.sequence_length(config.train_len)))


def train_one(config: CompareConfig, sets: TaskSets, encoding: str, seed: int, *,
              callbacks: Sequence[Callback] = (), device: torch.device | str = "cpu") -> ModelResult:
    """Train and score the model of one ``(encoding, seed)``; it depends on nothing else.

    Its initial weights are drawn after ``torch.manual_seed(seed)`` and its batches
    shuffled by a generator seeded with ``seed``, on a copy of the global random
    state: what ran before does not change it, and it changes nothing after. It
    computes on :func:`run_threads`' threads (one at the lab's sizes; torch's thread count is
    restored after), which depend on the settings and the model alone: a float sum's order
    depends on how many threads split it, and the records must not depend on how many runs
    share the machine (:mod:`attnlab.labs.lengths.sweep`).

    Args:
        config: the comparison's settings.
        sets: its data (:func:`task_sets`).
        encoding: one of ``config.encodings``.
        seed: the random seed.
        callbacks: passed to :func:`fit` (e.g. a progress bar).
        device: where the model trains (the initial weights are drawn on the CPU, so they
            are the same on every device); the data is moved there batch by batch.

    Returns:
        A :class:`ModelResult`.
    """
    began = time.perf_counter()
    with preserved_rng({}):  # torch's, CUDA's and Python's streams all come back as they were
        torch.manual_seed(seed)
        model = build_model(config, encoding).to(device)
        threads = run_threads(config, model)
        with intra_op_threads(threads):
            protocol = config.protocol_object
            loader, epochs = protocol.batches(config, sets, seed)
            optimizer = protocol.optimizer(model, config)
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, protocol.schedule(epochs * len(loader)))
            clipping = GradientClipping()
            clipping.set_norm(1.0)
            fit(model, optimizer, loader, epochs=epochs, loss=protocol.loss(config), scheduler=scheduler,
                scheduler_interval="batch", clipping=clipping, callbacks=callbacks, threads=threads)
            records = evaluate(model, config, sets, encoding, seed)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    n_parameters = sum(p.numel() for p in model.parameters())
    return ModelResult(encoding, seed, records, state, time.perf_counter() - began, n_parameters)


# -- the models of one encoding at several seeds, as one group ------------------------------


def train_seeds(config: CompareConfig, sets: TaskSets, encoding: str, seeds: Sequence[int], *, bar: Any = None,
                device: torch.device | str = "cpu") -> list[ModelResult]:
    """Train and score the models of one ``encoding`` at ``seeds``: each one's result is :func:`train_one`'s.

    One seed is :func:`train_one`. Several train as one :class:`~attnlab.models.grouped.ModelGroup`:
    each member built as :func:`train_one` builds it (its weights after ``torch.manual_seed(seed)``,
    its dropout masks and randomized positions from where that leaves the stream), stepped on its
    own batches (``protocol.batches(config, sets, seed)``) with its own optimiser's update
    (``protocol.optimizer``, matched by :meth:`~attnlab.training.grouped.GroupAdam.like`), the
    protocol's schedule and loss, and clipping at 1.0; then each is taken out of the group and
    scored by :func:`evaluate`. It computes on the threads :func:`train_one` would.

    Args:
        config: the comparison's settings.
        sets: its data (:func:`task_sets`).
        encoding: one of ``config.encodings``.
        seeds: the random seeds, distinct.
        bar: a progress bar (``update``, ``set_postfix_str``, ``n``), advanced by one per model and step; None: none.
        device: where the models train (as :func:`train_one`).

    Returns:
        A :class:`ModelResult` per seed, in the order of ``seeds``; each one's ``seconds`` is its share of the
        group's time.

    Raises:
        ValueError: for no seeds or repeated ones, an optimiser a group cannot take
            (:meth:`~attnlab.training.grouped.GroupAdam.like`), and what :func:`train_one` raises.
        TypeError: for several seeds of the encoder-decoder (a group is of decoder-only or encoder-only models).
        FloatingPointError: when a model's training loss is NaN or infinite (training diverged).
    """
    seeds = list(seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and at least one, got {seeds}")
    if len(seeds) == 1:
        label = f"{encoding}, seed {seeds[0]}"
        if bar is not None:
            bar.set_postfix_str(label, refresh=False)
        callbacks = [] if bar is None else [StepProgress(bar, label)]
        return [train_one(config, sets, encoding, seeds[0], callbacks=callbacks, device=device)]
    began = time.perf_counter()
    with preserved_rng({}):
        group = ModelGroup.build(lambda: build_model(config, encoding), seeds).to(device)
        members = group.to_members()
        with intra_op_threads(run_threads(config, members[0])):
            protocol = config.protocol_object
            loaders = [protocol.batches(config, sets, seed) for seed in seeds]
            epochs = loaders[0][1]
            steps = epochs * len(loaders[0][0])
            optimizer = GroupAdam.like(group, [protocol.optimizer(m, config) for m in members])
            inputs, loss = member_calls(protocol.loss(config), members[0])
            label = f"{encoding}, seeds {', '.join(map(str, seeds))}"
            if bar is not None:
                bar.set_postfix_str(label, refresh=False)

            def batches() -> Iterator[list[Any]]:
                for _ in range(epochs):  # each loader shuffles anew at every pass, as fit iterates it
                    for step in zip(*(loader for loader, _ in loaders), strict=True):
                        yield [to_device(batch, torch.device(device)) for batch in step]

            def progress(step: int, losses: torch.Tensor) -> None:
                if bar is None:
                    return
                bar.update(len(seeds))
                if (step + 1) % 50 == 0:
                    bar.set_postfix_str(f"{label}, loss {float(losses.mean()):.3f}", refresh=False)

            losses = train_group(group, batches(), lrs=optimizer.lrs, steps=steps, inputs=inputs, loss=loss,
                                 schedule=protocol.schedule(steps), clip=1.0, optimizer=optimizer, on_step=progress)
            _check_finite(losses, seeds, epochs, encoding=encoding)
            members = group.to_members()
            records = []
            for g, (member, seed) in enumerate(zip(members, seeds, strict=True)):
                # A randomized scheme draws at test time too: from where the member's training left its stream.
                assert group.streams is not None  # ModelGroup.build gives every member one
                torch.set_rng_state(group.streams[g].get_state())
                records.append(evaluate(member, config, sets, encoding, seed))
    share = (time.perf_counter() - began) / len(seeds)
    return [ModelResult(encoding, seed, own, {k: v.detach().cpu() for k, v in m.state_dict().items()}, share,
                        sum(p.numel() for p in m.parameters()))
            for m, seed, own in zip(members, seeds, records, strict=True)]


def _check_finite(losses: torch.Tensor, seeds: Sequence[int], epochs: int, *, encoding: str) -> None:
    """Raise as :func:`fit` does when a model's training loss (``losses [steps, G]``) is NaN or infinite.

    A loss already bad at the first step, before any update, is not divergence: it names ``encoding``.
    """
    bad = ~torch.isfinite(losses)  # [steps, G]
    if bool(bad.any()):
        step, g = (int(i) for i in bad.nonzero()[0])
        if step == 0:
            raise FloatingPointError(
                f"the training loss of seed {seeds[g]} is {float(losses[step, g])} at step 1, with the model's "
                f"initial weights, before any update, so the learning rate is not the cause: its forward pass is "
                f"not finite there; check encoding {encoding!r} (its position scheme or table) and the data")
        epoch = step // math.ceil(losses.shape[0] / epochs) + 1
        raise FloatingPointError(f"the training loss of seed {seeds[g]} is {float(losses[step, g])} at step "
                                 f"{step + 1} (epoch {epoch}): training diverged; lower the learning rate or "
                                 "check the data for NaN/inf")
