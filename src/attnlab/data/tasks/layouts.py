"""How a token task becomes the input of each architecture: one causal sequence, or the input and empty slots.

The length lab feeds a :class:`~attnlab.data.tasks.TaskBatch` (a source and a target) to:

* the encoder-decoder: ``source``, teacher-forced with ``target_in`` (no layout);
* a decoder-only model: one sequence ``source + [BOS] + target`` to continue
  (:func:`decoder_only_batch`; Kazemnejad et al. 2023);
* an encoder-only model: the source and one empty slot per target token, written
  non-causally in one pass (:func:`encoder_only_batch`; Ruoss et al. 2023,
  arXiv:2305.16843, §4: "we append one empty token per output position to the
  input"). The output length is known, so no ``EOS``; the slots are ``BOS``, the
  token that says "the answer starts here" elsewhere, so one vocabulary serves all.

Shape notation: ``N`` sequences, ``S`` source length, ``T`` target width
(``S + 1`` or ``2S + 1``: the target and its EOS, as in ``TaskBatch``).
"""

from __future__ import annotations

import torch

from attnlab.data.tasks.tokens import BOS, EOS, PAD, TaskBatch

__all__ = ["EMPTY", "decoder_only_batch", "encoder_only_batch"]

#: the token that fills an empty output slot of the encoder-only layout.
EMPTY = BOS


def _check_batch(batch: object) -> TaskBatch:
    if not isinstance(batch, TaskBatch):
        raise TypeError(f"batch must be a TaskBatch (a token task), got {type(batch).__name__}")
    return batch


def decoder_only_batch(batch: TaskBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """A token task as one sequence per row, for a decoder-only model: ``source + [BOS] + target``.

    Row ``i`` (source length ``L_i``, target length ``M_i``: ``L_i``, or ``2 L_i``
    for duplicate) becomes, right-padded with ``PAD`` to ``S + T``::

        inputs  [s_0 .. s_{L-1}, BOS, t_0 .. t_{M-1}, PAD ...]
        labels  [PAD ..    PAD,  t_0, t_1 .. t_{M-1}, EOS, PAD ...]

    ``labels[j]`` is what the model must predict after reading ``inputs[:j + 1]``:
    nothing (``PAD``, to be ignored by the loss) while it reads the source, then
    the target and ``EOS``. At test time the prompt is ``inputs[:, :S + 1]`` (all
    rows of a test set have one length) and the model generates ``T`` tokens,
    compared with ``target_out``.

    Args:
        batch: a :class:`~attnlab.data.tasks.TaskBatch` (``source [N, S]``,
            ``target_in`` / ``target_out [N, T]``).

    Returns:
        ``(inputs, labels)``, int64 ``[N, S + T]`` each.

    Raises:
        TypeError: if ``batch`` is not a ``TaskBatch``.

    Example:
        >>> from attnlab.data.tasks.basic import make_task_batch
        >>> from attnlab.data.tasks.tokens import Vocab
        >>> b = make_task_batch("reverse", 1, 3, generator=0)
        >>> x, y = decoder_only_batch(b)
        >>> x.shape, Vocab().format(y[0, :3])
        (torch.Size([1, 7]), '<pad> <pad> <pad>')
    """
    batch = _check_batch(batch)
    n, S = batch.source.shape
    T = batch.target_in.shape[1]
    inputs = torch.full((n, S + T), PAD, dtype=torch.int64, device=batch.source.device)  # [N, S + T]
    inputs[:, :S] = batch.source
    # BOS + target (and target + EOS) start right after each row's own source: column L_i + j.
    columns = batch.lengths[:, None] + torch.arange(T, device=batch.source.device)  # [N, T]
    inputs.scatter_(1, columns, batch.target_in)  # overwrites the source's padding with the target
    labels = torch.full_like(inputs, PAD).scatter_(1, columns, batch.target_out)  # [N, S + T]
    return inputs, labels


def encoder_only_batch(batch: TaskBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """A token task as the input followed by one empty slot per target token, for an encoder-only model.

    Row ``i`` (source length ``L_i``, target length ``M_i``) becomes, right-padded
    with ``PAD`` to ``S + T - 1`` (the target without its EOS)::

        inputs  [s_0 .. s_{L-1}, EMPTY x M_i,        PAD ...]
        labels  [PAD ..    PAD,  t_0 .. t_{M-1},     PAD ...]

    The model reads the whole row at once (no causal mask; the padding is masked)
    and is scored on the slots only: the masked per-token accuracy of Ruoss et al.
    2023. The rows of a test set have one length, so their slots line up.

    Args:
        batch: a :class:`~attnlab.data.tasks.TaskBatch`.

    Returns:
        ``(inputs, labels)``, int64 ``[N, S + T - 1]`` each.

    Raises:
        TypeError: if ``batch`` is not a ``TaskBatch``.

    Example:
        >>> from attnlab.data.tasks.basic import make_task_batch
        >>> from attnlab.data.tasks.tokens import Vocab
        >>> b = make_task_batch("duplicate", 1, 2, n_symbols=2, generator=0)
        >>> x, y = encoder_only_batch(b)
        >>> Vocab(2).format(b.source[0]), Vocab(2).format(x[0]), Vocab(2).format(y[0])
        ('3 4', '3 4 <bos> <bos> <bos> <bos>', '<pad> <pad> 3 4 3 4')
    """
    batch = _check_batch(batch)
    n, S = batch.source.shape
    M = batch.target_out.shape[1] - 1  # the widest target, EOS dropped
    device = batch.source.device
    target = batch.target_out[:, :M]  # [N, M]
    target = target.masked_fill(target == EOS, PAD)  # the shorter rows' EOS: their slots end before it
    real = target != PAD  # [N, M]: the row's target tokens
    inputs = torch.full((n, S + M), PAD, dtype=torch.int64, device=device)  # [N, S + M]
    inputs[:, :S] = batch.source
    columns = batch.lengths[:, None] + torch.arange(M, device=device)  # [N, M]: the slots follow each source
    inputs.scatter_(1, columns, torch.where(real, EMPTY, PAD))  # EMPTY on the row's slots, padding after
    labels = torch.full_like(inputs, PAD).scatter_(1, columns, target)  # [N, S + M]
    return inputs, labels
