"""What a comparison allocates, counted from its settings before anything is built.

:func:`costs` lists every part of a comparison's memory as a formula of its sizes (no tensor
is made), each with the setting that sets it; :func:`attnlab.labs.memory_bound.check_costs`
refuses the run when they exceed the memory available, naming the setting that costs the
most. :class:`~attnlab.labs.lengths.config.CompareConfig` checks it when it is made, so a run
that cannot fit is refused in milliseconds, at the memory of the import, and before anything
is written.

What is counted (an upper bound, rounded up):

* the parameters, with their gradients and Adam's two moments (4 copies of float32):
  the layers (:func:`~attnlab.labs.memory_bound.transformer_parameters`), the vocabulary's
  embedding and output layer, and the position tables (``L_max`` rows for a randomized table);
* what is built once: a sinusoidal table is computed in float64 first;
* the draws of the randomized schemes: the positions of the longest sequence per call
  (:func:`attnlab.encodings.draws.draw_bytes`: of that length, not of ``L_max``);
* what lives while a step runs: the attention scores ``[B, H, L, L]`` of every layer and
  their gradients, and the activations ``[B, L, D]``;
* the data, as the task counts it (:meth:`~attnlab.data.tasks.task.Task.data_bytes`): the
  training set and every test set; and the test set decoded at once (scores and a cache).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnlab.encodings.draws import draw_bytes
from attnlab.labs.memory_bound import Cost, parameter_bytes, transformer_parameters

if TYPE_CHECKING:
    from attnlab.labs.lengths.config import CompareConfig

__all__ = ["costs"]


def costs(config: CompareConfig) -> list[Cost]:
    """What a comparison of ``config`` allocates, each cost with the setting that sets it.

    Nothing is built: the encodings are asked what they are (an input table, a scheme that
    draws positions) from their declarations, and each cost is a formula of the sizes, for
    the largest model of the encodings. ``config.l_max`` is read resolved.
    """
    D, H, L = config.d_model, config.n_heads, config.n_layers
    F = config.ff_units or 4 * D
    stacks = 2 if config.architecture == "encoder-decoder" else 1
    task = config.task_object
    io = task.model_io(config.n_symbols)
    # What sizes the vocabulary: n_symbols where the lab sizes the alphabet, else the task's own.
    setting, value = ("n_symbols", config.n_symbols) if config.n_symbols is not None else ("task", config.task)
    V = io["vocab_size"] or io["n_features"] or 1  # tokens in and logits out, or features
    longest = config.sequence_length(max(config.train_len, *config.test_lens)) + 1
    l_max = config.l_max or longest
    found = [
        Cost("d_model", D, "the layers' parameters, with their gradients and Adam's state",
             parameter_bytes(transformer_parameters(d_model=D, n_heads=H, head_dim=max(1, D // H), n_layers=L,
                                                    ff_units=F, stacks=stacks))),
        Cost(setting, value, f"the vocabulary's embedding and output layer ({V:,} tokens), with their gradients "
             "and Adam's state", parameter_bytes(2 * V * D)),
    ]
    # Position tables: a row per position the model reads (l_max of them for a randomized one), computed in
    # float64 or trained with Adam; a randomized scheme draws the longest sequence's positions at every call,
    # at a cost of that length (attnlab.encodings.draws), not of l_max.
    drawn = {e: config.draws_positions(e) for e in config.encodings}
    tables = [drawn[e] for e in config.encodings if config.is_input_table(e)]
    if tables:
        rows, randomized = max((l_max if draws else longest, draws) for draws in tables)
        found.append(Cost("l_max" if randomized else "test_lens", l_max if randomized else max(config.test_lens),
                          f"a position table of {rows:,} rows", rows * D * 8 * 4))
    if any(drawn.values()):
        found.append(Cost("l_max", l_max, "the positions drawn from [0, L_max) at every call",
                          draw_bytes(longest, l_max) * max(1, L * stacks), transient=True))
    B, T = config.batch_size, config.sequence_length(config.train_len) + 1
    # A training step: every layer's scores and weights [B, H, T, T] and their gradients, its activations.
    found.append(Cost("train_len", config.train_len, f"a training step over {T} tokens (batch_size {B})",
                      L * stacks * (4 * B * H * T * T + 16 * B * T * D) * 4, transient=True))
    # The data as the task counts it: every set kept through the run, and drawing the largest one (before training).
    sets = [("n_test", config.n_test, n, "a test set") for n in config.test_lens]
    if config.protocol_object.builds_training_set:
        sets.append(("n_train", config.n_train, config.train_len, "the training set"))
        found.append(Cost("n_train", config.n_train, f"the training set (train_len {config.train_len})",
                          task.data_bytes(config.n_train, config.train_len)))
    found.append(Cost("n_test", config.n_test, f"the test sets ({len(config.test_lens)} lengths up to "
                      f"{max(config.test_lens)})", sum(task.data_bytes(config.n_test, n) for n in config.test_lens)))
    drawn_by, count, length, which = max(sets, key=lambda s: task.draw_bytes(s[1], s[2]) - task.data_bytes(s[1], s[2]))
    found.append(Cost(drawn_by, count, f"{which} while it is drawn (length {length})",
                      task.draw_bytes(count, length) - task.data_bytes(count, length), transient=True))
    # The longest test set is decoded at once: its scores [n_test, H, S, S] on the first step, then a cache.
    S = config.sequence_length(max(config.test_lens)) + 1
    n = min(config.n_test, 64)  # decoded 64 rows at a time (attnlab.labs.lengths.train.EVAL_ROWS)
    found.append(Cost("test_lens", max(config.test_lens), f"decoding the longest test set (n_test {n})",
                      n * (H * S * S * 4 * 2 + L * stacks * 2 * S * D * 4), transient=True))
    # Logits over the vocabulary: a training step's and its gradient, then the test prompts' in one call.
    found.append(Cost(setting, value, "the logits over the vocabulary", max(3 * B * T, n * S) * V * 4, transient=True))
    return found
