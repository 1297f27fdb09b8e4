"""The positional-encoding lab's self-attention seq2seq: parity with a per-head reference, invariants.

The reference below is the textbook formulation the lab uses, written out
independently: one ``nn.Linear`` per head for the queries, keys and values, a
Python loop over the heads, ``masked_fill`` and ``softmax``. It creates its
parameters in the lab's order (per multi-head block: the output projection,
then query, key and value per head; the encoder before the decoder), so after
the same ``torch.manual_seed`` it holds the same weights as attnlab's model.
"""

import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from attnlab.attention import MultiHeadAttention, collect_attention, padding_mask, record_attention
from attnlab.models import (
    DecoderPe,
    DecoderSelfAttn,
    EncoderDecoderSelfAttn,
    EncoderPe,
    EncoderSelfAttn,
)

ATOL = 1e-5

# -- the reference -------------------------------------------------------------------------


class RefHead(nn.Module):
    def __init__(self, d_model, input_dim):
        super().__init__()
        self.query = nn.Linear(input_dim, d_model)
        self.key = nn.Linear(input_dim, d_model)
        self.value = nn.Linear(input_dim, d_model)

    def forward(self, x_query, x_keys, mask=None):
        q, k, v = self.query(x_query), self.key(x_keys), self.value(x_keys)
        scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])  # [B, T, S]
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        self.weights = torch.softmax(scores, dim=-1)
        return self.weights @ v  # [B, T, D]


class RefMultiHead(nn.Module):
    def __init__(self, n_heads, d_model, input_dim):
        super().__init__()
        self.out = nn.Linear(n_heads * d_model, d_model)
        self.heads = nn.ModuleList([RefHead(d_model, input_dim) for _ in range(n_heads)])

    def forward(self, x_query, x_keys, mask=None):
        contexts = []
        for head in self.heads:
            contexts.append(head(x_query, x_keys, mask))
        return self.out(torch.cat(contexts, dim=-1))

    def weights(self):
        return torch.stack([h.weights for h in self.heads], dim=1)  # [B, H, T, S]


def ref_positional_encoding(length, dim):
    """PE[p, 2i] = sin(p / 10000^(2i/dim)), PE[p, 2i+1] = cos(same), Vaswani et al. §3.5."""
    table = torch.zeros(length, dim, dtype=torch.float64)
    for p in range(length):
        for j in range(dim):
            angle = p / 10000 ** ((j - j % 2) / dim)
            table[p, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return table.float()


class RefSeq2Seq(nn.Module):
    def __init__(self, n_heads, d_model, ff_units, n_features, input_len, target_len):
        super().__init__()
        self.input_len, self.target_len = input_len, target_len
        self.enc_attn = RefMultiHead(n_heads, d_model, n_features)
        self.enc_ffn = nn.Sequential(nn.Linear(d_model, ff_units), nn.ReLU(), nn.Linear(ff_units, d_model))
        self.dec_self_attn = RefMultiHead(n_heads, d_model, n_features)
        self.dec_cross_attn = RefMultiHead(n_heads, d_model, d_model)
        self.dec_ffn = nn.Sequential(nn.Linear(d_model, ff_units), nn.ReLU(), nn.Linear(ff_units, n_features))

    @staticmethod
    def add_pe(x):
        return x * math.sqrt(x.shape[-1]) + ref_positional_encoding(x.shape[1], x.shape[-1])

    def encode(self, source, source_mask=None):
        x = self.add_pe(source)
        return self.enc_ffn(self.enc_attn(x, x, source_mask))

    def decode(self, inputs, states, source_mask, target_mask):
        x = self.add_pe(inputs)
        att = self.dec_self_attn(x, x, target_mask)
        return self.dec_ffn(self.dec_cross_attn(att, states, source_mask))

    @staticmethod
    def causal(n):
        return torch.tril(torch.ones(1, n, n))

    def forward(self, X, source_mask=None):
        states = self.encode(X[:, : self.input_len], source_mask)
        shifted = X[:, self.input_len - 1 : -1]
        return self.decode(shifted, states, source_mask, self.causal(self.target_len))

    def predict(self, source, source_mask=None):
        states = self.encode(source, source_mask)
        inputs = source[:, -1:]
        for i in range(self.target_len):
            out = self.decode(inputs, states, source_mask, self.causal(i + 1))
            inputs = torch.cat([inputs, out[:, -1:].detach()], dim=1)
        return inputs[:, 1:]


def pe_lab_model(n_heads=3, d_model=2, ff_units=10, n_features=2, input_len=2, target_len=2, seed=43):
    """The positional-encoding lab §1.8, and the reference built after the same manual_seed."""
    torch.manual_seed(seed)
    encpe = EncoderPe(n_heads=n_heads, d_model=d_model, ff_units=ff_units, n_features=n_features)
    decpe = DecoderPe(n_heads=n_heads, d_model=d_model, ff_units=ff_units, n_features=n_features)
    model = EncoderDecoderSelfAttn(encpe, decpe, input_len=input_len, target_len=target_len)
    torch.manual_seed(seed)
    ref = RefSeq2Seq(n_heads, d_model, ff_units, n_features, input_len, target_len)
    return model, ref


def ref_parameters_in_our_layout(ref):
    """The reference's weights, named and packed as attnlab's modules hold them.

    ``in_proj`` rows are q | k | v, heads in order (MultiHeadAttention's documented layout).
    """
    blocks = {
        "encoder.layer.self_attn_heads": ref.enc_attn,
        "decoder.layer.self_attn_heads": ref.dec_self_attn,
        "decoder.layer.cross_attn_heads": ref.dec_cross_attn,
    }
    params = {}
    for prefix, block in blocks.items():
        params[f"{prefix}.linear_out.weight"] = block.out.weight
        params[f"{prefix}.linear_out.bias"] = block.out.bias
        for kind in ("weight", "bias"):
            params[f"{prefix}.in_proj.{kind}"] = torch.cat(
                [getattr(getattr(h, part), kind) for part in ("query", "key", "value") for h in block.heads]
            )
    for prefix, ffn in (("encoder.layer.ffn", ref.enc_ffn), ("decoder.layer.ffn", ref.dec_ffn)):
        for name, p in ffn.named_parameters():
            params[f"{prefix}.{name}"] = p
    return params


SQUARE = torch.tensor([[-1.0, -1.0], [-1.0, 1.0], [1.0, 1.0], [1.0, -1.0]]).view(1, 4, 2)


def fixed_inputs():
    g = torch.Generator().manual_seed(2024)
    noisy = torch.randn(7, 4, 2, generator=g)
    return [SQUARE, noisy, 3 * noisy[:2]]


# -- parity with the lab's formulation -----------------------------------------------------


def test_same_weights_and_parameter_count_as_the_reference():
    model, ref = pe_lab_model()
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in ref.parameters())
    ours = dict(model.named_parameters())
    expected = ref_parameters_in_our_layout(ref)
    assert sorted(ours) == sorted(expected)
    for name, p in expected.items():
        assert_close(ours[name], p, atol=0, rtol=0, msg=name)


@pytest.mark.parametrize("index", range(3))
def test_train_mode_outputs_equal_the_reference(index):
    model, ref = pe_lab_model()
    X = fixed_inputs()[index]
    assert_close(model(X), ref(X), atol=ATOL, rtol=0)


@pytest.mark.parametrize("index", range(3))
def test_eval_mode_predictions_equal_the_reference(index):
    model, ref = pe_lab_model()
    X = fixed_inputs()[index]
    model.eval()
    assert_close(model(X), ref.predict(X[:, :2]), atol=ATOL, rtol=0)
    assert_close(model(X[:, :2]), ref.predict(X[:, :2]), atol=ATOL, rtol=0)


def test_source_mask_matches_the_reference_in_both_modes():
    model, ref = pe_lab_model(input_len=3, target_len=3)
    X = torch.randn(5, 6, 2)
    X[:2, 0] = 0.0  # padding in the first source step of two sequences
    source_mask = padding_mask(X[:, :3])  # [B, 1, S]
    assert_close(model(X, source_mask), ref(X, source_mask), atol=ATOL, rtol=0)
    model.eval()
    assert_close(model(X, source_mask), ref.predict(X[:, :3], source_mask), atol=ATOL, rtol=0)


def test_attention_weights_equal_the_references_heads():
    model, ref = pe_lab_model(input_len=3, target_len=4)
    X = torch.randn(4, 7, 2)
    with record_attention():
        model(X)
    ref(X)
    recorded = collect_attention(model)
    assert_close(recorded["encoder.layer.self_attn_heads"], ref.enc_attn.weights(), atol=ATOL, rtol=0)
    assert_close(recorded["decoder.layer.self_attn_heads"], ref.dec_self_attn.weights(), atol=ATOL, rtol=0)
    assert_close(recorded["decoder.layer.cross_attn_heads"], ref.dec_cross_attn.weights(), atol=ATOL, rtol=0)
    # the labs' layout, [H, B, T, S]
    alphas = model.decoder.layer.cross_attn_heads.alphas
    assert_close(alphas, ref.dec_cross_attn.weights().transpose(0, 1), atol=ATOL, rtol=0)


def test_gradient_steps_give_the_references_parameters():
    model, ref = pe_lab_model()
    X = fixed_inputs()[1]
    opt = torch.optim.SGD(model.parameters(), lr=0.3)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.3)
    for _ in range(3):
        for m, o in ((model, opt), (ref, ref_opt)):
            o.zero_grad()
            nn.functional.mse_loss(m(X), X[:, 2:]).backward()
            o.step()
    ours = dict(model.named_parameters())
    with torch.no_grad():
        for name, p in ref_parameters_in_our_layout(ref).items():
            assert_close(ours[name], p, atol=ATOL, rtol=0, msg=name)
    assert_close(model(X), ref(X), atol=ATOL, rtol=0)


def test_wider_configuration_matches_the_reference():
    model, ref = pe_lab_model(
        n_heads=2, d_model=4, ff_units=6, n_features=3, input_len=3, target_len=4, seed=5
    )
    X = torch.randn(6, 7, 3)
    assert_close(model(X), ref(X), atol=ATOL, rtol=0)
    model.eval()
    assert_close(model(X), ref.predict(X[:, :3]), atol=ATOL, rtol=0)


# -- invariants ----------------------------------------------------------------------------


def _model(input_len=3, target_len=5, n_features=3, seed=0):
    torch.manual_seed(seed)
    encoder = EncoderPe(2, 4, 8, n_features)
    decoder = DecoderPe(2, 4, 8, n_features)
    return EncoderDecoderSelfAttn(encoder, decoder, input_len, target_len)


@pytest.mark.parametrize("j", range(4))
def test_changing_a_future_target_point_leaves_earlier_outputs_unchanged(j):
    model = _model()
    with torch.no_grad():
        # Freshly initialised, the decoder barely reacts to its inputs (changes ~1e-6):
        # larger weights make "later outputs do change" a meaningful check.
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    X = torch.randn(4, 8, 3)
    before = model(X)
    X2 = X.clone()
    X2[:, 3 + j] += 1.0  # target point j: the decoder's input at position j + 1
    after = model(X2)
    assert_close(after[:, : j + 1], before[:, : j + 1], atol=1e-6, rtol=0)
    assert ((after[:, j + 1 :] - before[:, j + 1 :]).abs().amax(dim=(0, 2)) > 1e-3).all()  # later ones do


@pytest.mark.parametrize(("use_cache", "lengths"), [(True, [1] * 5), (False, [1, 2, 3, 4, 5])])
def test_predict_never_feeds_back_a_graph(use_cache, lengths):
    model = _model().eval()
    X = torch.randn(3, 3, 3, requires_grad=True)
    seen = []
    model.decoder.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    with torch.enable_grad():
        out = model.predict(X, use_cache=use_cache)
    # Cached: one new input per step; uncached: the whole prefix every step.
    assert [s.shape[1] for s in seen] == lengths
    assert all(s.grad_fn is None and not s.requires_grad for s in seen)
    assert not out.requires_grad and out.grad_fn is None
    assert torch.is_grad_enabled()


def test_predict_is_greedy_decoding_and_consistent_with_teacher_forcing():
    """Fed its own predictions as targets, the teacher-forced pass reproduces them (causality + greedy)."""
    model = _model()
    source = torch.randn(5, 3, 3)
    model.eval()
    predictions = model(source)
    assert_close(model.predict(source), predictions)  # a standalone call encodes by itself
    model.train()
    teacher_forced = model(torch.cat([source, predictions], dim=1))
    assert_close(teacher_forced, predictions, atol=1e-5, rtol=0)


def test_eval_reads_only_the_source_and_train_reads_the_targets():
    model = _model()
    X = torch.randn(4, 8, 3)
    X_other_targets = torch.cat([X[:, :3], torch.randn(4, 5, 3)], dim=1)
    train_out = model(X)
    assert not torch.allclose(model(X_other_targets), train_out)
    model.eval()
    eval_out = model(X)
    assert_close(model(X_other_targets), eval_out)
    assert_close(model(X[:, :3]), eval_out)
    # the first step sees only the last source point in both modes
    assert_close(eval_out[:, 0], train_out[:, 0], atol=1e-6, rtol=0)
    assert not model.training  # forward does not change the mode


@pytest.mark.parametrize("batch", [1, 7])
@pytest.mark.parametrize("train", [True, False])
def test_batch_sizes(batch, train):
    model = _model().train(train)
    X = torch.randn(batch, 8, 3)
    assert model(X).shape == (batch, 5, 3)


@pytest.mark.parametrize("train", [True, False])
def test_collect_attention_names_and_shapes(train):
    model = _model().train(train)
    X = torch.randn(6, 8, 3)
    assert collect_attention(model) == {}
    model(X)
    assert collect_attention(model) == {}  # weights are kept only when asked for
    with record_attention():
        model(X)
    recorded = collect_attention(model)
    assert {name: tuple(w.shape) for name, w in recorded.items()} == {
        "encoder.layer.self_attn_heads": (6, 2, 3, 3),  # [B, H, S, S]
        "decoder.layer.self_attn_heads": (6, 2, 5, 5),  # [B, H, T, T]: after predict, the last step's
        "decoder.layer.cross_attn_heads": (6, 2, 5, 3),  # [B, H, T, S]
    }
    for w in recorded.values():
        assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
    causal = torch.ones(5, 5).tril().bool()
    assert (recorded["decoder.layer.self_attn_heads"][..., ~causal] == 0).all()
    assert model.decoder.layer.self_attn_heads.alphas.shape == (2, 6, 5, 5)  # the labs' [H, B, T, S]


def test_attention_layers_are_attnlabs_wide_heads():
    model = _model()
    for name in ("encoder.layer.self_attn_heads", "decoder.layer.self_attn_heads",
                 "decoder.layer.cross_attn_heads"):
        mha = model.get_submodule(name)
        assert isinstance(mha, MultiHeadAttention) and mha.head_dim == mha.d_model == 4 and mha.n_heads == 2


def test_pe_lab_attributes_and_masks():
    model = _model()
    assert model.trg_masks.dtype == torch.bool and model.trg_masks.shape == (1, 5, 5)
    assert model.subsequent_mask(2).tolist() == [[[True, False], [True, True]]]
    assert "trg_masks" not in model.state_dict()
    layer = model.decoder.layer
    assert (layer.n_heads, layer.d_model, layer.ff_units, layer.n_features) == (2, 4, 8, 3)
    assert model.encoder.layer.n_features == 3 and EncoderSelfAttn(2, 4, 8).n_features is None
    assert DecoderSelfAttn(2, 4, 8).n_features == 4
    assert model.encoder.pe.pe.shape == (1, 100, 3)


def test_without_positional_encoding_and_in_float64():
    torch.manual_seed(0)
    model = EncoderDecoderSelfAttn(EncoderSelfAttn(2, 3, 5), DecoderSelfAttn(2, 3, 5), 2, 3).double()
    X = torch.randn(2, 5, 3, dtype=torch.float64)
    assert model(X).dtype == torch.float64
    assert model.eval()(X).shape == (2, 3, 3)


# -- bad arguments -------------------------------------------------------------------------


def _pair():
    return EncoderPe(1, 2, 2), DecoderPe(1, 2, 2)


@pytest.mark.parametrize(
    "build, error, name",
    [
        (lambda: EncoderSelfAttn(0, 2, 10), ValueError, "n_heads"),
        (lambda: EncoderSelfAttn(3, "2", 10), TypeError, "d_model"),
        (lambda: DecoderSelfAttn(3, 2, -1), ValueError, "ff_units"),
        (lambda: DecoderSelfAttn(3, 2, 10, n_features=0), ValueError, "n_features"),
        (lambda: EncoderPe(3, 2, 10, n_features=2.0), TypeError, "n_features"),
        (lambda: DecoderPe(3, 2, 10, max_len=0), ValueError, "max_len"),
        (lambda: EncoderDecoderSelfAttn(*_pair(), 0, 2), ValueError, "input_len"),
        (lambda: EncoderDecoderSelfAttn(*_pair(), 2, 2.0), TypeError, "target_len"),
        (lambda: EncoderDecoderSelfAttn(None, DecoderPe(1, 2, 2), 2, 2), TypeError, "encoder"),
    ],
)
def test_bad_constructor_arguments_name_the_argument(build, error, name):
    with pytest.raises(error, match=name):
        build()


def test_bad_inputs_raise_clear_errors():
    model = _model()
    with pytest.raises(ValueError, match="X has 7 steps"):
        model(torch.randn(2, 7, 3))  # training needs source and target
    with pytest.raises(TypeError, match="X must be"):
        model(torch.zeros(2, 8, 3, dtype=torch.long))
    model.eval()
    with pytest.raises(ValueError, match="X has 2 steps"):
        model(torch.randn(2, 2, 3))


# -- cached decoding ----------------------------------------------------------------------


@pytest.mark.parametrize(("target_len", "max_len"), [(2, 100), (5, 100), (40, 8)])
def test_cached_predict_equals_full_recompute(target_len, max_len):
    """The cache changes the cost, not the points: 1e-5, also past the PE's precomputed rows."""
    torch.manual_seed(3)
    encoder = EncoderPe(2, 4, 8, 3, max_len=max_len)
    decoder = DecoderPe(2, 4, 8, 3, max_len=max_len)
    model = EncoderDecoderSelfAttn(encoder, decoder, input_len=3, target_len=target_len).eval()
    with torch.no_grad():
        for p in model.parameters():  # larger weights: every step really depends on the earlier ones
            p.normal_(0.0, 0.5)
    source = torch.randn(4, 3, 3)
    source_mask = torch.tensor([True, True, False]).view(1, 1, 3).expand(4, 1, 3)
    for mask in (None, source_mask):
        cached = model.predict(source, mask, use_cache=True)
        full = model.predict(source, mask, use_cache=False)
        assert cached.shape == (4, target_len, 3)
        assert_close(cached, full, atol=1e-5, rtol=0)
        assert_close(model(source, mask), cached)  # eval forward decodes with the cache


def test_cached_predict_keeps_nothing_on_the_modules():
    model = _model().eval()
    before = {name: value for name, value in vars(model.decoder.layer.cross_attn_heads).items()
              if isinstance(value, torch.Tensor) or value is None}
    model.predict(torch.randn(2, 3, 3))
    after = {name: value for name, value in vars(model.decoder.layer.cross_attn_heads).items()
             if isinstance(value, torch.Tensor) or value is None}
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)
    for module in model.modules():
        assert not any(type(v).__name__ in {"DecodingCache", "KVCache"} for v in vars(module).values())


def test_recording_decodes_without_the_cache_so_the_last_step_has_the_whole_matrix():
    model = _model().eval()
    with record_attention():
        model(torch.randn(2, 3, 3))
    weights = collect_attention(model)
    assert list(weights["decoder.layer.self_attn_heads"].shape) == [2, 2, 5, 5]  # [B, H, T, T]
    assert list(weights["decoder.layer.cross_attn_heads"].shape) == [2, 2, 5, 3]


def test_training_forward_with_the_causal_flag_equals_the_labs_mask():
    model = _model().train()
    X = torch.randn(4, 8, 3)
    flagged = model(X)
    model.encode(X[:, :3])
    masked = model.decode(X[:, 2:-1], None, model.trg_masks)
    assert_close(flagged, masked, atol=1e-6, rtol=0)
