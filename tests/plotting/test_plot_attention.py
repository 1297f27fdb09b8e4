"""plot_attention_weights / query_and_keys / alignment_matrix: the attention and positional-encoding labs' figures.

The book's ``plot_attention(model, inputs, ...)``, which runs a model, is tested in
tests/compat/test_chapter9.py; here the figures take data.
"""

import re

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attnlab.attention.scoring import alphas_from_scores, context_vector, dot_scores
from attnlab.plotting import alignment_matrix, figure9, plot_attention_weights, query_and_keys

from figure_cells import assert_cells, cell_texts, tick_texts, visible


def weights_of(*shape):
    """Softmax weights of the given shape (rows sum to 1), drawn from torch's seeded stream."""
    return torch.randn(*shape).softmax(-1)


# -- plot_attention_weights ----------------------------------------------------------


def test_several_heads_a_row_per_sequence_and_a_column_per_head():
    weights = weights_of(2, 3, 2, 2)  # [B=2, H=3, T=2, S=2]
    points = ["Clockwise", "Counter-Clockwise"]
    fig = plot_attention_weights(weights, points, ["Point #1", "Point #2"], ["Point #3", "Point #4"],
                                 decoder=False, self_attn=True)
    assert type(fig) is Figure
    assert len(fig.axes) == len(visible(fig)) == 6
    for i in range(2):
        for h in range(3):
            ax = fig.axes[i * 3 + h]
            assert_cells(ax, weights[i, h].double().numpy())
            assert tick_texts(ax, "y") == (["Point #1", "Point #2"] if h == 0 else ["", ""])
            assert ax.get_title() == (f"Attention Head #{h + 1}" if i == 0 else "")
        assert fig.axes[i * 3].get_ylabel() == points[i]
    assert tuple(fig.get_size_inches()) == (9.0, 6.0)


def test_three_axes_weights_are_one_head():
    weights = weights_of(7, 3, 4)  # [B, T, S]
    fig = plot_attention_weights(weights, n_cols=5)
    assert len(fig.axes) == 10 and len(visible(fig)) == 7
    same = plot_attention_weights(weights[:, None], n_cols=5)  # [B, 1, T, S]
    assert [cell_texts(ax) for ax in fig.axes] == [cell_texts(ax) for ax in same.axes]
    for i, ax in enumerate(visible(fig)):
        assert ax.get_title() == f"Point #{i}"
        assert tick_texts(ax, "x") == ["Input #0", "Input #1", "Input #2", "Input #3"]
        assert_cells(ax, weights[i].double().numpy())


def test_arrays_lists_and_half_precision_tensors_draw_alike():
    weights = weights_of(1, 2, 2, 3)
    reference = [cell_texts(ax) for ax in plot_attention_weights(weights).axes]
    for given in (weights.numpy(), weights.tolist()):
        assert [cell_texts(ax) for ax in plot_attention_weights(given).axes] == reference
    # bfloat16 has no numpy dtype: drawn as its float64 values.
    half = weights.bfloat16()
    assert [cell_texts(ax) for ax in plot_attention_weights(half).axes] == \
        [cell_texts(ax) for ax in plot_attention_weights(half.double().numpy()).axes]


def test_decoder_self_attention_labels_start_from_the_last_source():
    ax = plot_attention_weights(weights_of(1, 2, 2), None, ["Point #1", "Point #2"], ["Point #3", "Point #4"],
                                decoder=True, self_attn=True).axes[0]
    assert tick_texts(ax, "x") == ["Point #2", "Point #3"]
    assert tick_texts(ax, "y") == ["Point #3", "Point #4"]


@pytest.mark.parametrize(
    ("weights", "kwargs", "exc", "pattern"),
    [
        (np.ones((2, 3)), {}, ValueError, r"weights must be .*got shape \[2, 3\]"),
        (np.ones((0, 1, 2, 2)), {}, ValueError, "weights must be a non-empty"),
        ("abc", {}, TypeError, "weights"),
        (np.ones((2, 1, 3, 3)), {"point_labels": ["a"]}, ValueError, "point_labels has 1 entries"),
        (np.ones((2, 1, 3, 3)), {"source_labels": "abc"}, TypeError, "source_labels"),
        (np.ones((2, 1, 3, 3)), {"n_cols": 0}, ValueError, "n_cols"),
    ],
)
def test_plot_attention_weights_bad_input_names_it(weights, kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        plot_attention_weights(weights, **kwargs)


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
        lambda: plot_attention_weights(weights_of(2, 2, 2, 2)),
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


@pytest.mark.parametrize("name", ["attention", "attention_maps"])
def test_figures_are_not_built_with_pyplot(name):
    import importlib

    module = importlib.import_module(f"attnlab.plotting.{name}")
    assert "pyplot" not in vars(module) and "plt" not in vars(module)
    assert re.search(r"\bplt\.|pyplot", open(module.__file__, encoding="utf-8").read()) is None
