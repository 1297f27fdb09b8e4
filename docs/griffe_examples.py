"""A griffe extension for the API reference: attnlab's docstrings read as they are meant to.

attnlab's docstrings head their doctests ``Example:`` (singular), which griffe's Google parser
does not know as a section, so the ``>>>`` lines would be rendered as running text (and their
printed lists, ``[0.01, 0.505, 1.0]``, taken for cross-references). Renamed to ``Examples:``
before parsing, they render as code, as written. Some docstrings also name other objects
with Sphinx roles (``:class:`PositionScheme```); the role is dropped, the name kept as code.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)
ROLE = re.compile(r":(?:class|mod|func|meth|attr|data|obj|exc):`~?")


class ExampleSections(Extension):
    """Rename every docstring's ``Example:`` section heading to ``Examples:``; drop Sphinx roles."""

    def on_object(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub("`", EXAMPLE.sub(r"\1Examples:", obj.docstring.value))
