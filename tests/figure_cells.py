"""Reading a drawn attention grid back: the texts on its cells and ticks, its visible axes (figure tests)."""

import numpy as np


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
