"""A scheme shared across layers (T5's one table): built once per stack, trained by every layer, saved and loaded.

The golden numbers are a float64 hand computation of a 2-layer decoder-only model (pre-norm layers,
written here from their definition) in which both layers add the same T5 bias.
"""

import io
import math

import torch

from attnlab.encodings import RandomizedPositions
from attnlab.encodings.t5 import SharedT5RelativeBias, T5RelativeBias, t5_bucket
from attnlab.models import DecoderOnlyTransformer, EncoderOnlyTransformer, Transformer

D, H, V = 16, 2, 11
DH = D // H


def model(position="t5-shared", n_layers=2, seed=0):
    torch.manual_seed(seed)
    m = DecoderOnlyTransformer(vocab_size=V, d_model=D, n_heads=H, n_layers=n_layers, position=position).double()
    with torch.no_grad():  # a table well off its 0.02 initialisation, so the bias matters
        for layer in m.layers:
            layer.self_attn.position.table.weight.normal_()
    return m


def schemes(m):
    return [layer.self_attn.position for layer in m.layers]


def test_every_layer_gets_the_same_module_and_its_parameters_count_once():
    shared, own = model("t5-shared", n_layers=3), model("t5", n_layers=3)
    first = schemes(shared)[0]
    assert isinstance(first, SharedT5RelativeBias)
    assert all(s is first for s in schemes(shared))
    assert len({id(s) for s in schemes(own)}) == 3
    table = first.table.weight.numel()
    n_shared = sum(p.numel() for p in shared.parameters())
    assert n_shared == sum(p.numel() for p in own.parameters()) - 2 * table
    assert sum(1 for name, _ in shared.named_parameters() if "position" in name) == 1


def test_the_shared_table_gets_the_gradients_of_every_layer():
    # The same model with one table per layer, every table a copy of the shared one: the shared
    # table's gradient is the sum of theirs, and each layer's share is non-zero.
    shared = model("t5-shared")
    own = model("t5")
    own.load_state_dict(shared.state_dict())  # every layer's table := the shared one
    x = torch.randint(0, V, (3, 9))
    g = torch.randn(3, 9, V, dtype=torch.float64)
    (shared(x) * g).sum().backward()
    (own(x) * g).sum().backward()
    per_layer = [s.table.weight.grad for s in schemes(own)]
    assert all(float(p.abs().max()) > 0 for p in per_layer)
    torch.testing.assert_close(schemes(shared)[0].table.weight.grad, sum(per_layer), atol=1e-12, rtol=0)


def _layer_norm(x, norm):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def test_two_layers_equal_a_hand_computation_with_one_bias():
    m = model("t5-shared").eval()
    x = torch.randint(0, V, (2, 7))
    L = x.shape[1]
    with torch.no_grad():
        got = m(x)
        table = schemes(m)[0].table.weight  # [buckets, H]
        rel = torch.arange(L)[None, :] - torch.arange(L)[:, None]  # key minus query
        bias = table[t5_bucket(rel, bidirectional=False)].permute(2, 0, 1)  # [H, L, L], the same in both layers
        h = m.embed.weight[x]  # [B, L, D]
        for layer in m.layers:
            attn = layer.self_attn
            a = _layer_norm(h, layer.norm1)
            qkv = a @ attn.in_proj.weight.T + attn.in_proj.bias  # [B, L, 3D]: rows q | k | v
            q, k, v = (t.view(2, L, H, DH).transpose(1, 2) for t in qkv.split(D, dim=-1))  # [B, H, L, Dh]
            scores = q @ k.transpose(-1, -2) / math.sqrt(DH) + bias
            scores = scores.masked_fill(rel > 0, float("-inf"))
            out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, L, D)
            h = h + out @ attn.linear_out.weight.T + attn.linear_out.bias
            f = _layer_norm(h, layer.norm2)
            lin1, lin2 = layer.ffn[0], layer.ffn[3]
            h = h + torch.relu(f @ lin1.weight.T + lin1.bias) @ lin2.weight.T + lin2.bias
        want = _layer_norm(h, m.norm) @ m.head.weight.T + m.head.bias
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


def test_state_dict_round_trip_keeps_one_table():
    m = model("t5-shared", n_layers=3)
    buffer = io.BytesIO()
    torch.save(m.state_dict(), buffer)
    buffer.seek(0)
    other = model("t5-shared", n_layers=3, seed=1)
    other.load_state_dict(torch.load(buffer, weights_only=True))
    first = schemes(other)[0]
    assert all(s is first for s in schemes(other))
    torch.testing.assert_close(first.table.weight, schemes(m)[0].table.weight, atol=0, rtol=0)
    x = torch.randint(0, V, (2, 6))
    with torch.no_grad():
        torch.testing.assert_close(other(x), m(x), atol=0, rtol=0)


def test_the_table_is_built_with_the_first_layer_before_its_weights():
    # Creation order: embed, head, then the first layer's scheme (shared) and that layer's weights, then the
    # other layers without a scheme of their own. The shared model's first layer draws as the per-layer one's.
    torch.manual_seed(3)
    fresh_shared = DecoderOnlyTransformer(vocab_size=V, d_model=D, n_heads=H, n_layers=2, position="t5-shared")
    torch.manual_seed(3)
    fresh_own = DecoderOnlyTransformer(vocab_size=V, d_model=D, n_heads=H, n_layers=2, position="t5")
    a, b = fresh_shared.layers[0], fresh_own.layers[0]
    torch.testing.assert_close(a.self_attn.position.table.weight, b.self_attn.position.table.weight, atol=0, rtol=0)
    torch.testing.assert_close(a.self_attn.in_proj.weight, b.self_attn.in_proj.weight, atol=0, rtol=0)


def test_the_same_numbers_as_one_table_per_layer_holding_equal_values():
    shared, own = model("t5-shared"), model("t5")
    own.load_state_dict(shared.state_dict())
    x = torch.randint(0, V, (2, 8))
    with torch.no_grad():
        torch.testing.assert_close(shared(x), own(x), atol=0, rtol=0)


def test_an_encoder_decoder_shares_one_table_per_stack():
    torch.manual_seed(0)
    m = Transformer(vocab_size=V, d_model=D, n_heads=H, n_layers=2, position="t5-shared")
    enc = {id(layer.self_attn.position) for layer in m.encoder_layers}
    dec = {id(layer.self_attn.position) for layer in m.decoder_layers}
    assert len(enc) == 1 and len(dec) == 1 and enc != dec
    assert m.encoder_layers[0].self_attn.position.bidirectional
    assert not m.decoder_layers[0].self_attn.position.bidirectional


def test_encoder_only_and_randomized_share_too():
    torch.manual_seed(0)
    enc = EncoderOnlyTransformer(vocab_size=V, d_model=D, n_heads=H, n_layers=3, position="t5-shared")
    assert len({id(layer.self_attn.position) for layer in enc.layers}) == 1
    rand = DecoderOnlyTransformer(vocab_size=V, d_model=D, n_heads=H, n_layers=3, position="random-t5-shared",
                                  max_len=32)
    wrappers = [layer.self_attn.position for layer in rand.layers]
    assert isinstance(wrappers[0], RandomizedPositions) and all(w is wrappers[0] for w in wrappers)
    assert rand(torch.randint(0, V, (2, 5))).shape == (2, 5, V)


def test_per_layer_t5_is_unchanged():
    assert not T5RelativeBias.shared_across_layers and SharedT5RelativeBias.shared_across_layers
