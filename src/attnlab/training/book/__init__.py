"""The book's ``StepByStep`` trainer (*Deep Learning with PyTorch Step-by-Step*), as a facade over the one loop.

* :mod:`.trainer`: :class:`~attnlab.training.Trainer` (and ``StepByStep``, the same class under
  the book's name): the book's interface, its bugs fixed, its epochs run by
  :func:`attnlab.training.fit`;
* :mod:`.state`: what its checkpoint holds, and putting it back exactly;
* :mod:`.hooks`: the recorders its forward and gradient hooks attach.

Both names are importable from :mod:`attnlab.training`.
"""
