"""The options that choose a positional-encoding table, shared by ``encode``, ``audit`` and ``plot``.

Torch-free, as every parser is (see :mod:`attnlab.cli`): the names come from
:mod:`attnlab.catalog`; :mod:`attnlab.cli._tables` builds the table when a verb runs.
"""

from __future__ import annotations

import argparse

from attnlab.catalog import DTYPES, LAYOUTS, RATES
from attnlab.cli._common import int_list, positive_float, positive_int, seed_int

__all__ = ["TABLE_ENCODINGS", "add_encoding_options", "add_table_options"]

#: what ``--encoding`` builds in ``encode`` and ``audit``.
TABLE_ENCODINGS = ("sinusoidal", "fixed-base", "learned", "lab-float32")


def add_table_options(p: argparse.ArgumentParser, *, d_model: int | None, max_len: int | None) -> None:
    """The options that choose a sinusoidal table."""
    p.add_argument("--d-model", type=positive_int, default=d_model, metavar="D",
                   help=f"model dimension (default: {d_model if d_model else 'per figure'})")
    p.add_argument("--max-len", type=positive_int, default=max_len, metavar="L",
                   help=f"number of positions (default: {max_len if max_len else 'per figure'})")
    p.add_argument("--layout", choices=LAYOUTS, default="interleaved",
                   help="column layout: interleaved (the paper, the labs), concat ([sin | cos]), "
                        "t2t (tensor2tensor/fairseq/Whisper)")
    p.add_argument("--rates", choices=RATES, default=None,
                   help="angle rates: vaswani (base^(-2i/D)) or linspace (the TensorFlow notebook, t2t)")
    p.add_argument("--base", type=positive_float, default=10000.0, help="wavelength scale (default 10000)")


def add_encoding_options(p: argparse.ArgumentParser) -> None:
    """Which encoding to build, and in what dtype (encode and audit)."""
    add_table_options(p, d_model=8, max_len=10)
    p.add_argument("--encoding", choices=TABLE_ENCODINGS, default="sinusoidal",
                   help="sinusoidal (with --layout/--rates), fixed-base (with --bases), learned "
                        "(an untrained N(0, 0.02) table), lab-float32 (the labs' float32 formula)")
    p.add_argument("--bases", type=int_list, default=(4, 5, 7), help="fixed-base bases (default 4,5,7)")
    p.add_argument("--seed", type=seed_int, default=0, help="random seed of the learned table")
    p.add_argument("--dtype", choices=DTYPES, default="float32")
