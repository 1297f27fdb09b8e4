"""Nothing fetched to view the site: the notebooks' math as MathML, no script from a CDN.

Two parts, one concern:

* ``math_to_mathml(notebook)``, called by docs/build.py on each executed notebook: the LaTeX in
  its Markdown cells (``$...$``, ``$$...$$``) becomes MathML (latex2mathml), which browsers
  draw natively, so no MathJax has to be loaded. Code spans and fenced code are left alone.
* ``on_post_page``, an MkDocs hook: nbconvert's page template always carries a MathJax loader
  and a Mermaid loader that imports from cdnjs; both are removed. Then every page is checked:
  a ``src``, a stylesheet ``href``, an ``@import`` or a ``url()`` that names an http(s) address
  stops the build.
"""

from __future__ import annotations

import re
from typing import Any

from mkdocs.exceptions import PluginError

# -- the notebooks' math -------------------------------------------------------------------

# Code (fenced blocks, then inline spans) is cut out first, so a "$" inside it is never math.
CODE = re.compile(r"(```.*?```|~~~.*?~~~|`[^`\n]*`)", re.DOTALL)
DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.DOTALL)
INLINE = re.compile(r"(?<![\\$])\$(?!\s)([^$\n]+?)(?<!\s)\$(?!\d)")


def _mathml(latex: str, display: str) -> str:
    from latex2mathml.converter import convert  # the build's dependency only

    # Inside \text{...} LaTeX escapes an underscore as "\_"; latex2mathml would keep the backslash.
    latex = re.sub(r"\\text\{([^}]*)\}", lambda m: r"\text{" + m.group(1).replace(r"\_", "_") + "}", latex)
    return convert(latex.strip(), display=display).replace(' xmlns="http://www.w3.org/1998/Math/MathML"', "")


def markdown_math(text: str) -> str:
    """``text`` (Markdown) with each ``$$...$$`` and ``$...$`` outside code replaced by MathML."""
    parts = CODE.split(text)
    for i in range(0, len(parts), 2):  # even parts are outside code
        part = DISPLAY.sub(lambda m: _mathml(m.group(1), "block"), parts[i])
        parts[i] = INLINE.sub(lambda m: _mathml(m.group(1), "inline"), part)
    return "".join(parts)


def math_to_mathml(notebook: Any) -> int:
    """Rewrite every Markdown cell of ``notebook`` (an nbformat node) in place; the cells changed."""
    changed = 0
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            new = markdown_math(cell.source)
            changed += new != cell.source
            cell.source = new
    return changed


# -- the built pages -----------------------------------------------------------------------

MATHJAX = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.DOTALL)
CDN_MODULE = re.compile(r"<script type=\"module\">(?:(?!</script>).)*?https?://(?:(?!</script>).)*</script>", re.DOTALL)
EXTERNAL = re.compile(
    r"""<(?:script|img|iframe|audio|video|source|embed)\b[^>]*\ssrc\s*=\s*["']?\s*(?:https?:)?//"""
    r"""|<link\b[^>]*\shref\s*=\s*["']?\s*(?:https?:)?//"""
    r"""|@import\s+(?:url\()?\s*["']?\s*(?:https?:)?//"""
    r"""|url\(\s*["']?\s*(?:https?:)?//""",
    re.IGNORECASE,
)


def external_resources(html: str) -> list[str]:
    """Each place in ``html`` that would make a browser fetch from another host."""
    return [html[m.start():m.end() + 60] for m in EXTERNAL.finditer(html)]


def on_post_page(output: str, page: Any, config: Any) -> str:
    """Strip the notebook template's loaders; refuse a page that still loads from the network."""
    output = MATHJAX.sub("", output)
    output = CDN_MODULE.sub("", output)
    found = external_resources(output)
    if found:
        raise PluginError(f"{page.file.src_uri} loads from the network: {found[0]!r}")
    return output
