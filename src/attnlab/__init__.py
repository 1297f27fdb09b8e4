"""attnlab: attention and positional encoding, exact, fast and explained.

Subpackages, one concern each (imports run one way: encodings -> attention -> models -> training ->
labs -> cli; data never imports models; plotting takes data and returns figures):

* :mod:`attnlab.encodings`: positional tables (sinusoidal in every layout, fixed-base, learned, 2-D/3-D)
  and the schemes that act inside attention, one file each, on one protocol (``scheme.py``); the
  registry of names (``register``, entry points, ``module:Class``).
* :mod:`attnlab.attention`: the functional core (``attend``), masks, scores, caches, recording,
  ``MultiHeadAttention``; ``backends/``: dense, chunked and FlexAttention, and the rule that chooses;
  ``lab/``: the labs' own attention modules and checkpoint layout.
* :mod:`attnlab.models`: the Transformers (encoder-decoder, decoder-only, encoder-only) taking
  ``position=``; many models of one shape as one computation (``grouped.py``); ``labs/``: the labs'
  GRU and self-attention models.
* :mod:`attnlab.data`: the noisy squares, the length lab's task framework, and the benchmark families.
* :mod:`attnlab.training`: one loop (``fit``) with callbacks, checkpoints, the thread rule, grouped
  steps; ``book/``: the book's ``Trainer`` / ``StepByStep`` facade.
* :mod:`attnlab.analysis`: audits of tables and schemes, similarity views.
* :mod:`attnlab.plotting`: every figure, from data, as matplotlib Figures.
* :mod:`attnlab.compat`: the labs' and d2l's own signatures, for code copied from them.
* :mod:`attnlab.labs`: the squares lab and the length-generalisation lab (settings, costs, training,
  sweeps, presets, claims, reports), and the run-folder contract.
* :mod:`attnlab.cli`: the ``attnlab`` command (or ``python -m attnlab``), one module per verb; see
  ``attnlab --help``.

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
