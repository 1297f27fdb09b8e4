"""The labs' and d2l's own signatures, for code copied from them.

Each module here keeps a source's names, argument order, parameter names and
quirks (so its code runs unchanged and its checkpoints load), built on
attnlab's own core. :mod:`attnlab.compat.d2l` is the d2l chapter's
``PositionalEncoding``, ``MultiHeadAttention``, ``DotProductAttention`` and
``masked_softmax``: ``import attnlab.compat.d2l as d2l``. :mod:`attnlab.compat.walkthrough`
is the PE walkthrough's ``PositionalEncoding(encoding_size, dropout_prob, max_len)``.
"""
