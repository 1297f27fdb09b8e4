"""attnlab: attention and positional encoding, exact, fast and explained.

Subpackages (imports run one way: encodings -> attention -> models; plotting is a leaf):

* :mod:`attnlab.encodings`: sinusoidal (every layout), fixed-base and learned encodings.
* :mod:`attnlab.analysis`: the audit of an encoding's properties, similarity views.
* :mod:`attnlab.plotting`: every figure, as functions returning matplotlib Figures.

The command line is ``attnlab`` (or ``python -m attnlab``); see ``attnlab --help``.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("attnlab")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["__version__"]
