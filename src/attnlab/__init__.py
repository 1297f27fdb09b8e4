"""attnlab: attention and positional encoding, exact, fast and explained.

Subpackages (imports run one way: encodings -> attention -> models; plotting is a leaf):

* :mod:`attnlab.encodings`: sinusoidal (every layout), fixed-base and learned encodings.
* :mod:`attnlab.analysis`: the audit of an encoding's properties, similarity views.
* :mod:`attnlab.plotting`: every figure, as functions returning matplotlib Figures.

The command line is ``attnlab`` (or ``python -m attnlab``); see ``attnlab --help``.

Importing :mod:`attnlab` imports nothing else: every ``import attnlab.X`` runs this file
first, and the command line's ``--help`` must stay quick (see :mod:`attnlab.catalog`).
"""

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """``attnlab.__version__``, read from the installed package's metadata on first use.

    Read lazily (PEP 562) because :mod:`importlib.metadata` takes about 30 ms to import,
    half the time ``attnlab --help`` takes.

    Raises:
        AttributeError: for any other name, as a module without it would.
    """
    if name != "__version__":
        raise AttributeError(f"module 'attnlab' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("attnlab")
    except PackageNotFoundError:  # running from a source tree that was never installed
        found = "0.0.0"
    globals()["__version__"] = found  # looked up once: the next read finds it in the module
    return found
