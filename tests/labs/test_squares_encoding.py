"""The squares lab's Transformer takes any encoding and backend; the lab's own models have no such choice."""

import pytest

from attnlab.attention import MultiHeadAttention
from attnlab.encodings import ALiBi
from attnlab.labs.squares.config import SquaresConfig
from attnlab.labs.squares.train import build_model


def test_the_transformer_takes_an_encoding_and_a_backend_and_records_them_resolved():
    config = SquaresConfig(model="transformer", encoding="alibi", backend="chunked", epochs=1, device="cpu")
    model = build_model(config)
    assert [type(m.position).__name__ for m in model.modules()
            if isinstance(m, MultiHeadAttention) and m.position is not None] == ["ALiBi", "ALiBi"]
    assert {m.backend for m in model.modules() if isinstance(m, MultiHeadAttention) and m.position is not None} \
        == {"chunked"}
    assert SquaresConfig(model="transformer", device="cpu").to_dict()["encoding"] == "sinusoidal"
    assert SquaresConfig(model="transformer", encoding=ALiBi, device="cpu").encoding == "alibi"  # a class: its name


def test_the_labs_models_refuse_an_encoding_they_cannot_take():
    with pytest.raises(ValueError, match="encoding 'alibi': the selfattn-pe model has no choice of encoding"):
        SquaresConfig(encoding="alibi", device="cpu")
    with pytest.raises(ValueError, match="backend 'dense': the gru model has no choice"):
        SquaresConfig(model="gru", backend="dense", device="cpu")
    with pytest.raises(ValueError, match="unknown encoding 'wavelet'"):
        SquaresConfig(model="transformer", encoding="wavelet", device="cpu")


@pytest.mark.parametrize("model", ["transformer", "selfattn-pe"])
def test_a_config_without_encoding_and_backend_is_refused(model):
    saved = SquaresConfig(model=model, device="cpu").to_dict()
    del saved["encoding"], saved["backend"]
    with pytest.raises(ValueError, match="backend.*encoding|encoding.*backend"):
        SquaresConfig.from_dict(saved)
