"""Fixtures for the figure tests: write a figure to a PNG and check the file.

Nothing global is set here: the backend comes from MPLBACKEND=Agg (the Makefile),
and the figures never go through pyplot.
"""

import pytest

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def save_png(tmp_path):
    """``save_png(fig, name)`` writes ``tmp_path/name.png`` and checks it is a real PNG."""

    def save(fig, name):
        path = tmp_path / f"{name}.png"
        fig.savefig(path)
        data = path.read_bytes()
        assert data.startswith(PNG_SIGNATURE), f"{name}.png is not a PNG"
        # A blank canvas of this size compresses to ~1-2 kB; a drawn figure is far larger.
        assert len(data) > 5000, f"{name}.png is only {len(data)} bytes"
        return path

    return save
