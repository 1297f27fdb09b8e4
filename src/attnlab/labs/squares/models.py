"""The squares lab's models by name, sizes as explicit keyword arguments.

The squares lab (``attnlab train``, ``predict``) and the command line build their models
here, so that a size goes from a flag to the layer that uses it in as few hops as possible
and is checked once, by the constructor that uses it. Builders only build: seeding the
initial weights is the caller's (:func:`attnlab.labs.squares.train.build_model`).

:func:`squares_model` is one of :data:`SQUARES_MODELS` (the positional-encoding lab's
model, the attention lab's two GRU models, and the small Transformer that fixes the
first), with :func:`squares_sizes` telling which sizes each one has and their defaults.
"""

from __future__ import annotations

import inspect

from torch import nn

from attnlab._validate import check_choice
from attnlab.models.labs.gru_seq2seq import Decoder, DecoderAttn, Encoder, EncoderDecoder, EncoderDecoderAttn
from attnlab.models.labs.selfattn_seq2seq import DecoderPe, EncoderDecoderSelfAttn, EncoderPe
from attnlab.models.labs.squares_transformer import squares_transformer

__all__ = ["SIZE_NAMES", "SQUARES_MODELS", "squares_model", "squares_sizes"]

#: the models of the squares lab.
SQUARES_MODELS = ("selfattn-pe", "gru", "gru-attn", "transformer")

#: the size arguments a model may take (``--d-model``, ``--n-heads``, ``--n-layers``, ``--ff-units``).
SIZE_NAMES = ("d_model", "n_heads", "n_layers", "ff_units")

# The sizes each squares model has, with their defaults: the labs' own for their models
# (the positional-encoding lab: 3 heads, d_model 2, ff_units 10; the attention lab: a
# GRU with 2 hidden units), the Transformer's from its builder's signature (one source).
_SQUARES_SIZES: dict[str, dict[str, int]] = {
    "selfattn-pe": {"d_model": 2, "n_heads": 3, "ff_units": 10},
    "gru": {"d_model": 2},
    "gru-attn": {"d_model": 2},
    "transformer": {name: inspect.signature(squares_transformer).parameters[name].default
                    for name in ("d_model", "n_heads", "n_layers", "ff_units")},
}
_N_FEATURES = 2  # a square's corners are (x, y)
_INPUT_LEN = _TARGET_LEN = 2  # two corners given, two predicted


def squares_sizes(name: str) -> dict[str, int]:
    """The sizes the squares model ``name`` has, with their defaults: a subset of :data:`SIZE_NAMES`.

    For the GRU models ``d_model`` is the hidden state's width; they have no heads,
    layers or feed-forward network.

    Raises:
        ValueError: for an unknown ``name`` (naming the known ones).
    """
    return dict(_SQUARES_SIZES[check_choice("model", name, SQUARES_MODELS)])


def squares_model(
    name: str,
    *,
    d_model: int | None = None,
    n_heads: int | None = None,
    n_layers: int | None = None,
    ff_units: int | None = None,
    teacher_forcing_prob: float = 0.5,
    input_len: int = _INPUT_LEN,
    encoding: str | None = None,
    backend: str | None = None,
) -> nn.Module:
    """The squares model ``name``: it reads two corners ``[B, 2, 2]`` and predicts the other two ``[B, 2, 2]``.

    In train mode every model takes the whole square ``[B, 4, 2]`` and is teacher-forced
    on its last two corners; in eval mode it takes the first two and predicts greedily.
    With ``input_len=4`` it reads the variable-length squares instead
    (:class:`attnlab.data.SquarePrefixes`): 2 to 4 corners right-padded to ``[B, 4, 2]``
    with a ``source_mask [B, 1, 4]``, and predicts the two that follow.

    Args:
        name: one of :data:`SQUARES_MODELS`.
        d_model, n_heads, n_layers, ff_units: the sizes; None takes the model's
            default (:func:`squares_sizes`). A size the model does not have must be None.
        teacher_forcing_prob: the GRU models' probability of feeding the true
            corner back in training (the attention lab's 0.5); ignored by the others.
        input_len: ``S``, the source steps (padded ones included); the initial weights do not depend on it.
        encoding, backend: the ``"transformer"`` model's positional encoding (default
            ``"sinusoidal"``) and attention path (default ``"auto"``); the other models
            have neither (None).

    Returns:
        A new model, its weights drawn from torch's global generator.

    Raises:
        ValueError: for an unknown ``name``, a size the model does not have, and
            what the model's constructor raises for a bad size (naming it).
    """
    given = {"d_model": d_model, "n_heads": n_heads, "n_layers": n_layers, "ff_units": ff_units}
    defaults = squares_sizes(name)
    extra = [size for size, value in given.items() if value is not None and size not in defaults]
    if extra:
        has = ", ".join(defaults) or "no sizes"
        raise ValueError(f"the {name} model has no {', '.join(extra)} (its sizes: {has})")
    sizes: dict[str, int] = {}
    for size, default in defaults.items():
        value = given[size]
        sizes[size] = default if value is None else value
    if name != "transformer" and (encoding is not None or backend is not None):
        raise ValueError(f"the {name} model has no choice of encoding or backend (the transformer model has)")
    if name == "selfattn-pe":
        encoder = EncoderPe(n_heads=sizes["n_heads"], d_model=sizes["d_model"], ff_units=sizes["ff_units"],
                            n_features=_N_FEATURES)
        decoder = DecoderPe(n_heads=sizes["n_heads"], d_model=sizes["d_model"], ff_units=sizes["ff_units"],
                            n_features=_N_FEATURES)
        return EncoderDecoderSelfAttn(encoder, decoder, input_len=input_len, target_len=_TARGET_LEN)
    if name == "gru":
        return EncoderDecoder(Encoder(_N_FEATURES, sizes["d_model"]), Decoder(_N_FEATURES, sizes["d_model"]),
                              input_len=input_len, target_len=_TARGET_LEN, teacher_forcing_prob=teacher_forcing_prob)
    if name == "gru-attn":
        return EncoderDecoderAttn(Encoder(_N_FEATURES, sizes["d_model"]), DecoderAttn(_N_FEATURES, sizes["d_model"]),
                                  input_len=input_len, target_len=_TARGET_LEN,
                                  teacher_forcing_prob=teacher_forcing_prob)
    return squares_transformer(d_model=sizes["d_model"], n_heads=sizes["n_heads"], n_layers=sizes["n_layers"],
                               ff_units=sizes["ff_units"], n_features=_N_FEATURES, input_len=input_len,
                               target_len=_TARGET_LEN, position=encoding or "sinusoidal", backend=backend or "auto")
