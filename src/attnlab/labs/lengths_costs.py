"""What one comparison of the length lab allocates, from its settings alone (:mod:`attnlab.labs.memory_bound`).

Nothing is built: the encodings are asked what they are (an input table, a scheme that
draws positions) from their declarations, and every cost is a formula of the sizes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnlab.data.tasks import Vocab
from attnlab.encodings.registry import draws_positions, is_input_table
from attnlab.labs.memory_bound import Cost, parameter_bytes, transformer_parameters

if TYPE_CHECKING:
    from attnlab.labs.lengths import CompareConfig

__all__ = ["compare_costs"]

_INT = 8  # bytes of an int64 token or position
_FLOAT = 4


def compare_costs(config: CompareConfig) -> list[Cost]:
    """Every cost of ``config``'s run (the largest model of its encodings), each with the setting that sets it.

    ``config.l_max`` must be resolved (``CompareConfig`` does it first).
    """
    D, H, L = config.d_model, config.n_heads, config.n_layers
    F = config.ff_units or 4 * D
    stacks = 2 if config.architecture == "encoder-decoder" else 1
    squares = config.task == "squares"
    V = 2 if squares else Vocab(config.n_symbols).size  # features, or tokens in and logits out
    longest = config.sequence_length(max(config.train_len, *config.test_lens)) + 1
    l_max = config.l_max or longest
    costs = [
        Cost("d_model", D, "the layers' parameters, with their gradients and Adam's state",
             parameter_bytes(transformer_parameters(d_model=D, n_heads=H, head_dim=max(1, D // H), n_layers=L,
                                                    ff_units=F, stacks=stacks))),
        Cost("n_symbols", config.n_symbols, "the vocabulary's embedding and output layer, with their gradients "
             "and Adam's state", parameter_bytes(2 * V * D)),
    ]
    # Position tables: a row per position the model reads (l_max of them for a randomized one), computed in
    # float64 or trained with Adam; a randomized scheme inside attention permutes [0, l_max) at every call.
    tables = [(e, draws_positions(e)) for e in config.encodings if is_input_table(e)]
    if tables:
        rows, randomized = max((l_max if drawn else longest, drawn) for _, drawn in tables)
        costs.append(Cost("l_max" if randomized else "test_lens", l_max if randomized else max(config.test_lens),
                          f"a position table of {rows:,} rows", rows * D * 8 * 4))
    if any(draws_positions(e) for e in config.encodings):
        costs.append(Cost("l_max", l_max, "the positions drawn from [0, L_max) at every call",
                          2 * l_max * _INT * max(1, L * stacks), transient=True))
    B, T = config.batch_size, config.sequence_length(config.train_len) + 1
    # A training step: every layer's scores and weights [B, H, T, T] and their gradients, its activations.
    costs.append(Cost("train_len", config.train_len, f"a training step over {T} tokens (batch_size {B})",
                      L * stacks * (4 * B * H * T * T + 16 * B * T * D) * _FLOAT, transient=True))
    costs.append(Cost("n_train", config.n_train, "the training set",
                      config.n_train * (config.sequence_length(config.train_len) + 2) * _INT * 4))
    # The longest test set is decoded at once: its scores [n_test, H, S, S] on the first step, then a cache.
    S = config.sequence_length(max(config.test_lens)) + 1
    n = config.n_test
    costs.append(Cost("test_lens", max(config.test_lens), f"decoding the longest test set (n_test {n})",
                      n * (H * S * S * _FLOAT * 2 + L * stacks * 2 * S * D * _FLOAT)
                      + len(config.test_lens) * n * (S + 2) * _INT, transient=True))
    # Logits over the vocabulary: a training step's and its gradient, then the test prompts' in one call.
    costs.append(Cost("n_symbols", config.n_symbols, "the logits over the vocabulary",
                      max(3 * B * T, n * S) * V * _FLOAT, transient=True))
    return costs
