"""An MkDocs hook: the site's topic pages take their facts from README.md, section by section.

The README is the source of truth for what attnlab does and every number it has measured, and
it keeps changing. A page therefore writes its own introduction and then names the README
sections it shows, on a line of its own::

    @include README.md "### Attention"                      the section, its subsections included
    @include README.md "## The library" intro               up to its first subsection
    @include README.md "### Positional ..." until="`attnlab compare` asks"
    @include README.md "### Positional ..." from="`attnlab compare` asks"
    @include BENCHMARKS.md                                  the whole file

``body`` leaves out the section's own heading; ``level=N`` (default 2) is the level its heading
takes on the page, and its subsections move with it. A heading or marker that is not found stops
the build (an error, not a warning), so a README edit that renames a section cannot silently
empty a page. Links into the README (``(#anchor)``, ``(README.md#anchor)``, ``(BENCHMARKS.md)``) are
pointed at the page that now shows their target, and a link to a page of the site itself
(``(docs/pages/length-lab.md#protocols)``, which reads on GitHub too) at that page; MkDocs' strict
link validation catches any that are left.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from markdown.extensions.toc import slugify
from mkdocs.exceptions import PluginError

DIRECTIVE = re.compile(r"^@include\s+(.+)$", re.MULTILINE)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")

# Filled by on_files before any page is rendered: the page that shows each anchor, and each whole file.
_anchor_page: dict[str, str] = {}
_file_page: dict[str, str] = {}


@dataclass(frozen=True)
class Include:
    """One ``@include`` line: which file, which section, which part of it."""

    source: str
    heading: str | None = None
    intro: bool = False
    body: bool = False
    level: int = 2
    start: str | None = None  # from=
    until: str | None = None


def parse(arguments: str) -> Include:
    words = shlex.split(arguments)
    if not words:
        raise PluginError("@include needs a file name")
    source, heading, options = words[0], None, {}
    for word in words[1:]:
        if word in ("intro", "body"):
            options[word] = True
        elif word.startswith(("until=", "from=", "level=")):
            key, _, value = word.partition("=")
            options["start" if key == "from" else key] = int(value) if key == "level" else value
        elif heading is None and word.startswith("#"):
            heading = word
        else:
            raise PluginError(f"@include {arguments}: cannot read {word!r}")
    return Include(source=source, heading=heading, **options)


def headings(lines: list[str]) -> list[tuple[int, int, str]]:
    """``(line index, level, text)`` of every Markdown heading outside code fences."""
    found, fenced = [], False
    for i, line in enumerate(lines):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            found.append((i, len(m.group(1)), m.group(2)))
    return found


def section(include: Include, root: Path) -> str:
    """The Markdown an include stands for, headings moved to their level on the page."""
    path = root / include.source
    if not path.is_file():
        raise PluginError(f"@include: {path} does not exist")
    lines = path.read_text(encoding="utf-8").splitlines()
    marks = headings(lines)
    begin, end, level = 0, len(lines), 2  # a whole file: its sections (##) take the include's level
    if include.heading is not None:
        starts = [(i, lvl) for i, lvl, text in marks if "#" * lvl + " " + text == include.heading]
        if len(starts) != 1:
            raise PluginError(f"@include: {include.heading!r} is found {len(starts)} times in {include.source}")
        begin, level = starts[0]
        ends = [i for i, lvl, _ in marks if i > begin and (lvl <= level or include.intro)]
        end = ends[0] if ends else len(lines)
    part = lines[begin:end]
    if include.start is not None:
        part = part[_line_starting(part, include.start, include):]
    elif include.body or include.heading is None:
        part = part[1:] if include.heading is not None else part
    if include.until is not None:
        part = part[:_line_starting(part, include.until, include)]
    shift = include.level - level
    for i, lvl, text in headings(part):
        if include.heading is None and lvl == 1:
            part[i] = ""  # a whole file's own title: the page has its own
        else:
            part[i] = "#" * min(6, max(1, lvl + shift)) + " " + text
    return "\n".join(part).strip("\n")


def _line_starting(lines: list[str], text: str, include: Include) -> int:
    hits = [i for i, line in enumerate(lines) if line.startswith(text)]
    if not hits:
        raise PluginError(f"@include {include.source} {include.heading!r}: no line starts with {text!r}")
    return hits[0]


def _slug(text: str) -> str:
    return slugify(text.replace("`", ""), "-")


def on_files(files, config):  # noqa: ANN001, ANN201 (MkDocs' hook signature)
    """Before any page: which page shows each README anchor and each whole file."""
    root = Path(config["config_file_path"]).parent.parent
    _anchor_page.clear()
    _file_page.clear()
    for file in files.documentation_pages():
        if not file.src_uri.endswith(".md"):
            continue
        text = Path(file.abs_src_path).read_text(encoding="utf-8")
        for match in DIRECTIVE.finditer(text):
            include = parse(match.group(1))
            if include.heading is None:
                _file_page[include.source] = file.src_uri
            for _, _, heading in headings(section(include, root).splitlines()):
                _anchor_page.setdefault(_slug(heading), file.src_uri)
    return files


def on_page_markdown(markdown, page, config, files):  # noqa: ANN001, ANN201
    """Every ``@include`` line replaced by its section, its links pointed at the pages that show their targets."""
    root = Path(config["config_file_path"]).parent.parent
    here = page.file.src_uri

    def link(target: str) -> str:
        return posixpath.relpath(target, posixpath.dirname(here) or ".")

    def anchor(m: re.Match[str]) -> str:
        page_uri = _anchor_page.get(m.group(1))
        if page_uri is None:
            return m.group(0)
        return f"](#{m.group(1)})" if page_uri == here else f"]({link(page_uri)}#{m.group(1)})"

    def whole_file(m: re.Match[str]) -> str:
        page_uri = _file_page.get(m.group(1))
        return m.group(0) if page_uri is None else f"]({link(page_uri)}{m.group(2) or ''})"

    def site_page(m: re.Match[str]) -> str:
        return f"]({link(m.group(1))}{m.group(2) or ''})"

    def expand(m: re.Match[str]) -> str:
        text = section(parse(m.group(1)), root)
        text = re.sub(r"\]\((?:README\.md)?#([\w-]+)\)", anchor, text)
        text = re.sub(r"\]\(docs/pages/([\w/.-]+\.md)(#[\w-]+)?\)", site_page, text)
        return re.sub(r"\]\(([\w.-]+\.md)(#[\w-]+)?\)", whole_file, text)

    return DIRECTIVE.sub(expand, markdown)
