"""sequence_pred / plot_losses: the training figures of the positional-encoding lab and the attention lab."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from torch import nn

from attnlab.data import make_loaders
from attnlab.models import DecoderPe, EncoderDecoderSelfAttn, EncoderPe
from attnlab.plotting import plot_losses, sequence_pred


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


def visible(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


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


# -- plot_losses ---------------------------------------------------------------------


def lines_by_label(ax):
    return {ln.get_label(): ln for ln in ax.get_lines()}


def test_plot_losses_the_books_figure(save_png):
    losses = [0.5 / (k + 1) for k in range(20)]
    val = [0.6 / (k + 1) for k in range(20)]
    fig = plot_losses(losses, val)
    assert type(fig) is Figure and tuple(fig.get_size_inches()) == (10.0, 4.0)
    (ax,) = fig.axes
    assert ax.get_yscale() == "log"
    assert ax.get_xlabel() == "Epochs" and ax.get_ylabel() == "Loss"
    lines = lines_by_label(ax)
    assert lines["Training Loss"].get_color() == "b" and lines["Validation Loss"].get_color() == "r"
    np.testing.assert_array_equal(lines["Training Loss"].get_xdata(), np.arange(1, 21))
    np.testing.assert_allclose(lines["Validation Loss"].get_ydata(), val)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["Training Loss", "Validation Loss"]
    save_png(fig, "plot_losses")


def test_plot_losses_skips_missing_validation_losses(save_png):
    losses = np.linspace(1.0, 0.1, 10)
    val = [None, 0.9, None, 0.7, float("nan"), 0.5, None, None, 0.2, None]
    ax = plot_losses(losses, val).axes[0]
    line = lines_by_label(ax)["Validation Loss"]
    np.testing.assert_array_equal(line.get_xdata(), [2, 4, 6, 9])
    np.testing.assert_allclose(line.get_ydata(), [0.9, 0.7, 0.5, 0.2])
    save_png(ax.figure, "plot_losses_gaps")


@pytest.mark.parametrize("val", [None, [None, None, None]])
def test_plot_losses_without_validation(val):
    ax = plot_losses(torch.tensor([0.3, 0.2, 0.1]), val).axes[0]
    assert list(lines_by_label(ax)) == ["Training Loss"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["Training Loss"]


def test_plot_losses_linear_scale_and_given_axes():
    fig = Figure()
    ax = fig.subplots()
    assert plot_losses([0.0, 1.0, -0.5], ax=ax, log=False) is fig  # zero and negative are fine unscaled
    assert ax.get_yscale() == "linear"


@pytest.mark.parametrize(("args", "kwargs", "error", "match"), [
    (([],), {}, ValueError, "losses is empty"),
    (([0.1, 0.2], [0.1]), {}, ValueError, "val_losses"),
    (([0.1, 0.0],), {}, ValueError, "losses has a loss <= 0"),
    (([0.1, 0.2], [0.1, -1.0]), {}, ValueError, "val_losses has a loss <= 0"),
    (("losses",), {}, TypeError, "losses"),
    ((0.5,), {}, TypeError, "losses"),
    (([0.1, "x"],), {}, TypeError, "losses"),
    (([[0.1, 0.2]],), {}, ValueError, "losses"),
    (([0.1], ["x"]), {}, TypeError, "val_losses"),
    (([0.1],), {"log": "yes"}, TypeError, "log"),
    (([0.1],), {"ax": "axes"}, TypeError, "ax"),
])
def test_plot_losses_bad_arguments(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        plot_losses(*args, **kwargs)

