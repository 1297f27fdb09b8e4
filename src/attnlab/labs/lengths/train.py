"""One model of the length-generalisation lab: build it, train it through :func:`attnlab.training.fit`, score it.

:func:`train_one` is everything a worker runs for one ``(encoding, seed)`` of a
comparison (:mod:`attnlab.labs.sweep`); it depends on nothing else, so the records
are the same wherever it runs. The settings are a
:class:`~attnlab.labs.lengths.config.CompareConfig`.

Shape notation: ``B`` batch, ``N`` test sequences, ``S`` source length, ``T`` target
width, ``M`` output slots, ``V`` vocabulary.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.data.layouts import decoder_only_batch, encoder_only_batch
from attnlab.data.metrics import mean_squared_error, sequence_accuracy, token_accuracy
from attnlab.data.square_walks import SquaresBatch
from attnlab.data.task_loader import task_loader
from attnlab.data.tasks import BOS, PAD, TaskBatch, TaskSets
from attnlab.labs.lengths.config import CompareConfig
from attnlab.models import DecoderOnlyTransformer, Transformer
from attnlab.training import Callback, fit
from attnlab.training.clipping import GradientClipping
from attnlab.training.rng import preserved_rng

__all__ = ["ModelResult", "evaluate", "one_thread", "train_one"]


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


# -- one model ---------------------------------------------------------------------------


def _loss(config: CompareConfig) -> Callable[[nn.Module, Any], torch.Tensor]:
    """The batch loss :func:`fit` calls: next-element prediction (decoder-only), the slots (encoder-only)
    or teacher forcing (encoder-decoder)."""

    def loss(model: nn.Module, batch: TaskBatch | SquaresBatch) -> torch.Tensor:
        if config.architecture == "encoder-only":
            inputs, labels = encoder_only_batch(cast(TaskBatch, batch))  # [B, S + M] each
            logits = model(inputs)  # [B, S + M, V]: scored on the slots only (labels PAD elsewhere)
            return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=PAD)
        if config.architecture == "decoder-only":
            if isinstance(batch, SquaresBatch):
                # The walk continues itself; the loss is on the corners after the given ones.
                n_given = batch.source.shape[1]
                pred = model(batch.full[:, :-1])[:, n_given - 1:]  # [B, T, 2]
                return F.mse_loss(pred, batch.target)
            inputs, labels = decoder_only_batch(batch)  # [B, S + T] each
            logits = model(inputs)  # [B, S + T, V]
            return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=PAD)
        if isinstance(batch, SquaresBatch):
            # Decoder inputs: the target shifted right, starting from the last given corner.
            target_in = torch.cat([batch.source[:, -1:], batch.target[:, :-1]], dim=1)  # [B, T, 2]
            return F.mse_loss(model(batch.source, target_in), batch.target)
        logits = model(batch.source, batch.target_in)  # [B, T, V]
        return F.cross_entropy(logits.flatten(0, 1), batch.target_out.flatten(), ignore_index=PAD)

    return loss


def _predict(model: nn.Module, batch: TaskBatch | SquaresBatch, config: CompareConfig) -> torch.Tensor:
    """Predictions for a test set of one length: ``[N, T]`` tokens or ``[N, T, 2]`` corners.

    Greedy decoding (cached where the scheme allows), or the slots of one pass
    (encoder-only: ``[N, M]``, the target without EOS).
    """
    # The architecture, not the model's class, decides how to call it (the tests pass stand-ins).
    if config.architecture == "encoder-only":
        inputs = encoder_only_batch(cast(TaskBatch, batch))[0]  # [N, S + M]
        S = batch.source.shape[1]  # every row of a test set has this length, so the slots line up
        return model(inputs)[:, S:].argmax(-1)  # [N, M]
    if config.architecture == "decoder-only":
        gpt = cast(DecoderOnlyTransformer, model)
        if isinstance(batch, SquaresBatch):
            return gpt.generate(batch.source, batch.target.shape[1])
        prompt = decoder_only_batch(batch)[0][:, : batch.source.shape[1] + 1]  # source + BOS: [N, S + 1]
        return gpt.generate(prompt, batch.target_out.shape[1])  # the target and EOS
    seq2seq = cast(Transformer, model)
    if isinstance(batch, SquaresBatch):
        return seq2seq.generate(batch.source, batch.target.shape[1], start=batch.source[:, -1:])
    return seq2seq.generate(batch.source, batch.target_out.shape[1], start=BOS)


def _schedule(total_steps: int) -> Callable[[int], float]:
    """Linear warm-up over 5% of the steps, then cosine decay to 10%: the same for every encoding."""
    warmup = max(1, total_steps // 20)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total_steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def evaluate(model: nn.Module, config: CompareConfig, sets: TaskSets, encoding: str,
             seed: int) -> list[dict[str, Any]]:
    """One record per test length: the whole test set predicted (:func:`_predict`) and scored on the CPU."""
    model.eval()
    device = next(model.parameters()).device
    records = []
    for length, batch in sorted(sets.tests.items()):
        pred = _predict(model, batch.to(device), config).cpu()
        if isinstance(batch, SquaresBatch):
            scores = {"mean_squared_error": mean_squared_error(pred, batch.target)}
        else:
            target = batch.target_out
            if config.architecture == "encoder-only":  # no EOS: the slots hold the target only
                target = encoder_only_batch(batch)[1][:, batch.source.shape[1]:]  # [N, M]
            scores = {"token_accuracy": token_accuracy(pred, target, pad=PAD),
                      "sequence_accuracy": sequence_accuracy(pred, target, pad=PAD)}
        records.append({"encoding": encoding, "seed": seed, "length": int(length), **scores})
    return records


@contextmanager
def one_thread() -> Iterator[None]:
    """Run the block on one intra-op thread; torch's thread count comes back after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def train_one(config: CompareConfig, sets: TaskSets, encoding: str, seed: int, *,
              callbacks: Sequence[Callback] = (), device: torch.device | str = "cpu") -> ModelResult:
    """Train and score the model of one ``(encoding, seed)``; it depends on nothing else.

    Its initial weights are drawn after ``torch.manual_seed(seed)`` and its batches
    shuffled by a generator seeded with ``seed``, on a copy of the global random
    state: what ran before does not change it, and it changes nothing after. It
    computes on one thread (torch's thread count is restored after): a float sum's
    order depends on how many threads split it, and the records must not depend on
    how many runs share the machine (:mod:`attnlab.labs.sweep`).

    Args:
        config: the comparison's settings.
        sets: its data (:func:`attnlab.data.tasks.make_task_sets` of ``config.spec()``).
        encoding: one of ``config.encodings``.
        seed: the random seed.
        callbacks: passed to :func:`fit` (e.g. a progress bar).
        device: where the model trains (the initial weights are drawn on the CPU, so they
            are the same on every device); the data is moved there batch by batch.

    Returns:
        A :class:`ModelResult`.
    """
    began = time.perf_counter()
    with one_thread(), preserved_rng({}):  # torch's, CUDA's and Python's streams all come back as they were
        torch.manual_seed(seed)
        model = config.build_model(encoding).to(device)
        loader = task_loader(sets.train, config.batch_size, shuffle=True, seed=seed)
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(config.epochs * len(loader)))
        clipping = GradientClipping()
        clipping.set_norm(1.0)
        fit(model, optimizer, loader, epochs=config.epochs, loss=_loss(config), scheduler=scheduler,
            scheduler_interval="batch", clipping=clipping, callbacks=callbacks)
        records = evaluate(model, config, sets, encoding, seed)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    n_parameters = sum(p.numel() for p in model.parameters())
    return ModelResult(encoding, seed, records, state, time.perf_counter() - began, n_parameters)
