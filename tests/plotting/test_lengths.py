"""plot_length_generalisation: a line and a min..max band per encoding, the train length and chance marked."""

import matplotlib
import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

from attnlab.plotting._common import new_figure
from attnlab.plotting.lengths import plot_length_generalisation

LENGTHS = (8, 12, 16, 24)


def make_results(encodings=("sinusoidal", "learned", "rotary"), seeds=(0, 1, 2)):
    rng = np.random.default_rng(0)
    out = []
    for k, encoding in enumerate(encodings):
        for seed in seeds:
            for length in LENGTHS:
                acc = float(np.clip(np.exp(-(k + 1) * 0.1 * (length - 8)) - 0.05 * seed * rng.random(), 0, 1))
                out.append({"encoding": encoding, "seed": seed, "length": length,
                            "token_accuracy": acc, "sequence_accuracy": acc**2})
    return out


def data_lines(ax):
    """The labelled lines that are not the train-length or chance markers."""
    return [line for line in ax.get_lines() if not line.get_label().startswith(("_", "train length", "chance"))]


def test_one_line_and_one_band_per_encoding(save_png):
    results = make_results()
    fig = plot_length_generalisation(results, train_len=8)
    assert type(fig) is Figure
    ax = fig.axes[0]
    lines = data_lines(ax)
    assert [line.get_label() for line in lines] == ["sinusoidal (3 seeds)", "learned (3 seeds)", "rotary (3 seeds)"]
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 3
    for line, band in zip(lines, bands, strict=True):
        assert np.allclose(band.get_facecolor()[0][:3], matplotlib.colors.to_rgb(line.get_color()))
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "train length (8)" in legend and "min..max over seeds" in legend
    assert ax.get_title() == "Length generalisation: sequence accuracy"
    assert ax.get_xlabel() == "test length" and ax.get_ylabel() == "sequence accuracy"
    save_png(fig, "length_generalisation")


def test_line_is_the_mean_and_band_spans_min_to_max():
    results = [{"encoding": "alibi", "seed": s, "length": length, "sequence_accuracy": v}
               for s, vals in enumerate([(1.0, 0.2), (0.8, 0.6), (0.9, 0.1)])
               for length, v in zip((4, 8), vals, strict=True)]
    ax = plot_length_generalisation(results).axes[0]
    (line,) = data_lines(ax)
    assert line.get_xdata().tolist() == [4, 8]
    assert np.allclose(line.get_ydata(), [0.9, 0.3])
    (band,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    ys = band.get_paths()[0].vertices[:, 1]
    assert np.isclose(ys.min(), 0.1) and np.isclose(ys.max(), 1.0)


def test_train_length_line():
    ax = plot_length_generalisation(make_results(), train_len=10).axes[0]
    (marker,) = [line for line in ax.get_lines() if line.get_label() == "train length (10)"]
    assert marker.get_linestyle() == "--" and list(marker.get_xdata()) == [10, 10]
    assert 10 in ax.get_xticks()
    ax = plot_length_generalisation(make_results()).axes[0]
    assert not any(line.get_label().startswith("train length") for line in ax.get_lines())


def test_accuracy_axis_is_zero_to_one_and_other_metrics_start_at_zero():
    ax = plot_length_generalisation(make_results(), metric="token_accuracy").axes[0]
    low, high = ax.get_ylim()
    assert -0.05 < low <= 0.0 and 1.0 <= high < 1.05
    assert ax.get_ylabel() == "token accuracy"
    results = [{"encoding": "sinusoidal", "seed": 0, "length": n, "mean_squared_error": 0.01 * n} for n in (4, 6)]
    ax = plot_length_generalisation(results, metric="mean_squared_error").axes[0]
    assert ax.get_ylim()[0] == 0.0 and ax.get_ylabel() == "mean squared error"


def test_single_seed_and_missing_lengths():
    results = make_results(seeds=(5,))[:-1]  # the last encoding lacks its longest length
    ax = plot_length_generalisation(results).axes[0]
    lines = data_lines(ax)
    assert [line.get_label() for line in lines] == ["sinusoidal", "learned", "rotary"]
    assert len(lines[-1].get_xdata()) == len(LENGTHS) - 1


def test_draws_into_given_axes(save_png):
    fig = new_figure((12.0, 4.0))
    left, right = fig.subplots(1, 2)
    out = plot_length_generalisation(make_results(), train_len=8, ax=right, metric="token_accuracy")
    assert out is fig and len(data_lines(right)) == 3 and not left.get_lines()
    save_png(fig, "length_generalisation_in_axes")


def test_chance_line():
    ax = plot_length_generalisation(make_results(), metric="token_accuracy", train_len=8, chance=0.1).axes[0]
    (line,) = [line for line in ax.get_lines() if line.get_label() == "chance (10.0%)"]
    assert line.get_linestyle() == ":" and list(line.get_ydata()) == [0.1, 0.1]
    assert "chance (10.0%)" in [t.get_text() for t in ax.get_legend().get_texts()]
    # a whole sequence guessed: 10**-8, essentially nothing
    ax = plot_length_generalisation(make_results(), chance=1e-8).axes[0]
    assert [line.get_label() for line in ax.get_lines() if line.get_label().startswith("chance")] == ["chance (~0%)"]
    results = [{"encoding": "t5", "seed": 0, "length": n, "mean_squared_error": 0.1 * n} for n in (4, 6)]
    ax = plot_length_generalisation(results, metric="mean_squared_error", chance=0.25).axes[0]
    assert any(line.get_label() == "chance (0.25)" for line in ax.get_lines())
    ax = plot_length_generalisation(make_results()).axes[0]
    assert not any(line.get_label().startswith("chance") for line in ax.get_lines())


def test_a_randomized_scheme_is_dashed_in_its_baseline_s_colour(save_png):
    results = make_results(encodings=("random-rotary", "alibi", "rotary", "random-t5"), seeds=(0,))
    ax = plot_length_generalisation(results, train_len=8).axes[0]
    lines = {line.get_label(): line for line in data_lines(ax)}
    # random-X follows X (legend order); without its baseline it keeps its own colour, dashed
    assert list(lines) == ["alibi", "rotary", "random-rotary", "random-t5"]
    assert lines["random-rotary"].get_color() == lines["rotary"].get_color()
    assert lines["random-rotary"].get_linestyle() == "--" and lines["rotary"].get_linestyle() == "-"
    assert lines["random-t5"].get_linestyle() == "--"
    colours = [matplotlib.colors.to_hex(lines[name].get_color()) for name in ("alibi", "rotary", "random-t5")]
    assert len(set(colours)) == 3  # the shared colour did not use up one of the cycle's
    save_png(ax.figure, "length_generalisation_randomized")


def test_many_encodings_put_the_legend_beside_the_axes(save_png):
    bases = ("none", "sinusoidal", "learned", "relative", "t5", "rotary", "alibi", "fire", "xpos", "cope", "kerple")
    names = bases + tuple(f"random-{b}" for b in ("sinusoidal", "learned", "relative", "rotary", "alibi", "t5", "fire"))
    fig = plot_length_generalisation(make_results(encodings=names, seeds=(0, 1)), train_len=8, chance=0.1)
    ax = fig.axes[0]
    renderer = FigureCanvasAgg(fig).get_renderer()  # laid out as when saved
    fig.draw(renderer)
    legend = ax.get_legend()
    assert legend.get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1  # it hides no line
    assert len(legend.get_texts()) == 18 + 3
    assert len({round(t.get_window_extent(renderer).x0) for t in legend.get_texts()}) == 2  # in two columns
    lines = {line.get_label().split()[0]: line for line in data_lines(ax)}
    # the 11th baseline repeats the first's colour (10 in the cycle) with another marker
    assert lines["kerple"].get_color() == lines["none"].get_color()
    assert lines["kerple"].get_marker() != lines["none"].get_marker()
    save_png(fig, "length_generalisation_18_encodings")


@pytest.mark.parametrize(("results", "kwargs", "error", "match"), [
    ([], {}, ValueError, "results is empty"),
    ({"encoding": "x"}, {}, TypeError, "results must be a list of dicts.*got dict"),
    ([("x", 0, 4, 0.5)], {}, TypeError, r"results\[0\] must be a dict, got tuple"),
    ([{"seed": 0, "length": 4, "sequence_accuracy": 0.5}], {}, ValueError, r"results\[0\] has no key 'encoding'"),
    ([{"encoding": "x", "length": 4, "sequence_accuracy": 0.5}], {}, ValueError, r"results\[0\] has no key 'seed'"),
    ([{"encoding": "x", "seed": 0, "sequence_accuracy": 0.5}], {}, ValueError, r"results\[0\] has no key 'length'"),
    ([{"encoding": "x", "seed": 0, "length": 4, "token_accuracy": 0.5}], {}, ValueError,
     r"results\[0\] has no key 'sequence_accuracy'"),
    ([{"encoding": "x", "seed": 0, "length": 4, "sequence_accuracy": 0.5}], {"metric": "bleu"}, ValueError,
     r"results\[0\] has no key 'bleu'"),
    ([{"encoding": 3, "seed": 0, "length": 4, "sequence_accuracy": 0.5}], {}, TypeError,
     r"results\[0\]\['encoding'\] must be a str, got 3"),
    ([{"encoding": "x", "seed": 0.5, "length": 4, "sequence_accuracy": 0.5}], {}, TypeError,
     r"results\[0\]\['seed'\] must be an integer, got 0.5"),
    ([{"encoding": "x", "seed": 0, "length": 0, "sequence_accuracy": 0.5}], {}, ValueError,
     r"results\[0\]\['length'\] must be positive, got 0"),
    ([{"encoding": "x", "seed": 0, "length": 4, "sequence_accuracy": 1.5}], {}, ValueError,
     r"results\[0\]\['sequence_accuracy'\] is an accuracy and must be in \[0, 1\], got 1.5"),
    ([{"encoding": "x", "seed": 0, "length": 4, "sequence_accuracy": float("nan")}], {}, ValueError,
     r"results\[0\]\['sequence_accuracy'\] must be a finite number, got nan"),
    ([{"encoding": "x", "seed": 0, "length": 4, "sequence_accuracy": "0.5"}], {}, ValueError,
     r"must be a finite number, got '0.5'"),
    ([{"encoding": "x", "seed": 0, "length": 4, "sequence_accuracy": 0.5}] * 2, {}, ValueError,
     r"results\[1\] repeats encoding='x', seed=0, length=4"),
    ([{"encoding": "x", "seed": 0, "length": 4, "sequence_accuracy": 0.5}], {"train_len": 0}, ValueError,
     "train_len must be positive, got 0"),
    ([{"encoding": "x", "seed": 0, "length": 4, "sequence_accuracy": 0.5}], {"metric": None}, TypeError,
     "metric must be a str .*got None"),
    ([{"encoding": "x", "seed": 0, "length": 4, "sequence_accuracy": 0.5}], {"ax": "left"}, TypeError,
     "ax must be a matplotlib Axes or None, got str"),
    ([{"encoding": "x", "seed": 0, "length": 4, "sequence_accuracy": 0.5}], {"chance": 1.5}, ValueError,
     r"chance is an accuracy and must be in \[0, 1\], got 1.5"),
    ([{"encoding": "x", "seed": 0, "length": 4, "sequence_accuracy": 0.5}], {"chance": float("nan")}, ValueError,
     "chance must be finite, got nan"),
    ([{"encoding": "x", "seed": 0, "length": 4, "sequence_accuracy": 0.5}], {"chance": "10%"}, TypeError,
     "chance must be a number, got '10%'"),
])
def test_bad_inputs(results, kwargs, error, match):
    with pytest.raises(error, match=match):
        plot_length_generalisation(results, **kwargs)
