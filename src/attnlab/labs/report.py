"""The one HTML report writer: a self-contained ``report.html`` for any run folder.

Both labs describe their run as data (:class:`Report`: a title, headline
numbers, paragraphs, a preformatted table, figures, settings, a per-epoch table)
and this module lays it out: every text is escaped, every figure is embedded as
a base64 PNG so the page can be mailed or archived alone. It draws nothing and
runs nothing: the figures are files the lab has already written.

The one way in for markup is :class:`Html`: a fragment made by attnlab's own
renderers (e.g. :func:`attnlab.labs.squares.viewer.render_viewer`), which the
page takes as it is. A plain ``str`` anywhere in a :class:`Report` is text, and
escaped.
"""

from __future__ import annotations

import base64
import html
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab._io import atomic_write

__all__ = ["Html", "Report", "render", "write_report"]

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; } td, th { padding: .2em .8em; border-bottom: 1px solid #ddd; }
th { text-align: left; } figure { margin: 1.5em 0; } img { max-width: 100%; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; }
.metric { font-size: 1.4em; margin-right: 2em; } details { margin: 1em 0; }
"""


@dataclass(frozen=True)
class Html:
    """A fragment of HTML the report inserts unescaped: only for markup attnlab's own renderers made.

    It must be self-contained (inline style and script, no external URL) so the
    page stays one file that works offline.

    Raises:
        TypeError: if ``markup`` is not a str.
    """

    markup: str

    def __post_init__(self) -> None:
        if not isinstance(self.markup, str):
            raise TypeError(f"markup must be a str, got {type(self.markup).__name__}")


@dataclass
class Report:
    """What a report shows, top to bottom.

    Attributes:
        title: the page's title and heading.
        headline: the numbers that matter, ``{label: value}`` (floats shown to 4 decimals).
        paragraphs: plain-text paragraphs (escaped).
        preformatted: a plain-text table shown as is (e.g. :func:`attnlab.labs.lengths.config.format_table`), or None.
        figures: PNG files to embed, each captioned with its file name.
        sections: trusted :class:`Html` fragments (e.g. an interactive viewer), shown before the figures.
        settings: the run's settings, ``{name: value}``.
        environment: what ran it, ``{name: value}`` (:func:`attnlab.labs.run_folder.environment`).
        table_title, table_header, table_rows: a collapsible table (e.g. the losses per epoch).
    """

    title: str
    headline: dict[str, Any] = field(default_factory=dict)
    paragraphs: Sequence[str] = ()
    preformatted: str | None = None
    figures: Sequence[Path] = ()
    sections: Sequence[Html] = ()
    settings: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    table_title: str = ""
    table_header: Sequence[str] = ()
    table_rows: Sequence[Sequence[Any]] = ()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.5f}"
    return html.escape(str(value))


def _figure(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    name = html.escape(path.stem)
    return f'<figure><img alt="{name}" src="data:image/png;base64,{data}"><figcaption>{name}</figcaption></figure>'


def _section(section: Html) -> str:
    if not isinstance(section, Html):  # a plain string would be injected as markup: refuse it, not escape it
        raise TypeError(f"Report.sections takes Html fragments, got {type(section).__name__}")
    return section.markup


def render(report: Report) -> str:
    """The report as one HTML page (a string).

    Raises:
        TypeError: for a section that is not :class:`Html`.
    """
    esc = html.escape
    headline = "".join(
        f'<span class="metric">{esc(label)} <b>{f"{value:.4f}" if isinstance(value, float) else esc(str(value))}'
        f"</b></span>" for label, value in report.headline.items())
    parts = [f"<h1>{esc(report.title)}</h1>"]
    if headline:
        parts.append(f"<p>{headline}</p>")
    parts += [f"<p>{esc(text)}</p>" for text in report.paragraphs]
    if report.preformatted:
        parts.append(f"<pre>{esc(report.preformatted)}</pre>")
    parts += [_section(section) for section in report.sections]
    parts += [_figure(path) for path in report.figures]
    if report.settings:
        rows = "".join(f"<tr><th>{esc(str(k))}</th><td>{esc(str(v))}</td></tr>" for k, v in report.settings.items())
        parts.append(f"<h2>Settings</h2><table>{rows}</table>")
    if report.environment:
        rows = "".join(f"<tr><th>{esc(str(k))}</th><td>{esc(str(v))}</td></tr>" for k, v in report.environment.items())
        parts.append(f"<h2>What ran it</h2><table>{rows}</table>")
    if report.table_rows:
        header = "".join(f"<th>{esc(h)}</th>" for h in report.table_header)
        rows = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in report.table_rows)
        parts.append(f"<details><summary>{esc(report.table_title)}</summary><table><tr>{header}</tr>{rows}"
                     f"</table></details>")
    body = "\n".join(parts)
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(report.title)}</title>\n'
            f"<style>{_STYLE}</style></head><body>\n{body}\n</body></html>\n")


def write_report(path: str | os.PathLike[str], report: Report) -> Path:
    """Write :func:`render` of ``report`` to ``path`` atomically; returns the path.

    Raises:
        OSError: if a figure cannot be read or the page cannot be written (the
            previous page, if any, stays whole).
        TypeError: for a section that is not :class:`Html`.
    """
    page = render(report)
    return atomic_write(path, lambda tmp: tmp.write_text(page))
