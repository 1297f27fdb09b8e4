"""The documentation site's pages, checked from their sources: no site to build, no browser.

``tests/test_docs_site.py`` checks the built site in headless Chromium, and is skipped where there
is none; these checks run everywhere (the pages are Markdown, with README sections included by
``docs/readme_sections.py``, which is used here to expand them as the build does):

* every example on a topic page runs: its ``python`` blocks are executed, the ``$ attnlab ...``
  lines of its ``console`` blocks are run, and the ``attnlab`` commands of its ``bash`` blocks are
  parsed by the command's own parser;
* each topic page opens with what it is for and an example: its first code block comes after a few
  short paragraphs, before anything it includes;
* the pages that need a picture show one: each figure ``docs/site_figures.py`` draws is on its page,
  with the same alternative text, and is drawn from committed data;
* no user page names a commit (the benchmarks and development pages, where measurement history
  belongs, excepted): no hexadecimal string of 7 to 40 characters on a page, its includes expanded, or
  in a notebook the site shows. A paper's reference code pinned as ``owner/repo@hash`` is a source,
  not attnlab's history, and is allowed;
* every image has alternative text: a Markdown image on a page or in the README, and every figure a
  notebook draws (``docs/build.py`` takes it from the cell's ``alt`` metadata and stops on a figure
  without one).
"""

import importlib.util
import re
import shlex
import sys
from pathlib import Path

import nbformat
import pytest

from attnlab.cli import build_parser, main

from docs_checks import DEVELOPMENT_PAGES, FIGURE_PAGES, TOPICS, commits

pytest.importorskip("mkdocs", reason="the docs extra is not installed (`pip install -e '.[docs]'`)")

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = DOCS / "pages"

# Prose before a page's first example: about a screen's worth (1280 x 900, the browser test's window).
FIRST_SCREEN_WORDS = 130

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
MARKDOWN_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
HTML_IMAGE = re.compile(r"<img\b[^>]*>", re.I)


def _load(name):
    """``docs/NAME.py`` as a module of its own (registered under another name: ``build`` is a package too)."""
    spec = importlib.util.spec_from_file_location(f"attnlab_docs_{name}", DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


readme_sections = _load("readme_sections")


def expanded(page: str) -> str:
    """A page's Markdown with every ``@include`` replaced by what it stands for, as the build does."""
    text = (PAGES / page).read_text(encoding="utf-8")
    return readme_sections.DIRECTIVE.sub(lambda m: readme_sections.section(readme_sections.parse(m.group(1)), ROOT),
                                         text)


def user_pages() -> list[str]:
    return sorted(str(p.relative_to(PAGES)) for p in PAGES.rglob("*.md") if p.name not in DEVELOPMENT_PAGES)


# -- the examples run ------------------------------------------------------------------------------


def _blocks(lang):
    """``(page, index, code)`` of every ``lang`` block written on a topic page itself (included README
    blocks are run by tests/test_readme.py)."""
    found = []
    for page in TOPICS:
        own = (PAGES / page).read_text(encoding="utf-8")
        found += [(page, i, m.group(2)) for i, m in enumerate(m for m in FENCE.finditer(own) if m.group(1) == lang)]
    return found


@pytest.mark.parametrize(("page", "index", "code"), _blocks("python"),
                         ids=[f"{p}-{i}" for p, i, _ in _blocks("python")])
def test_python_examples_run(page, index, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"docs/pages/{page} python block {index}", "exec"), {})


@pytest.mark.training
@pytest.mark.parametrize(("page", "index", "code"), _blocks("console"),
                         ids=[f"{p}-{i}" for p, i, _ in _blocks("console")])
def test_console_examples_run(page, index, code, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    commands = [line[2:] for line in code.splitlines() if line.startswith("$ ")]
    assert commands
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "attnlab", command
        assert main(argv[1:]) == 0, command
        capsys.readouterr()


def _bash_commands():
    """``(page, argv)`` of each ``attnlab`` command in a topic page's bash blocks (``torchrun ... -m attnlab``
    included): too long to run here, so parsed."""
    found = []
    for page, _, code in _blocks("bash"):
        for line in code.splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] == "attnlab":
                found.append((page, words[1:]))
            elif words and words[0] == "torchrun":
                found.append((page, words[words.index("attnlab") + 1:]))
    return found


@pytest.mark.parametrize(("page", "argv"), _bash_commands(), ids=[" ".join(a[:3]) for _, a in _bash_commands()])
def test_bash_examples_parse(page, argv):
    build_parser().parse_args(argv)  # an unknown flag or a bad value exits, naming it


def test_each_topic_page_opens_with_an_example():
    for page in TOPICS:
        text = (PAGES / page).read_text(encoding="utf-8")
        first = FENCE.search(text)
        assert first, f"{page} has no example"
        before = text[:first.start()]
        assert "@include" not in before, f"{page}: its first example comes after an included section"
        prose = re.sub(r"^#.*$", "", before, flags=re.M)
        assert len(prose.split()) <= FIRST_SCREEN_WORDS, f"{page}: {len(prose.split())} words before its example"
        paragraphs = [p for p in re.split(r"\n\s*\n", prose) if p.strip()]
        assert all(len(p.split()) <= 90 for p in paragraphs), f"{page}: a long paragraph before its example"


def test_the_pages_examples_fit_without_scrolling_sideways():
    # The content column holds about 88 characters of code on a 1280-pixel window.
    wide = [(page, line) for lang in ("python", "console", "bash") for page, _, code in _blocks(lang)
            for line in code.splitlines() if len(line) > 86 and not line.startswith("$ attnlab")]
    assert not wide, wide


# -- figures ---------------------------------------------------------------------------------------


site_figures = _load("site_figures")


def test_each_figure_is_on_its_page_with_its_alternative_text():
    shown = {}
    for page in user_pages():
        for alt, src in MARKDOWN_IMAGE.findall(expanded(page)):
            if src.startswith("figures/"):
                shown[src.removeprefix("figures/")] = (page, alt)
    assert set(shown) == set(site_figures.FIGURES), "every figure drawn is shown, and only those"
    for page, names in FIGURE_PAGES.items():
        for name in names:
            assert shown[name][0] == page, (name, shown[name])
            assert shown[name][1] == site_figures.FIGURES[name][1], f"{page}: {name}'s alternative text differs"


def test_the_figures_are_drawn_from_committed_data(tmp_path):
    import matplotlib.image

    written = site_figures.draw(tmp_path)
    assert sorted(p.name for p in written) == sorted(site_figures.FIGURES)
    for path in written:
        height, width = matplotlib.image.imread(path).shape[:2]
        assert width > 300 and height > 300, (path.name, width, height)


# -- no commit on a user page ----------------------------------------------------------------------


def test_the_commit_pattern():
    assert commits("at commit cefd342 it took") == ["cefd342"]
    assert commits("before (`0503665`) and commit 6431038") == ["6431038"]
    assert commits("a sha 3e4ec9d0a1b2c3d4e5f60718293a4b5c6d7e8f90.") == ["3e4ec9d0a1b2c3d4e5f60718293a4b5c6d7e8f90"]
    for fine in ("google-deepmind/randomized_positional_encodings@e8c6474", "1,000,000 x 512", "--l-max 100000000",
                 "`0001011`", "#1f77b4", "0x7f3a2b1c", "tensor2tensor", "deadbeef", "5.21540641784668e-08"):
        assert commits(fine) == [], fine


@pytest.mark.parametrize("page", [*user_pages(), "README"])
def test_no_user_page_names_a_commit(page):
    text = (ROOT / "README.md").read_text() if page == "README" else expanded(page)
    assert not commits(text), f"{page} names {commits(text)}: history goes to BENCHMARKS.md or DEVELOPMENT.md"


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_no_notebook_names_a_commit(name):
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    assert not [(i, commits(c.source)) for i, c in enumerate(nb.cells) if commits(c.source)]


def test_the_development_pages_are_where_history_goes():
    # The check has something to find: the history the README once carried is on these pages now.
    assert commits(expanded("benchmarks.md")) and commits(expanded("development.md"))


# -- alternative text ------------------------------------------------------------------------------


@pytest.mark.parametrize("page", sorted(str(p.relative_to(PAGES)) for p in PAGES.rglob("*.md")) + ["README"])
def test_every_image_on_a_page_has_alternative_text(page):
    text = (ROOT / "README.md").read_text() if page == "README" else expanded(page)
    assert all(alt.strip() for alt, _ in MARKDOWN_IMAGE.findall(text)), page
    assert all(re.search(r'\balt="[^"]+"', tag) for tag in HTML_IMAGE.findall(text)), page


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_notebook_markdown_images_have_alternative_text(name):
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            assert all(alt.strip() for alt, _ in MARKDOWN_IMAGE.findall(cell.source)), (name, i)
            assert all(re.search(r'\balt="[^"]+"', tag) for tag in HTML_IMAGE.findall(cell.source)), (name, i)
        alt = cell.metadata.get("alt")
        if alt is not None:  # what docs/build.py shows as each figure's text
            assert cell.cell_type == "code" and (isinstance(alt, str) and alt.strip() or isinstance(alt, list)
                                                 and all(isinstance(t, str) and t.strip() for t in alt)), (name, i)


def _figure_notebook(alt=None, figures=1):
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
    cell = nbformat.v4.new_code_cell("fig", outputs=[nbformat.v4.new_output(
        "display_data", data={"image/png": png, "text/plain": "<Figure>"}) for _ in range(figures)])
    if alt is not None:
        cell.metadata["alt"] = alt
    cell.id = "fig-cell"
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A figure"), cell])


@pytest.fixture
def build_module(monkeypatch):
    monkeypatch.syspath_prepend(str(DOCS))
    return _load("build")


def test_the_build_gives_each_notebook_figure_its_text(build_module, tmp_path):
    nbformat.write(_figure_notebook('A line "rising" <fast>'), tmp_path / "n.ipynb")
    build_module.describe_figures(tmp_path)
    (output,) = nbformat.read(tmp_path / "n.ipynb", as_version=4).cells[1].outputs
    html = output.data["text/html"]
    assert html.startswith('<img src="data:image/png;base64,iVBOR')
    assert 'alt="A line &quot;rising&quot; &lt;fast&gt;"' in html
    assert "image/png" in output.data  # kept: the notebook still has its figure


@pytest.mark.parametrize("alt", [None, "", "   ", ["one"], 3])
def test_the_build_stops_on_a_figure_without_its_text(build_module, tmp_path, alt):
    nbformat.write(_figure_notebook(alt, figures=1 if alt != ["one"] else 2), tmp_path / "n.ipynb")
    with pytest.raises(ValueError, match=r"n\.ipynb: cell fig-cell draws \d figure\(s\).*'alt'"):
        build_module.describe_figures(tmp_path)


@pytest.mark.notebook
@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_every_figure_a_notebook_draws_has_its_text(name, tmp_path_factory):
    from notebook_runs import executed_notebook

    nb = nbformat.read(executed_notebook(tmp_path_factory, name), as_version=4)
    drawn = [i for i, c in enumerate(nb.cells) if any("image/png" in o.get("data", {}) for o in c.get("outputs", []))]
    assert all(nb.cells[i].metadata.get("alt") for i in drawn), [nb.cells[i].get("id") for i in drawn
                                                                  if not nb.cells[i].metadata.get("alt")]


def test_the_notebooks_own_figures_are_described_in_the_committed_notebooks():
    # Without running them: a cell that ends by drawing (a plotting call or a figure as its value) has its text.
    drawing = re.compile(r"(^|\n)(fig|[\w.]*(plot|figure9|dials|degrees|heatmap|query_and_keys|pred)\w*\(.*)\s*;?\s*$",
                         re.S)
    missing = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            last = cell.source.strip().splitlines()[-1] if cell.cell_type == "code" and cell.source.strip() else ""
            if last and drawing.search(last) and not last.lstrip().startswith(("print", "#", "import", "from")) \
                    and "=" not in last.split("(")[0] and not cell.metadata.get("alt"):
                missing.append(f"{path.name} {cell.get('id')}: {last}")
    assert not missing, missing


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
