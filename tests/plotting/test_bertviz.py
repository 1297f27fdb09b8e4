"""`to_bertviz`: a real attnlab model's recorded weights, drawn by bertviz itself.

The output goes straight into `bertviz.head_view` / `bertviz.model_view` (test-only
dependency) with `html_action="return"`; the page bertviz writes embeds its
parameters as JSON, which is parsed back and compared with the weights the model
recorded (for the chosen sequence of the batch) and with the token labels. Every
refusal (mixed arguments, layers of other head counts or lengths, kinds with other
layer counts, token lists of the wrong length) is checked on its message.
"""

import json
import re

import pytest
import torch

from attnlab.labs.squares.figures import attention_weights
from attnlab.labs.squares.models import squares_model
from attnlab.plotting import to_bertviz

bertviz = pytest.importorskip("bertviz")

pytestmark = pytest.mark.usefixtures("one_thread")

ENCODER_TOKENS = ["Point #1", "Point #2"]
DECODER_TOKENS = ["Point #2", "Point #3"]  # the decoder's inputs: the last corner given, then its first prediction


def bertviz_params(view):
    """The parameters bertviz embeds in its page (`const params = {...};`), parsed."""
    match = re.search(r"const params = (\{.*?\}); // HACK", view.data, re.S)
    assert match, "bertviz's page holds no params"
    return json.loads(match.group(1))


@pytest.fixture(scope="module")
def recorded():
    torch.manual_seed(43)
    model = squares_model("selfattn-pe")
    inputs = torch.rand(3, 2, 2) * 2 - 1  # three squares' first two corners [B, S, F]
    return attention_weights(model, inputs)  # {name: [3, 3, 2, 2]}


def split(weights):
    return {"encoder_attention": {k: v for k, v in weights.items() if k.startswith("encoder")},
            "decoder_attention": {k: v for k, v in weights.items() if "decoder" in k and "self" in k},
            "cross_attention": {k: v for k, v in weights.items() if "cross" in k}}


def test_an_encoder_decoder_models_weights_reach_bertvizs_head_view(recorded):
    assert len(recorded) == 3
    args = to_bertviz(**split(recorded), encoder_tokens=ENCODER_TOKENS, decoder_tokens=DECODER_TOKENS, example=1)
    params = bertviz_params(bertviz.head_view(**args, html_action="return"))
    shown = {d["name"]: d for d in params["attention"]}
    assert set(shown) == {"Encoder", "Decoder", "Cross"}
    expected = {"Encoder": ("encoder.layer.self_attn_heads", ENCODER_TOKENS, ENCODER_TOKENS),
                "Decoder": ("decoder.layer.self_attn_heads", DECODER_TOKENS, DECODER_TOKENS),
                "Cross": ("decoder.layer.cross_attn_heads", DECODER_TOKENS, ENCODER_TOKENS)}
    for name, (layer, left, right) in expected.items():
        attn = torch.tensor(shown[name]["attn"])  # [layers, H, T, S]
        assert attn.shape == (1, 3, 2, 2)
        torch.testing.assert_close(attn[0], recorded[layer][1], rtol=0, atol=1e-7)  # sequence 1 of the batch
        assert (shown[name]["left_text"], shown[name]["right_text"]) == (left, right)
    # The three sequences attend differently, so showing sequence 0 instead of 1 would have been caught.
    cross = recorded["decoder.layer.cross_attn_heads"]
    assert not torch.allclose(cross[0], cross[1])


def test_the_result_is_bertvizs_format(recorded):
    args = to_bertviz(**split(recorded), encoder_tokens=ENCODER_TOKENS, decoder_tokens=DECODER_TOKENS)
    assert set(args) == {"encoder_attention", "decoder_attention", "cross_attention", "encoder_tokens",
                         "decoder_tokens"}
    for kind in ("encoder_attention", "decoder_attention", "cross_attention"):
        assert isinstance(args[kind], tuple) and len(args[kind]) == 1
        assert args[kind][0].shape == (1, 3, 2, 2) and args[kind][0].dtype == torch.float32
    # model_view draws the same data (a grid of every layer and head).
    params = bertviz_params(bertviz.model_view(**args, html_action="return"))
    cross = next(d for d in params["attention"] if d["name"] == "Cross")
    torch.testing.assert_close(torch.tensor(cross["attn"][0]), recorded["decoder.layer.cross_attn_heads"][0],
                               rtol=0, atol=1e-7)


def test_a_self_attention_models_layers_take_attention_and_tokens(recorded):
    encoder = recorded["encoder.layer.self_attn_heads"]  # [3, 3, 2, 2]
    layers = [encoder, encoder.flip(-1)]  # two layers, as a sequence
    args = to_bertviz(layers, ENCODER_TOKENS, example=2)
    assert set(args) == {"attention", "tokens"} and args["tokens"] == ENCODER_TOKENS
    params = bertviz_params(bertviz.head_view(**args, html_action="return"))
    (shown,) = params["attention"]
    attn = torch.tensor(shown["attn"])  # [2, H, L, L]
    torch.testing.assert_close(attn, torch.stack([encoder[2], encoder[2].flip(-1)]), rtol=0, atol=1e-7)
    assert shown["left_text"] == shown["right_text"] == ENCODER_TOKENS


def test_the_gru_attention_model_has_one_cross_attention_layer_of_one_head():
    torch.manual_seed(43)
    weights = attention_weights(squares_model("gru-attn"), torch.rand(2, 2, 2))
    args = to_bertviz(cross_attention=weights, encoder_tokens=ENCODER_TOKENS, decoder_tokens=["Point #3", "Point #4"])
    params = bertviz_params(bertviz.head_view(**args, html_action="return"))
    (shown,) = params["attention"]
    assert shown["name"] == "Cross" and torch.tensor(shown["attn"]).shape == (1, 1, 2, 2)
    torch.testing.assert_close(torch.tensor(shown["attn"][0]), weights["decoder.attn"][0], rtol=0, atol=1e-7)


def test_weights_off_the_graph_and_numpy_arrays_are_taken():
    w = torch.rand(1, 2, 3, 3, requires_grad=True)
    args = to_bertviz({"a": w, "b": w.detach().numpy() * 0.5}, list("xyz"))
    assert not args["attention"][0].requires_grad
    torch.testing.assert_close(args["attention"][1], w.detach() * 0.5)


@pytest.mark.parametrize(("call", "message"), [
    (lambda w: to_bertviz([w, torch.rand(1, 2, 2, 2)], ["a", "b"]),
     r"attention\[1\] has 2 heads, but attention\[0\] has 3"),
    (lambda w: to_bertviz({"x": w, "y": torch.rand(1, 3, 3, 3)}, ["a", "b"]),
     r"attention\['y'\] attends from 3 to 3 positions, but attention\['x'\] from 2 to 2"),
    (lambda w: to_bertviz([w], ["a", "b", "c"]), "tokens has 3 labels, but attention has 2 positions"),
    (lambda w: to_bertviz([w], None), "tokens is required"),
    (lambda w: to_bertviz([w], ["a", "b"], example=1), "example 1 is out of range"),
    (lambda w: to_bertviz([w[0]], ["a", "b"]), r"attention\[0\] must be floating-point weights \[B, H, T, S\]"),
    (lambda w: to_bertviz([], ["a", "b"]), "attention is empty"),
    (lambda w: to_bertviz([w], ["a", "b"], cross_attention=[w]), "cannot be given with cross_attention"),
    (lambda w: to_bertviz(tokens=["a", "b"]), "give attention"),
    (lambda w: to_bertviz(cross_attention=[w], encoder_tokens=["a", "b"], decoder_tokens=["c"]),
     "decoder_tokens has 1 labels, but cross_attention has 2 positions"),
    (lambda w: to_bertviz(cross_attention=[w], decoder_tokens=["c", "d"]), "encoder_tokens is required"),
    (lambda w: to_bertviz(encoder_attention=[w], cross_attention=[torch.rand(1, 3, 2, 5)],
                          encoder_tokens=["a", "b"], decoder_tokens=["c", "d"]),
     r"the encoder \(S\) lengths differ between kinds: encoder_attention 2, cross_attention 5"),
    (lambda w: to_bertviz(encoder_attention=[w, w], cross_attention=[w], encoder_tokens=["a", "b"],
                          decoder_tokens=["c", "d"]),
     "same number of layers.*encoder_attention 2, cross_attention 1"),
    (lambda w: to_bertviz(decoder_attention=[torch.rand(1, 3, 2, 3)], decoder_tokens=["c", "d"]),
     r"decoder_attention must be self-attention"),
])
def test_mismatched_layers_and_tokens_are_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call(torch.rand(1, 3, 2, 2).softmax(-1))


def test_wrong_types_are_refused_by_name():
    with pytest.raises(TypeError, match=r"attention\[0\] must be a tensor"):
        to_bertviz([[[0.5]]], ["a"])
    with pytest.raises(TypeError, match="tokens must be a sequence of labels"):
        to_bertviz([torch.rand(1, 1, 2, 2)], "ab")
    with pytest.raises(TypeError, match="attention must be a mapping"):
        to_bertviz(torch.rand(1, 1, 2, 2), ["a", "b"])
