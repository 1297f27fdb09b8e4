"""An MkDocs hook: a notebook page's table of contents links to its headings' real ids.

mkdocs-jupyter builds a notebook's table of contents with Python-Markdown, which drops inline
code from a heading's anchor ("The `PositionalEncoding` module" -> ``#the-module``), while the
page itself is rendered by nbconvert, which keeps it (``#the-positionalencoding-module``): the
link checker found those entries leading nowhere. Both list the same headings in the same order,
so each entry takes the id of its heading; a page whose two lists differ stops the build.
"""

from __future__ import annotations

import re
from typing import Any

from mkdocs.exceptions import PluginError

HEADING = re.compile(r"<h([1-6])\b[^>]*\bid=\"([^\"]+)\"")


def _entries(items: Any) -> list[Any]:
    flat = []
    for item in items:
        flat += [item, *_entries(item.children)]
    return flat


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    entries = _entries(page.toc)
    headings = [(int(level), anchor) for level, anchor in HEADING.findall(html)]
    if entries and min(e.level for e in entries) > 1:  # ignore_h1_titles: the title is not an entry
        headings = [h for h in headings if h[0] > 1]
    if [e.level for e in entries] != [level for level, _ in headings]:
        raise PluginError(f"{page.file.src_uri}: its table of contents does not list its headings in order")
    for entry, (_, anchor) in zip(entries, headings, strict=True):
        entry.id = anchor
    return html
