"""The labs' attention modules, kept apart from the functional core: their conventions, attnlab's kernels.

* :mod:`.single_head`: ``Attention``, the attention lab's single head (``init_keys``,
  ``attn(query, mask)``, ``alphas``);
* :mod:`.heads`: ``LabMultiHeadAttention``, the labs' multi-head module (every head
  ``d_model`` wide, ``init_keys``, ``mha(query, mask)``, ``alphas``), and ``keeping_alphas``;
* :mod:`.checkpoint`: the labs' per-head checkpoint layout, fused into attnlab's packed
  projection on load (``fuse_lab_heads``).

The modules are importable from :mod:`attnlab.attention`, as the labs import them.
"""
