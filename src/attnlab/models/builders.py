"""The sequence models by architecture: :func:`sequence_model_class`, sizes as explicit keyword arguments.

:class:`~attnlab.models.DecoderOnlyTransformer`, :class:`~attnlab.models.Transformer` or
:class:`~attnlab.models.EncoderOnlyTransformer` by name, for the length-generalisation lab
(the squares lab's models by name are the lab's own: :mod:`attnlab.labs.squares.models`).
Builders only build: seeding the initial weights is the caller's.
"""

from __future__ import annotations

from attnlab._validate import check_choice
from attnlab.data.task import ARCHITECTURES
from attnlab.models.decoder_only import DecoderOnlyTransformer
from attnlab.models.encoder_only import EncoderOnlyTransformer
from attnlab.models.sequence_model import SequenceModel
from attnlab.models.transformer import Transformer

__all__ = ["ARCHITECTURES", "sequence_model_class"]

_ARCHITECTURE_CLASSES: dict[str, type[SequenceModel]] = {"decoder-only": DecoderOnlyTransformer,
                                                          "encoder-decoder": Transformer,
                                                          "encoder-only": EncoderOnlyTransformer}

def sequence_model_class(architecture: str) -> type[SequenceModel]:
    """The model class of one of :data:`ARCHITECTURES`; its constructor takes the sizes (keyword-only).

    ``"decoder-only"`` is :class:`~attnlab.models.DecoderOnlyTransformer`, ``"encoder-decoder"``
    :class:`~attnlab.models.Transformer`, ``"encoder-only"``
    :class:`~attnlab.models.EncoderOnlyTransformer`; all take the arguments of
    :class:`~attnlab.models.sequence_model.SequenceModel` (``vocab_size`` or ``n_features``,
    ``d_model``, ``n_heads``, ``n_layers``, ``ff_units``, ``dropout``, ``position``,
    ``max_len``, ``max_relative_position``, ``pad_id``) and check them.

    Raises:
        ValueError: for an unknown ``architecture`` (naming the known ones).
    """
    return _ARCHITECTURE_CLASSES[check_choice("architecture", architecture, ARCHITECTURES)]
