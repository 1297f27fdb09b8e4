"""Under ``torchrun``: only the verbs that train data-parallel run; the others are refused once, on rank 0.

``torchrun --nproc_per_node N -m attnlab VERB ...`` starts N copies of the command.
``attnlab train`` is written for that (its ranks train one model together, see
:mod:`attnlab.training.distributed`); any other verb would run N times over: N
comparisons into one folder (one refused by its lock, the other killed by torchrun
when the first fails, a half-started folder left behind), N copies of a figure or
a table. So every other verb is refused before it does anything: rank 0 says why
in one line and exits 2; the other ranks exit 0 without a word. torchrun then
reports the launch as failed, naming rank 0 alone as its cause (with rank 0's one
line above its report), rather than a failure per rank.

Nothing here imports torch: the check runs before a verb imports what it needs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

__all__ = ["PARALLEL_VERBS", "refused_under_torchrun"]

#: the verbs whose ranks cooperate under torchrun (data-parallel training)
PARALLEL_VERBS = ("train",)


def _whole_number(environ: Mapping[str, str], name: str) -> int | None:
    try:
        return int(environ.get(name, "").strip())
    except ValueError:
        return None


def refused_under_torchrun(command: str, *, environ: Mapping[str, str] | None = None) -> int | None:
    """The exit status of ``command`` if it runs as one of several torchrun ranks and does not train data-parallel.

    The ranks are read from the variables torchrun sets: ``WORLD_SIZE`` above 1 is a
    launch of several processes; ``RANK`` says which one this is. Rank 0 (or a process
    without a readable ``RANK``) prints the refusal on stderr and gets 2; the other
    ranks get 0 and print nothing. A lone process (no ``WORLD_SIZE``, or 1) and the
    verbs of :data:`PARALLEL_VERBS` get None: go on.

    Args:
        command: the verb (``compare``).
        environ: the environment to read; None reads ``os.environ``.
    """
    env = os.environ if environ is None else environ
    world_size = _whole_number(env, "WORLD_SIZE")
    if command in PARALLEL_VERBS or world_size is None or world_size <= 1:
        return None
    if _whole_number(env, "RANK") not in (0, None):
        return 0  # rank 0 says why, once
    print(f"attnlab {command}: error: started as {world_size} processes (torchrun's WORLD_SIZE); only attnlab "
          f"{' and '.join(PARALLEL_VERBS)} trains data-parallel: run attnlab {command} as one process, without "
          "torchrun" + (" (--jobs N trains its models in N worker processes)" if command == "compare" else ""),
          file=sys.stderr, flush=True)
    return 2
