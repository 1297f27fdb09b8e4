"""attnlab.compat.chapter9: the book's ``plot_attention`` and ``sequence_pred``, which run a model and draw.

These tests were tests/plotting/test_plot_attention.py's and test_plot_training.py's
while those functions lived in attnlab.plotting; plotting now takes data only
(its own tests draw given weights and predictions).
"""

import warnings
from types import SimpleNamespace

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from torch import nn

from attnlab.attention import MultiHeadAttention, collect_attention, record_attention
from attnlab.attention.scoring import alphas_from_scores, context_vector, scaled_dot_scores
from attnlab.compat.chapter9 import plot_attention, sequence_pred
from attnlab.data import make_loaders
from attnlab.models import DecoderPe, EncoderDecoderSelfAttn, EncoderPe
from attnlab.plotting import plot_attention_weights, plot_sequence_pred

from figure_cells import assert_cells, cell_texts, tick_texts, visible


class SelfAttn(nn.Module):
    """Self-attention with the labs' wide heads, and a dropout so train/eval mode matters."""

    def __init__(self, n_heads, d_model=4, n_features=2):
        super().__init__()
        self.drop = nn.Dropout(0.5)
        self.mha = MultiHeadAttention(n_heads, d_model, input_dim=n_features, head_dim=d_model)

    def forward(self, x):
        x = self.drop(x)
        return self.mha(x, x, x)


class TopAlphas(nn.Module):
    """Keeps its own weights in ``alphas [B, T, S]``, as the GRU ``EncoderDecoderAttn``."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 2)
        self.alphas = None

    def forward(self, x):
        source, targets = x, self.linear(x)  # [B, S, 2], [B, T, 2]
        self.alphas = alphas_from_scores(scaled_dot_scores(targets, source))  # [B, T, S]
        return context_vector(self.alphas, source)


def recorded(model, x, name):
    """The weights [B, H, T, S] of ``name`` for one eval-mode run, computed independently."""
    was = model.training
    model.eval()
    with torch.no_grad(), record_attention():
        model(x)
    model.train(was)
    return collect_attention(model)[name].numpy()





# -- plot_attention ------------------------------------------------------------------


def test_several_heads_a_row_per_sequence_and_a_column_per_head(save_png):
    model = SelfAttn(n_heads=3)
    x = torch.randn(2, 2, 2)
    points = ["Clockwise\nPoint #1: -0.97, 0.96", "Counter-Clockwise\nPoint #1: 1.13, 1.16"]
    fig = plot_attention(model, x, points, ["Point #1", "Point #2"], ["Point #3", "Point #4"],
                         decoder=False, self_attn=True, alphas_attr="mha.alphas")
    assert type(fig) is Figure
    assert len(fig.axes) == len(visible(fig)) == 6
    weights = recorded(model, x, "mha")  # [B=2, H=3, T=2, S=2]
    for i in range(2):
        for h in range(3):
            ax = fig.axes[i * 3 + h]
            assert_cells(ax, weights[i, h])
            assert tick_texts(ax, "x") == ["Point #1", "Point #2"]
            # Encoder self-attention: the targets are the sources; labelled on the first column only.
            assert tick_texts(ax, "y") == (["Point #1", "Point #2"] if h == 0 else ["", ""])
            assert ax.get_title() == (f"Attention Head #{h + 1}" if i == 0 else "")
        assert fig.axes[i * 3].get_ylabel() == points[i]
    assert fig.axes[0].xaxis.get_ticks_position() == "top"
    assert tuple(fig.get_size_inches()) == (9.0, 6.0)  # the book's 648x432 px at 72 dpi
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the labs' suptitle + subplots_adjust must not warn
        fig.suptitle("Encoder Self-Attention")
        fig.subplots_adjust(top=0.85)
    save_png(fig, "plot_attention_heads")


def test_one_head_a_panel_per_sequence_unused_panels_hidden(save_png):
    model = SelfAttn(n_heads=1)
    x = torch.randn(7, 3, 2)
    fig = plot_attention(model, x, n_cols=5, layer="mha")
    assert len(fig.axes) == 10 and len(visible(fig)) == 7
    weights = recorded(model, x, "mha")  # [7, 1, 3, 3]
    for i, ax in enumerate(visible(fig)):
        assert ax.get_title() == f"Point #{i}"
        assert tick_texts(ax, "x") == ["Input #0", "Input #1", "Input #2"]
        assert tick_texts(ax, "y") == (["Target #0", "Target #1", "Target #2"] if i % 5 == 0 else [""] * 3)
        assert_cells(ax, weights[i, 0])
    save_png(fig, "plot_attention_one_head")


def test_few_sequences_use_few_columns():
    fig = plot_attention(SelfAttn(1), torch.randn(2, 3, 2), layer="mha")
    assert len(fig.axes) == 2 and tuple(fig.get_size_inches()) == (6.0, 3.0)


def test_top_level_alphas_are_one_head(save_png):
    model = TopAlphas()
    x = torch.randn(10, 2, 2)
    fig = plot_attention(model, x, None, ["Point #1", "Point #2"], ["Point #3", "Point #4"])
    assert len(visible(fig)) == 10
    assert tuple(fig.get_size_inches()) == (15.0, 6.0)  # the book's 1080x432 px at 72 dpi
    alphas = model.alphas.numpy()  # [B, T, S] from the plot's own run
    for i, ax in enumerate(fig.axes):
        assert_cells(ax, alphas[i])
        assert tick_texts(ax, "x") == ["Point #1", "Point #2"]
    assert tick_texts(fig.axes[0], "y") == ["Point #3", "Point #4"]
    save_png(fig, "plot_attention_top_alphas")


def test_a_single_decoding_step_draws():
    # T = 1 (one query): the book's squeeze() made this a 1-D array that imshow refused.
    class OneQuery(nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = MultiHeadAttention(2, 4, input_dim=2)

        def forward(self, x):
            return self.mha(x[:, -1:], x, x)

    fig = plot_attention(OneQuery(), torch.randn(1, 3, 2), layer="mha")
    assert len(fig.axes) == 2 and len(fig.axes[0].texts) == 3


def test_layer_and_the_books_alphas_attr_agree():
    model = SelfAttn(n_heads=2)
    x = torch.randn(2, 3, 2)
    texts = [[cell_texts(ax) for ax in plot_attention(model, x, **kw).axes]
             for kw in ({"layer": "mha"}, {"alphas_attr": "mha.alphas"}, {"alphas_attr": "mha.attn_weights"},
                        {"alphas_attr": "mha"})]
    assert texts[0] == texts[1] == texts[2] == texts[3]


def test_default_alphas_attr_falls_back_to_the_only_recorded_layer():
    model = SelfAttn(n_heads=2)  # no top-level `alphas`, one attention layer
    x = torch.randn(1, 3, 2)
    assert [cell_texts(ax) for ax in plot_attention(model, x).axes] == \
        [cell_texts(ax) for ax in plot_attention(model, x, layer="mha").axes]


def test_a_module_that_did_not_run_is_not_drawn_stale():
    class TwoPaths(nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.unused = MultiHeadAttention(1, 2), MultiHeadAttention(1, 2)

        def forward(self, x):
            return self.used(x, x, x)

    model = TwoPaths()
    x = torch.randn(1, 2, 2)
    with record_attention():
        model.unused(x, x, x)  # earlier weights, from another run
    with pytest.raises(ValueError, match=r"'unused\.alphas'.*did not run.*'used'"):
        plot_attention(model, x, alphas_attr="unused.alphas")
    with pytest.raises(ValueError, match="unknown layer 'unused'"):
        plot_attention(model, x, layer="unused")


def test_the_models_modes_are_restored_and_no_graph_is_built():
    model = SelfAttn(n_heads=2)
    model.train()
    model.mha.eval()  # mixed modes come back exactly
    plot_attention(model, torch.randn(2, 3, 2), layer="mha")
    assert model.training and model.drop.training and not model.mha.training
    assert not model.mha.attn_weights.requires_grad
    assert all(p.grad is None for p in model.parameters())
    model.eval()
    plot_attention(model, torch.randn(2, 3, 2), layer="mha")
    assert not any(m.training for m in model.modules())


def test_the_model_runs_in_eval_mode():
    model = SelfAttn(n_heads=1)  # dropout 0.5 on the inputs: train mode would change the weights
    model.train()
    x = torch.randn(3, 4, 2)
    fig = plot_attention(model, x, layer="mha")
    expected = recorded(model, x, "mha")
    for i, ax in enumerate(visible(fig)):
        assert_cells(ax, expected[i, 0])


def test_self_attention_labels_as_the_book():
    model = SelfAttn(n_heads=1)
    x = torch.randn(1, 2, 2)
    src, tgt = ["Point #1", "Point #2"], ["Point #3", "Point #4"]
    ax = plot_attention(model, x, None, src, tgt, decoder=True, self_attn=True, layer="mha").axes[0]
    # Decoder self-attention: its inputs are the last source point, then the targets but the last.
    assert tick_texts(ax, "x") == ["Point #2", "Point #3"]
    assert tick_texts(ax, "y") == ["Point #3", "Point #4"]
    ax = plot_attention(model, x, None, src, tgt, self_attn=True, layer="mha").axes[0]
    assert tick_texts(ax, "x") == tick_texts(ax, "y") == ["Point #1", "Point #2"]
    ax = plot_attention(model, x, None, src, tgt, layer="mha").axes[0]  # cross-attention: as given
    assert tick_texts(ax, "x") == src and tick_texts(ax, "y") == tgt


@pytest.mark.parametrize(
    ("kwargs", "exc", "pattern"),
    [
        ({"layer": "encoder.nope"}, ValueError, r"'encoder\.nope'.*'mha'"),
        ({"alphas_attr": "decoder.alphas"}, ValueError, r"'decoder\.alphas'.*'mha'"),
        ({"alphas_attr": "drop.p"}, ValueError, r"'drop\.p'"),
        ({"layer": "mha", "point_labels": ["a"]}, ValueError, "point_labels has 1 entries"),
        ({"layer": "mha", "source_labels": ["a", "b"]}, ValueError, "source_labels has 2 entries"),
        ({"layer": "mha", "target_labels": ["a"] * 4}, ValueError, "target_labels has 4 entries"),
        ({"layer": "mha", "target_labels": "abc"}, TypeError, "target_labels"),
        ({"layer": "mha", "n_cols": 0}, ValueError, "n_cols"),
        ({"layer": 3}, TypeError, "layer"),
    ],
)
def test_plot_attention_bad_input_names_it(kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        plot_attention(SelfAttn(n_heads=1), torch.randn(2, 3, 2), **kwargs)


def test_plot_attention_bad_model_or_inputs():
    with pytest.raises(TypeError, match="model"):
        plot_attention(lambda x: x, torch.randn(1, 2, 2))
    with pytest.raises(TypeError, match="inputs"):
        plot_attention(SelfAttn(1), [[1.0, 2.0]])


def test_plot_attention_on_the_pe_lab_models(save_png):
    models = pytest.importorskip("attnlab.models")
    torch.manual_seed(43)
    encpe = models.EncoderPe(n_heads=3, d_model=2, ff_units=10, n_features=2)
    decpe = models.DecoderPe(n_heads=3, d_model=2, ff_units=10, n_features=2)
    model = models.EncoderDecoderSelfAttn(encpe, decpe, input_len=2, target_len=2)
    inputs = torch.randn(2, 2, 2)
    src, tgt = ["Point #1", "Point #2"], ["Point #3", "Point #4"]
    points = [f"Point #1: {p[0, 0]:.2f}, {p[0, 1]:.2f}" for p in inputs]
    for name, layer, kw in [  # the positional-encoding lab's three calls
        ("encoder_self", "encoder.layer.self_attn_heads", dict(decoder=False, self_attn=True)),
        ("decoder_self", "decoder.layer.self_attn_heads", dict(decoder=True, self_attn=True)),
        ("cross", "decoder.layer.cross_attn_heads", dict(self_attn=False)),
    ]:
        model.train()
        fig = plot_attention(model, inputs, points, src, tgt, alphas_attr=f"{layer}.alphas", **kw)
        assert model.training
        assert len(visible(fig)) == 6, name  # 2 sequences x 3 heads
        weights = collect_attention(model)[layer].numpy()  # [2, 3, 2, 2], left by the plot's run
        for i in range(2):
            for h in range(3):
                assert_cells(fig.axes[i * 3 + h], weights[i, h])
        expected_x = {"encoder_self": src, "decoder_self": ["Point #2", "Point #3"], "cross": src}[name]
        assert tick_texts(fig.axes[0], "x") == expected_x
        fig.suptitle(name)
        save_png(fig, f"plot_attention_{name}")

    torch.manual_seed(23)
    encoder = models.Encoder(n_features=2, hidden_dim=2)
    decoder = models.DecoderAttn(n_features=2, hidden_dim=2)
    model = models.EncoderDecoderAttn(encoder, decoder, input_len=2, target_len=2, teacher_forcing_prob=0.5)
    inputs = torch.randn(10, 2, 2)
    fig = plot_attention(model, inputs, None, src, tgt)
    assert len(visible(fig)) == 10
    for i, ax in enumerate(fig.axes):
        assert_cells(ax, model.alphas[i].detach().numpy())
    save_png(fig, "plot_attention_gru")


@pytest.fixture(scope="module")
def test_data():
    loaders = make_loaders()
    return loaders.full_test, loaders.test_directions


def tiny_model():
    """The positional-encoding lab's configuration, untrained."""
    torch.manual_seed(43)
    encoder = EncoderPe(n_heads=3, d_model=2, ff_units=10, n_features=2)
    decoder = DecoderPe(n_heads=3, d_model=2, ff_units=10, n_features=2)
    return EncoderDecoderSelfAttn(encoder, decoder, input_len=2, target_len=2)


def eval_predictions(model, source):
    was = model.training
    model.eval()
    with torch.no_grad():
        out = model(source)
    model.train(was)
    return out


def dashed(ax):
    (line,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    return line.get_xydata()


def solid(ax):
    (line,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == "-"]
    return line.get_xydata()




# -- sequence_pred -------------------------------------------------------------------


def test_renders_the_books_figure(test_data, save_png):
    full_test, directions = test_data
    fig = sequence_pred(tiny_model(), full_test, directions)
    assert type(fig) is Figure
    assert tuple(fig.get_size_inches()) == (20.0, 8.0)  # the book's 1440x576 px at 72 dpi
    axes = visible(fig)
    assert len(axes) == 10
    for ax in axes:
        assert ax.get_xlim() == ax.get_ylim() == (-1.45, 1.45)
        assert ax.get_xlabel() == "$x_0$" and ax.get_ylabel() == "$x_1$"
    save_png(fig, "sequence_pred")


def test_lines_go_through_the_true_and_predicted_corners(test_data):
    full_test, directions = test_data
    model = tiny_model()
    preds = eval_predictions(model, full_test[:10, :2]).double().numpy()
    fig = sequence_pred(model, full_test, directions)
    squares = full_test.double().numpy()
    for i, ax in enumerate(visible(fig)):
        np.testing.assert_allclose(solid(ax), squares[i][[0, 1, 2, 3, 0]])  # the true square, closed
        # dashed: 2 -> predicted 3 -> predicted 4 -> 1
        expected = np.stack([squares[i, 1], preds[i, 0], preds[i, 1], squares[i, 0]])
        np.testing.assert_allclose(dashed(ax), expected, atol=1e-6)
        numbers = [(t.get_text(), t.get_position()) for t in ax.texts]
        for k in range(4):
            assert (str(k + 1), tuple(squares[i, k])) in [(s, tuple(p)) for s, p in numbers]


def test_titles_follow_the_directions(test_data):
    full_test, directions = test_data
    preds = full_test[:, 2:]
    for dirs in (directions, directions.numpy(), directions.tolist()):
        titles = [ax.get_title() for ax in visible(sequence_pred(preds, full_test, dirs))]
        assert titles == ["Clockwise" if d == 1 else "Counter-Clockwise" for d in directions[:10].tolist()]
    assert {"Clockwise", "Counter-Clockwise"} <= set(titles)
    assert all(ax.get_title() == "" for ax in visible(sequence_pred(preds, full_test)))


@pytest.mark.parametrize("training", [True, False])
def test_restores_the_models_mode(test_data, training):
    full_test, directions = test_data
    model = tiny_model().train(training)
    model.decoder.train(not training)  # a mixed state is restored module by module too
    modes = [m.training for m in model.modules()]
    sequence_pred(model, full_test, directions)
    assert [m.training for m in model.modules()] == modes


def test_module_trainer_and_predictions_draw_the_same(test_data):
    full_test, directions = test_data
    model = tiny_model()
    preds = eval_predictions(model, full_test[:, :2])
    trainer = SimpleNamespace(model=model, device="cpu")  # the book's StepByStep, as far as the figure goes
    figures = [
        sequence_pred(model, full_test, directions),
        sequence_pred(trainer, full_test, directions),  # the labs' positional call
        sequence_pred(preds, full_test, directions),
        sequence_pred(preds.numpy(), full_test.numpy(), directions.numpy()),
    ]
    reference = [dashed(ax) for ax in visible(figures[0])]
    for fig in figures[1:]:
        for ax, expected in zip(visible(fig), reference, strict=True):
            np.testing.assert_allclose(dashed(ax), expected, atol=1e-6)


def test_a_callable_runs_once_on_the_drawn_squares_without_grad(test_data):
    full_test, _ = test_data
    calls = []

    def predict(source):
        calls.append((tuple(source.shape), source.dtype, torch.is_grad_enabled()))
        return source.flip(1)

    fig = sequence_pred(predict, full_test, n_rows=1, n_cols=4)
    assert calls == [((4, 2, 2), torch.float32, False)]
    np.testing.assert_allclose(dashed(visible(fig)[0])[1:3], full_test[0, :2].flip(0).numpy())


def test_a_float64_model_gets_float64_inputs(test_data):
    full_test, directions = test_data
    model = tiny_model().double()
    fig = sequence_pred(model, full_test, directions)
    assert len(visible(fig)) == 10


def test_fewer_squares_than_panels(test_data, save_png):
    full_test, directions = test_data
    fig = sequence_pred(full_test[:7, 2:], full_test[:7], directions[:7])
    axes = fig.axes
    assert len(axes) == 10 and len(visible(fig)) == 7  # 2 x 5, the last three hidden
    assert all(not ax.get_visible() for ax in axes[7:])
    small = sequence_pred(full_test[:3, 2:], full_test[:3], directions[:3])
    assert len(small.axes) == 3 and tuple(small.get_size_inches()) == (12.0, 4.0)  # no empty row
    save_png(fig, "sequence_pred_7")


def test_limits_widen_for_a_far_prediction(test_data):
    full_test, _ = test_data
    preds = full_test[:, 2:].clone()
    preds[0, 0] = torch.tensor([2.3, 0.0])
    fig = sequence_pred(preds, full_test, n_rows=1, n_cols=2)
    for ax in fig.axes:
        low, high = ax.get_xlim()
        assert high >= 2.5 and low == -high and ax.get_ylim() == (low, high)


def test_legend_tells_true_from_predicted(test_data):
    full_test, _ = test_data
    fig = sequence_pred(full_test[:, 2:], full_test)
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["true corners", "predicted corners 3 and 4"]


@pytest.mark.parametrize(("args", "kwargs", "error", "match"), [
    ((np.zeros((5, 3, 2)),), {}, ValueError, "X must"),
    ((np.zeros((0, 4, 2)),), {}, ValueError, "X must"),
    (("squares",), {}, TypeError, "X must"),
    ((None, [1, 0]), {}, ValueError, "directions"),
    ((None, [1, 0, 2, 1, 1]), {}, ValueError, "directions"),
    ((None,), {"n_rows": 0}, ValueError, "n_rows"),
    ((None,), {"n_cols": 2.5}, TypeError, "n_cols"),
])
def test_sequence_pred_bad_arguments(args, kwargs, error, match):
    X = args[0] if args[0] is not None else np.zeros((5, 4, 2))
    with pytest.raises(error, match=match):
        sequence_pred(np.zeros((5, 2, 2)), X, *args[1:], **kwargs)


@pytest.mark.parametrize(("predictor", "error"), [
    (np.zeros((4, 2, 2)), ValueError),  # not one per square
    (np.zeros((5, 3, 2)), ValueError),
    (lambda source: source[:, :1], ValueError),  # the model returns the wrong shape
    (lambda source: source.tolist(), TypeError),  # ... or not a tensor
    (42, TypeError),
    ("model", TypeError),
])
def test_bad_predictions_name_the_argument(predictor, error):
    with pytest.raises(error, match="model_or_predictions"):
        sequence_pred(predictor, np.zeros((5, 4, 2)))


def test_a_module_with_a_model_attribute_is_run_itself():
    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = nn.Identity()  # not a trainer: the wrapper is the model

        def forward(self, source):
            return source + 1

    fig = sequence_pred(Wrapper(), torch.zeros(2, 4, 2))
    np.testing.assert_allclose(dashed(fig.axes[0])[1:3], np.ones((2, 2)))


# -- the data-only figures draw what these run -----------------------------------------


def test_plot_attention_draws_what_plot_attention_weights_draws_from_the_recorded_weights():
    model = SelfAttn(n_heads=2)
    x = torch.randn(2, 3, 2)
    weights = torch.from_numpy(recorded(model, x, "mha"))  # [2, 2, 3, 3]
    by_model = plot_attention(model, x, None, ["a", "b", "c"], self_attn=True, layer="mha")
    by_data = plot_attention_weights(weights, None, ["a", "b", "c"], self_attn=True)
    assert [cell_texts(ax) for ax in by_model.axes] == [cell_texts(ax) for ax in by_data.axes]
    assert [tick_texts(ax, "y") for ax in by_model.axes] == [tick_texts(ax, "y") for ax in by_data.axes]


def test_sequence_pred_draws_what_plot_sequence_pred_draws_from_the_predictions(test_data):
    full_test, directions = test_data
    model = tiny_model()
    preds = eval_predictions(model, full_test[:, :2])  # [N, 2, 2]
    by_model = sequence_pred(model, full_test, directions, n_rows=1, n_cols=3)
    by_data = plot_sequence_pred(preds, full_test, directions, n_rows=1, n_cols=3)
    assert len(by_model.axes) == len(by_data.axes) == 3
    for ax, other in zip(by_model.axes, by_data.axes, strict=True):
        np.testing.assert_allclose(dashed(ax), dashed(other), atol=1e-6)
        assert ax.get_title() == other.get_title()


def test_the_books_figures_touch_no_global_state(tmp_path, test_data):
    full_test, directions = test_data
    rc_before = {k: np.copy(v) if isinstance(v, np.ndarray) else v for k, v in matplotlib.rcParams.items()}
    figs_before = plt.get_fignums()
    for k, fig in enumerate([plot_attention(SelfAttn(2), torch.randn(2, 2, 2), layer="mha"),
                             sequence_pred(lambda source: source.flip(1), full_test, n_rows=1, n_cols=2)]):
        assert type(fig) is Figure
        fig.savefig(tmp_path / f"{k}.png")
    assert plt.get_fignums() == figs_before
    assert dict(matplotlib.rcParams.items()) == rc_before
