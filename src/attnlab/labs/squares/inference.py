"""Running a squares model for a prediction, from any number of threads at once.

Two things a prediction needs are not in the call: the train/eval flag lives on
every module, and the GRU models draw their teacher-forcing coin from torch's
global stream in ``forward``, eval mode included. So:

* :func:`attnlab._eval_mode.evaluating` holds a model in eval mode while any call needs it;
* :func:`run_eval` is ``model(inputs)`` in eval mode without grad; for the GRU
  models (:class:`attnlab.models.EncoderDecoder`) through their ``predict``, which
  gives the same outputs without the coin. (Saving and restoring the global
  generator around a call instead races between threads.)

The labs, the trainer's ``predict`` and the plots run models through these two.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attnlab._eval_mode import evaluating
from attnlab.models.labs.gru_seq2seq import EncoderDecoder
from attnlab.models.labs.selfattn_seq2seq import EncoderDecoderSelfAttn
from attnlab.models.labs.squares_transformer import EncoderDecoderTransformer

__all__ = ["SQUARES_CLASSES", "run_eval"]

#: attnlab's squares models: :func:`run_eval` runs them without drawing a random number.
SQUARES_CLASSES = (EncoderDecoder, EncoderDecoderSelfAttn, EncoderDecoderTransformer)

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
