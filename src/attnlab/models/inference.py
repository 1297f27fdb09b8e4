"""Running a model for a prediction, from any number of threads at once.

Two things a prediction needs are not in the call: the train/eval flag lives on
every module, and the attention lab's GRU models draw their teacher-forcing coin
from torch's global stream in ``forward``, eval mode included. So:

* :func:`evaluating` holds a model in eval mode for as long as any call needs
  it: the first call in saves every module's flag and switches to eval, the last
  one out restores the flags. One call switching the model back to train mode
  in the middle of another's prediction (what saving and restoring the flags
  per call does, from two threads) cannot happen.
* :func:`run_eval` is ``model(inputs)`` in eval mode, without grad; for the GRU
  models (:class:`attnlab.models.EncoderDecoder`) through their ``predict``, the
  same outputs without the coin, so that no random stream is touched.
  Saving and restoring the global generator around a call instead is a race
  between threads: the state restored last is not the caller's.

The predict paths of attnlab's models keep their per-call state (hidden states,
keys, caches, recorded weights) in the call; these two helpers take care of what
remains. The labs, the trainer's ``predict`` and the plots run models through them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.models.rnn_seq2seq import EncoderDecoder
from attnlab.models.selfattn_seq2seq import EncoderDecoderSelfAttn
from attnlab.models.squares_transformer import EncoderDecoderTransformer

__all__ = ["SQUARES_CLASSES", "evaluating", "run_eval"]

#: attnlab's squares models: :func:`run_eval` runs them without drawing a random number.
SQUARES_CLASSES = (EncoderDecoder, EncoderDecoderSelfAttn, EncoderDecoderTransformer)

_LOCK = threading.Lock()
# model -> (calls holding it in eval mode, every module's flag before the first of them)
_HELD: dict[nn.Module, tuple[int, list[tuple[nn.Module, bool]]]] = {}


@contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """Hold ``model`` in eval mode for the block; every module's own flag comes back after the last holder.

    Safe from several threads at once on one model (the flags are saved by the
    first call in and restored by the last one out). A submodule a caller froze
    in eval mode keeps its flag.

    Raises:
        TypeError: if ``model`` is not an ``nn.Module``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    with _LOCK:
        holders, modes = _HELD.get(model, (0, []))
        if holders == 0:
            modes = [(module, module.training) for module in model.modules()]
            model.eval()
        _HELD[model] = (holders + 1, modes)
    try:
        yield model
    finally:
        with _LOCK:
            holders, modes = _HELD.pop(model)
            if holders > 1:
                _HELD[model] = (holders - 1, modes)
            else:
                for module, training in modes:
                    module.training = training


def run_eval(model: nn.Module, inputs: Tensor, *, source_mask: Tensor | None = None) -> Any:
    """``model(inputs)`` in eval mode, without grad, safe from several threads at once.

    attnlab's GRU models run through their ``predict`` (the same outputs, without
    drawing the teacher-forcing coin); every other model through ``forward``.

    Args:
        model: the model.
        inputs: what it takes, e.g. source sequences ``[B, S, F]``.
        source_mask: passed on as ``model(inputs, source_mask=...)`` when given:
            ``[B, 1, S]``, True on the real steps of padded sources.

    Returns:
        What the model returns.

    Raises:
        TypeError: if ``model`` is not an ``nn.Module``.
    """
    with evaluating(model), torch.no_grad():
        if isinstance(model, EncoderDecoder):
            return model.predict(inputs, source_mask)
        return model(inputs) if source_mask is None else model(inputs, source_mask=source_mask)
