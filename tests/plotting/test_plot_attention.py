"""plot_attention / query_and_keys / alignment_matrix: the attention and positional-encoding labs' figures."""

import re
import warnings

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from torch import nn

from attnlab.attention import MultiHeadAttention, collect_attention, record_attention
from attnlab.attention.scoring import alphas_from_scores, context_vector, dot_scores, scaled_dot_scores
from attnlab.plotting import alignment_matrix, figure9, plot_attention, query_and_keys


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


def cell_texts(ax):
    """``{(row, col): text}`` of the values written on the cells."""
    return {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in ax.texts}


def assert_cells(ax, values):
    texts = cell_texts(ax)
    assert len(texts) == values.size
    for (r, c), v in np.ndenumerate(values):
        assert texts[r, c] == f"{v:.2f}", (r, c)


def tick_texts(ax, axis):
    return [t.get_text() for t in getattr(ax, f"get_{axis}ticklabels")()]


def visible(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


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


# -- query_and_keys ------------------------------------------------------------------

Q = torch.tensor([0.55, 0.95]).view(1, 1, 2)
K = torch.tensor([[0.65, 0.2], [0.85, -0.4], [-0.95, -0.75]]).view(1, 3, 2)


def labels(ax):
    return [t.get_text() for t in ax.texts if t.get_text()]


def assert_inside_axes(fig):
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # runs the layout, as savefig does
    renderer = canvas.get_renderer()
    for ax in fig.axes:
        box = ax.get_window_extent(renderer)
        for text in ax.texts:
            if text.get_text():
                tb = text.get_window_extent(renderer)
                assert box.x0 - 1 <= tb.x0 and tb.x1 <= box.x1 + 1, text.get_text()
                assert box.y0 - 1 <= tb.y0 and tb.y1 <= box.y1 + 1, text.get_text()


def test_query_and_keys_golden_labels(save_png):
    context = context_vector(alphas_from_scores(dot_scores(Q, K)), K)  # [[[0.5706, -0.0993]]]
    fig = query_and_keys(Q.squeeze(), K.view(3, 2), context)  # the attention lab's call
    ax = fig.axes[0]
    found = labels(ax)
    assert "$||Q||=1.10$" in found
    for i, (norm, cos) in enumerate([("0.68", "0.73"), ("0.94", "0.08"), ("1.21", "-0.93")]):
        assert f"$||K_{{{i}}}||={norm}$\n$\\cos\\theta_{{{i}}}={cos}$" in found
    assert "Context Vector" in found
    colors = {t.get_text(): t.get_color() for t in ax.texts if t.get_text()}
    assert colors["$||Q||=1.10$"] == "red" and colors["Context Vector"] == "green"
    assert ax.get_title() == "Query and Keys"
    save_png(fig, "query_and_keys")
    assert_inside_axes(fig)


def test_query_and_keys_without_context_and_with_book_shapes():
    found = labels(query_and_keys(Q, K).axes[0])  # [1, 1, 2] and [1, 3, 2] as they come
    assert len(found) == 4 and "Context Vector" not in found


def test_query_and_keys_takes_any_number_of_keys(save_png):
    keys = np.array([[0.65, 0.2], [0.85, -0.4], [-0.95, -0.75], [-0.3, 0.9], [0.1, -1.3]])
    fig = query_and_keys([0.55, 0.95], keys, [0.5, -0.1])
    found = labels(fig.axes[0])
    assert sum("K_{" in s for s in found) == 5
    assert any("||K_{4}||=1.30" in s for s in found)
    save_png(fig, "query_and_keys_5")
    assert_inside_axes(fig)  # long keys and their labels are not cut off
    lim = fig.axes[0].get_xlim()[1]
    assert lim > 1.3


def test_query_and_keys_draws_into_a_given_axes():
    fig = Figure()
    ax1, ax2 = fig.subplots(1, 2)
    assert query_and_keys(Q, K, ax=ax2) is fig
    assert not ax1.texts and ax2.texts


@pytest.mark.parametrize(
    ("args", "exc", "name"),
    [
        (([1.0, 2.0, 3.0], K), ValueError, "q"),
        ((Q, torch.randn(3, 3)), ValueError, "ks"),
        ((Q, K, [1.0]), ValueError, "result"),
        ((Q, [[np.nan, 1.0]]), ValueError, "ks"),
        (("ab", K), TypeError, "q"),
    ],
)
def test_query_and_keys_needs_2d_vectors(args, exc, name):
    with pytest.raises(exc, match=rf"^{name} must"):
        query_and_keys(*args)


# -- alignment_matrix / figure9 ------------------------------------------------------


def test_figure9_is_the_books_alignment(save_png):
    for fig in (figure9(), alignment_matrix()):
        ax = fig.axes[0]
        assert tick_texts(ax, "x") == ["the", "European", "economic", "zone"]
        assert tick_texts(ax, "y") == ["la", "zone", "économique", "européenne"]
        assert all(t.get_rotation() == 90 for t in ax.get_xticklabels())
        assert ax.xaxis.get_ticks_position() == "top"
        book = np.array([[0.8, 0, 0, 0.2], [0, 0, 0, 1], [0, 0, 1, 0], [0, 0.8, 0, 0.2]])
        assert_cells(ax, book)
        colors = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_color() for t in ax.texts}
        assert colors[1, 3] == "black" and colors[0, 1] == "white"  # readable on white and black cells
    save_png(fig, "figure9")


def test_alignment_matrix_takes_any_weights_and_tokens(save_png):
    weights = torch.rand(3, 5)
    fig = alignment_matrix(weights, list("abcde"), ["x", "y", "z"])
    ax = fig.axes[0]
    assert_cells(ax, weights.numpy())
    assert tick_texts(ax, "x") == list("abcde") and tick_texts(ax, "y") == ["x", "y", "z"]
    save_png(fig, "alignment_matrix")
    ax = alignment_matrix(np.eye(2)).axes[0]
    assert tick_texts(ax, "x") == ["0", "1"]


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"weights": np.ones((2, 2, 2))}, ValueError, "weights"),
        ({"weights": "abc"}, TypeError, "weights"),
        ({"source_tokens": ["a", "b"]}, ValueError, "source_tokens"),
        ({"weights": np.ones((2, 3)), "target_tokens": ["a"]}, ValueError, "target_tokens"),
        ({"weights": np.ones((2, 3)), "source_tokens": "abc"}, TypeError, "source_tokens"),
    ],
)
def test_alignment_matrix_bad_input(kwargs, exc, name):
    with pytest.raises(exc, match=name):
        alignment_matrix(**kwargs)


# -- no global state -----------------------------------------------------------------


def test_attention_figures_touch_no_global_state(tmp_path):
    rc_before = {k: np.copy(v) if isinstance(v, np.ndarray) else v for k, v in matplotlib.rcParams.items()}
    figs_before = plt.get_fignums()
    calls = [
        lambda: plot_attention(SelfAttn(2), torch.randn(2, 2, 2), layer="mha"),
        lambda: query_and_keys(Q, K, [0.5, -0.1]),
        lambda: alignment_matrix(),
        lambda: figure9(),
    ]
    for k, call in enumerate(calls):
        fig = call()
        assert type(fig) is Figure
        fig.savefig(tmp_path / f"{k}.png")
    assert plt.get_fignums() == figs_before
    assert dict(matplotlib.rcParams.items()) == rc_before


def test_figures_are_not_built_with_pyplot():
    import attnlab.plotting.attention as module

    assert "pyplot" not in vars(module) and "plt" not in vars(module)
    assert re.search(r"\bplt\.|pyplot", open(module.__file__, encoding="utf-8").read()) is None
