"""The documentation site, built once for the module by ``docs/build.py`` (what ``make docs`` runs).

The build executes the seven notebooks with papermill, short (the parameters the notebook tests
inject, passed through ``--parameters``), and runs MkDocs in strict mode into a temporary folder.
Like the issue asks, the module runs when Chromium is present and is skipped otherwise (and when
the ``docs`` extra is not installed).

Unmarked: the builder refuses, in one line and before writing anything, bad ``--parameters`` and
an ``--out`` or ``--build`` folder holding files it did not write (it empties those folders);
the parameters reach the notebooks; a link checker over every built HTML file (every
internal ``href`` / ``src`` resolves to a file of the site, every ``#anchor`` to an element of its
page, and no page, stylesheet or inline script loads anything from another host); every public
name (the ``__all__`` of attnlab and of each public subpackage) has its entry in the API reference.

Unmarked too: no user page of the built site names a commit (the benchmarks and development pages,
where measurement history belongs, excepted), and every image has its alternative text.
``tests/test_docs_pages.py`` checks the same of the Markdown sources without building the site.

``@pytest.mark.browser``: headless Chromium, driven over its DevTools pipe (no extra package),
opens the landing page from disk (its title and the two commands), each topic page (a code example
within its first screen, and on the pages that have one, each figure loaded and decoded), every
user page (no commit in the text the browser shows), a notebook page (its figures
decoded by the browser, as many as the executed notebook holds, and its math drawn as MathML),
an API page (``sinusoidal`` with its ``[L, D]`` shape and its example), and, the site served over
http by ``python -m http.server`` (search runs in a web worker, which a ``file://`` page cannot
start), the search box opened with ``?q=ALiBi``, whose results must list the ALiBi class.
"""

import fcntl
import importlib
import json
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import time
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest

import attnlab

from docs_checks import DEVELOPMENT_PAGES, FIGURE_PAGES, TOPICS, commits
from notebook_runs import HANG_GUARD, PARAMETERS, executed_folder
from shared_once import shared_once

for _module in ("mkdocs", "material", "mkdocstrings", "mkdocs_jupyter", "papermill", "latex2mathml"):
    pytest.importorskip(_module, reason="the docs extra is not installed (`pip install -e '.[docs]'`)")

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome",
                                                 "google-chrome-stable"))), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (`make test-browser` installs it)")

NOTEBOOK = "notebooks/01_positional_encoding_lab.html"
NOTEBOOKS = sorted(path.name for path in (ROOT / "notebooks").glob("*.ipynb"))


def _build(folder, executed):
    """``docs/build.py --executed`` into ``folder/site`` and ``folder/build``; the committed notebooks are left as
    they were."""
    committed = {path: path.read_bytes() for path in (ROOT / "notebooks").glob("*.ipynb")}
    result = subprocess.run([sys.executable, str(ROOT / "docs" / "build.py"), "--out", str(folder / "site"),
                             "--build", str(folder / "build"), "--parameters", json.dumps(PARAMETERS),
                             "--executed", str(executed), "--no-cache"],
                            capture_output=True, text=True, timeout=HANG_GUARD, check=False, cwd=folder)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert result.stdout.count("as executed") == len(NOTEBOOKS), result.stdout  # none run twice
    assert {path: path.read_bytes() for path in (ROOT / "notebooks").glob("*.ipynb")} == committed


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(site, build)``: the folders ``docs/build.py`` wrote, once per session (tests/shared_once.py:
    work stealing may give this module's tests to both xdist workers), from the notebooks
    ``tests/notebook_runs.py`` executed (each once: tests/test_notebooks.py reads them too)."""
    executed = executed_folder(tmp_path_factory, NOTEBOOKS)
    folder = shared_once(tmp_path_factory, "docs-site", lambda f: _build(f, executed))
    return folder / "site", folder / "build"


class Page(HTMLParser):
    """A page's links (``(tag, attribute, url)``), its element ids, and its inline scripts and styles."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.links, self.ids, self.inline, self._in = [], set(), [], None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.ids.update(attrs[key] for key in ("id", "name") if attrs.get(key))
        for key in ("href", "src", "data", "poster"):
            if attrs.get(key) is not None:
                self.links.append((tag, key, attrs[key], attrs.get("rel") or ""))
        if attrs.get("style"):
            self.inline.append(attrs["style"])
        self._in = tag if tag in ("script", "style") else None

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in:
            self.inline.append(data)


# A fetch from another host written in CSS or JavaScript: @import, url(), import(), importScripts(), fetch().
REMOTE_IN_CODE = re.compile(r"""(@import\s+(url\()?|url\(|import\(|importScripts\(|fetch\()\s*["']?\s*(https?:)?//""",
                            re.IGNORECASE)


def _pages(site):
    return {path: Page(path.read_text(encoding="utf-8")) for path in sorted(site.rglob("*.html"))}


def test_the_parameters_reach_the_notebooks(built):
    site, build = built
    for name, epochs in (("01_positional_encoding_lab.ipynb", 2), ("07_length_generalisation.ipynb", 4)):
        nb = nbformat.read(build / "src" / "notebooks" / name, as_version=4)
        (injected,) = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
        assert f"EPOCHS = {epochs}" in injected.source  # a notebook's own value wins over the shared one
    assert "N_SEEDS = 1" in injected.source
    # A shared name goes only where a parameters cell defines it: notebook 02 gets its own names alone.
    nb = nbformat.read(build / "src" / "notebooks" / "02_tensorflow_position_encoding.ipynb", as_version=4)
    (injected,) = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert "NUM_POSITIONS = 30" in injected.source and "EPOCHS" not in injected.source
    # The rendered page shows the injected cell (its code highlighted: compare the text alone).
    text = re.sub(r"<[^>]+>", "", (site / NOTEBOOK).read_text(encoding="utf-8"))
    assert "EPOCHS = 2" in text


@pytest.mark.process
@pytest.mark.parametrize("flag", ["--out", "--build"])
def test_a_folder_of_other_files_is_refused_untouched(flag, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    other = "--build" if flag == "--out" else "--out"
    result = subprocess.run([sys.executable, str(ROOT / "docs" / "build.py"), flag, str(mine), other,
                             str(tmp_path / "x")], capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and f"{flag} {mine} is not a folder this script wrote" in result.stderr
    assert [p.name for p in mine.iterdir()] == ["notes.txt"] and not (tmp_path / "x").exists()


@pytest.mark.parametrize(("value", "message"), [
    ("[1]", "argument --parameters: must be a JSON object, got '[1]'"),
    ("{bad", "argument --parameters: must be a JSON object, got '{bad'"),
    ('{"no_such_notebook.ipynb": {}}', "'no_such_notebook.ipynb' must name a notebook in notebooks/"),
    ('{"EPOCH": 2}', "--parameters: no notebook's parameters cell defines EPOCH"),
    ('{"05_pe_walkthrough.ipynb": {"EPOCHS": 1}}', "defines EPOCHS (in 05_pe_walkthrough.ipynb)"),
])
@pytest.mark.process
def test_bad_parameters_are_one_line(value, message, tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "docs" / "build.py"), "--out", str(tmp_path / "site"),
                             "--build", str(tmp_path / "build"), "--parameters", value],
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 2 and result.stderr.startswith("build.py: ") and message in result.stderr
    assert result.stderr.count("\n") == 1 and not list(tmp_path.iterdir())  # nothing written, nothing run


def test_every_internal_link_resolves(built):
    site, _ = built
    pages = _pages(site)
    assert len(pages) > 20  # the topic pages, the notebooks, the API reference
    broken, checked = [], 0
    for path, page in pages.items():
        for tag, key, url, _ in page.links:
            parts = urlsplit(url)
            if parts.scheme in ("data", "mailto", "javascript") or parts.scheme or parts.netloc:
                continue  # an outside address: test_nothing_is_loaded_from_the_network judges those
            # A path from the root is served from the site's root (only 404.html has them: a server's page).
            base = site if parts.path.startswith("/") else path.parent
            target = path if not parts.path else (base / unquote(parts.path).lstrip("/")).resolve()
            if target.is_dir():
                target = target / "index.html"
            checked += 1
            if not target.is_file() or not target.is_relative_to(site.resolve()):
                broken.append(f"{path.relative_to(site)}: <{tag} {key}={url!r}>: no file {target}")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in pages[
                    site / target.relative_to(site.resolve())].ids:
                broken.append(f"{path.relative_to(site)}: <{tag} {key}={url!r}>: no element #{parts.fragment}")
    assert not broken, "\n".join(broken[:30])
    assert checked > 1000


def test_nothing_is_loaded_from_the_network(built):
    site, _ = built
    found = []
    for path, page in _pages(site).items():
        for tag, key, url, rel in page.links:
            remote = urlsplit(url).scheme in ("http", "https") or url.startswith("//")
            # A link a reader may follow is allowed; a resource the browser loads by itself is not.
            if remote and not (tag == "a" or (tag == "link" and key == "href" and rel in ("canonical",))):
                found.append(f"{path.relative_to(site)}: <{tag} {key}={url!r}>")
        found += [f"{path.relative_to(site)}: {m.group(0)!r}"
                  for text in page.inline for m in REMOTE_IN_CODE.finditer(text)]
    for css in site.rglob("*.css"):
        found += [f"{css.relative_to(site)}: {m.group(0)!r}" for m in REMOTE_IN_CODE.finditer(css.read_text())]
    assert not found, "\n".join(found[:30])


def _user_pages(site):
    """Every page of the built site a user reads: all but the benchmarks and development pages (and 404)."""
    skip = {Path(page).with_suffix(".html").name for page in DEVELOPMENT_PAGES} | {"404.html"}
    return [path for path in sorted(site.rglob("*.html")) if path.relative_to(site).as_posix() not in skip]


def _shown_text(html):
    """What a page shows as text: its markup, scripts, styles and embedded images left out."""
    html = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S | re.I)
    html = re.sub(r"data:[\w/+.-]+;base64,[A-Za-z0-9+/=]+", " ", html)
    return unescape(re.sub(r"<[^>]+>", " ", html))


def test_no_user_page_names_a_commit(built):
    site, _ = built
    pages = _user_pages(site)
    assert len(pages) > 20 and site / "index.html" in pages and site / "encodings.html" in pages
    found = {path.relative_to(site).as_posix(): commits(_shown_text(path.read_text(encoding="utf-8")))
             for path in pages}
    assert not {page: hashes for page, hashes in found.items() if hashes}
    assert commits(_shown_text((site / "benchmarks.html").read_text(encoding="utf-8")))  # history lives there


def test_every_image_has_its_alternative_text(built):
    site, _ = built
    missing, images = [], 0
    for path in sorted(site.rglob("*.html")):
        for tag in re.findall(r"<img\b[^>]*>", path.read_text(encoding="utf-8"), flags=re.I):
            images += 1
            alt = re.search(r'\balt="([^"]*)"', tag)
            # nbconvert fills a figure without text with a placeholder: that is no description either
            if not alt or not alt.group(1).strip() or alt.group(1).startswith("No description has been provided"):
                missing.append(f"{path.relative_to(site)}: {tag[:120]}")
    assert not missing, "\n".join(missing[:20])
    assert images >= 20  # the notebooks' figures and the topic pages'


def _public_names():
    """``{module: __all__}`` for attnlab and each public subpackage, and the modules of attnlab.compat
    (each a source's own signatures: ``import attnlab.compat.d2l as d2l``)."""
    import attnlab.compat

    packages = ["attnlab"] + [m.name for m in pkgutil.walk_packages(attnlab.__path__, "attnlab.")
                              if m.ispkg and not any(part.startswith("_") for part in m.name.split("."))]
    packages += [m.name for m in pkgutil.iter_modules(attnlab.compat.__path__, "attnlab.compat.")
                 if not m.name.rpartition(".")[2].startswith("_")]
    names = {}
    for name in packages:
        module = importlib.import_module(name)
        if getattr(module, "__all__", None):
            names[name] = list(module.__all__)
    return names


def _homes(name, obj):
    """Every attnlab module whose ``__all__`` offers ``obj`` as ``name``: where its entry may be."""
    found = []
    for info in pkgutil.walk_packages(attnlab.__path__, "attnlab."):
        module = importlib.import_module(info.name) if not info.name.endswith("__main__") else None
        if module is not None and name in getattr(module, "__all__", ()) and getattr(module, name, None) is obj:
            found.append(info.name)
    return found + (["attnlab"] if name in attnlab.__all__ else [])


def test_every_public_name_is_in_the_api_reference(built):
    site, _ = built
    ids = set().union(*(page.ids for page in _pages(site / "api").values()))
    names = _public_names()
    assert {"attnlab.encodings", "attnlab.attention", "attnlab.models", "attnlab.labs.squares",
            "attnlab.compat.d2l"} <= set(names)
    missing = []
    for module, public in names.items():
        for name in public:
            # Its entry is where the package offers it, or in the module that defines it (griffe hides a
            # function named like its own module, e.g. attnlab.encodings.sinusoidal, from its package).
            obj = getattr(importlib.import_module(module), name)
            if not any(f"{home}.{name}" in ids for home in _homes(name, obj)):
                missing.append(f"{module}.{name}")
    assert not missing, missing
    assert sum(map(len, names.values())) > 200


# -- in headless Chromium ------------------------------------------------------------------


class Chromium:
    """Headless Chromium driven through its DevTools protocol on a pipe (``--remote-debugging-pipe``).

    Chromium reads commands on its fd 3 and writes replies on its fd 4, each a JSON object ended by
    a NUL byte: no port to pick and no WebSocket client to install.
    """

    def __init__(self, profile):
        commands, replies = os.pipe(), os.pipe()
        # Copies at 10 and above, so that moving them to 3 and 4 in the child cannot overwrite each other.
        child_in, child_out = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (commands[0], replies[1]))
        os.close(commands[0])
        os.close(replies[1])

        def onto_3_and_4():
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        self.process = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--window-size=1280,900", "--remote-debugging-pipe", "about:blank"],
            preexec_fn=onto_3_and_4, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(child_in)
        os.close(child_out)
        self._out, self._in, self._buffer, self._id = commands[1], replies[0], b"", 0

    def call(self, method, session=None, **params):
        self._id += 1
        message = {"id": self._id, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(self._out, json.dumps(message).encode() + b"\0")
        while True:  # events and other replies are skipped
            while b"\0" not in self._buffer:
                chunk = os.read(self._in, 1 << 16)
                assert chunk, "Chromium closed its DevTools pipe"
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                assert "error" not in reply, reply["error"]
                return reply["result"]

    def open(self, url):
        """A new tab on ``url``; returns its session."""
        target = self.call("Target.createTarget", url=url)["targetId"]
        return self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def wait_for(self, session, expression, timeout=300.0):
        """The value of ``expression`` in the page once it is truthy (polled; the time limit is generous)."""
        deadline = time.monotonic() + timeout
        while True:
            reply = self.call("Runtime.evaluate", session, expression=expression, returnByValue=True)
            if reply["result"].get("value") or time.monotonic() > deadline:
                self.last = reply  # what the page said last, for a failing test's message
                return reply["result"].get("value")
            time.sleep(0.1)

    def close(self):
        try:
            self.call("Browser.close")
            self.process.wait(timeout=300)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            os.close(self._out)
            os.close(self._in)


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    browser = Chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield browser
    browser.close()


@pytest.fixture(scope="module")
def served(built):
    """The site over http on 127.0.0.1 (a port the system picks): its base URL."""
    site, _ = built
    server = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory",
                               str(site)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = server.stdout.readline()  # "Serving HTTP on 127.0.0.1 port 40123 (http://127.0.0.1:40123/) ..."
        port = re.search(r"port (\d+)", line)
        assert port, f"http.server said {line!r}"
        yield f"http://127.0.0.1:{port.group(1)}"
    finally:
        server.terminate()
        server.wait(timeout=300)


READY = "document.readyState === 'complete'"


@pytest.mark.browser
def test_the_landing_page_opens_from_disk_with_the_two_commands(built, chromium):
    site, _ = built
    tab = chromium.open((site / "index.html").as_uri())
    got = chromium.wait_for(tab, f"{READY} && ({{title: document.title, h1: document.querySelector('h1').textContent,"
                                 " code: [...document.querySelectorAll('pre code')].map(e => e.textContent)})")
    assert got, chromium.last
    assert got["title"] == "attnlab" and got["h1"].strip(" ¶") == "attnlab"
    commands = [line.split("#")[0].strip() for block in got["code"] for line in block.splitlines()]
    assert "make run" in commands and "make test" in commands


@pytest.mark.browser
def test_a_notebook_page_shows_its_figures_and_math(built, chromium):
    site, build = built
    executed = nbformat.read(build / "src" / "notebooks" / "01_positional_encoding_lab.ipynb", as_version=4)
    figures = sum("image/png" in out.get("data", {})
                  for cell in executed.cells if cell.cell_type == "code" for out in cell.outputs)
    assert figures >= 5
    tab = chromium.open((site / NOTEBOOK).as_uri())
    images = chromium.wait_for(tab, f"{READY} && [...document.images].every(i => i.complete) && [...document.images]"
                                    ".filter(i => i.src.startsWith('data:image/png'))"
                                    ".map(i => [i.naturalWidth, i.naturalHeight])")
    assert len(images) == figures
    assert all(w > 100 and h > 100 for w, h in images), images  # decoded by the browser, not broken
    maths = chromium.wait_for(tab, "[...document.querySelectorAll('.jp-RenderedMarkdown math')]"
                                   ".map(m => m.getBoundingClientRect().width)")
    assert maths and all(width > 0 for width in maths)  # MathML drawn by the browser itself


@pytest.mark.browser
def test_an_api_page_shows_a_name_with_its_shape(built, chromium):
    site, _ = built
    tab = chromium.open((site / "api" / "encodings.html").as_uri())
    text = chromium.wait_for(tab, f"{READY} && document.getElementById('attnlab.encodings.sinusoidal.sinusoidal')"
                                  ".closest('.doc-object').textContent")
    assert "The sinusoidal positional-encoding table" in text
    assert "[L, D]" in text  # Returns: Tensor [L, D]
    assert "tensor([0.8415, 0.5403, 0.0998, 0.9950, 0.0100, 1.0000, 0.0010, 1.0000])" in text  # its example


@pytest.mark.browser
def test_the_search_box_finds_alibi(served, chromium):
    tab = chromium.open(f"{served}/index.html?q=ALiBi")
    results = chromium.wait_for(tab, "[...document.querySelectorAll('.md-search-result__item > a')]"
                                     ".map(a => a.getAttribute('href'))")
    assert results, "no search result for ALiBi within 60 s"
    query = chromium.wait_for(tab, "document.querySelector('.md-search__input').value")
    assert query == "ALiBi"
    pages = {urlsplit(href).path for href in results}
    assert "/api/encodings.html" in pages
    hrefs = chromium.wait_for(tab, "[...document.querySelectorAll('.md-search-result__item a')].map(a => a.href)")
    assert any(urlsplit(h).fragment == "attnlab.encodings.ALiBi" for h in hrefs), hrefs


FIRST_SCREEN = "window.innerHeight"  # the window is 1280 x 900 (Chromium's --window-size)


@pytest.mark.browser
@pytest.mark.parametrize("page", TOPICS)
def test_each_topic_page_shows_an_example_on_its_first_screen(built, chromium, page):
    site, _ = built
    url = (site / page).with_suffix(".html").as_uri()
    tab = chromium.open(url)
    # The new tab's first document is about:blank, already "complete": wait for the page's own article.
    got = chromium.wait_for(tab, f"location.href === {json.dumps(url)} && {READY} && document.querySelector('article')"
                                 " && (() => { const code = document.querySelector('article pre code');"
                                 " return {top: code ? code.getBoundingClientRect().top : null,"
                                 f" bottom: code ? code.getBoundingClientRect().bottom : null, screen: {FIRST_SCREEN},"
                                 " text: code ? code.textContent : ''}; })()")
    assert got and got["top"] is not None, f"{page}: no code example ({chromium.last})"
    assert 0 < got["top"] < got["screen"], f"{page}: its first example starts at {got['top']} px, below the screen"
    assert got["text"].strip()


@pytest.mark.browser
@pytest.mark.parametrize("page", sorted(FIGURE_PAGES))
def test_the_figure_pages_show_their_figures(built, chromium, page):
    site, _ = built
    url = (site / page).with_suffix(".html").as_uri()
    tab = chromium.open(url)
    figures = chromium.wait_for(tab, f"location.href === {json.dumps(url)} && {READY} && "
                                     "[...document.images].every(i => i.complete) && "
                                     "[...document.querySelectorAll('article img')]"
                                     ".filter(i => i.getAttribute('src').startsWith('figures/'))"
                                     ".map(i => ({src: i.getAttribute('src'), width: i.naturalWidth,"
                                     " height: i.naturalHeight, alt: i.alt}))")
    assert figures, f"{page}: no figure ({chromium.last})"
    assert [f["src"] for f in figures] == [f"figures/{name}" for name in FIGURE_PAGES[page]]
    for figure in figures:
        assert figure["width"] > 300 and figure["height"] > 300, figure  # loaded and decoded, not broken
        assert len(figure["alt"]) > 40, figure


@pytest.mark.browser
def test_no_user_page_shows_a_commit(built, chromium):
    site, _ = built
    pages = _user_pages(site)
    tab = chromium.open("about:blank")
    found = {}
    for path in pages:
        url = path.as_uri()
        chromium.call("Page.navigate", tab, url=url)
        text = chromium.wait_for(tab, f"location.href === {json.dumps(url)} && {READY} && document.body.innerText")
        assert text, f"{path.relative_to(site)} showed nothing ({chromium.last})"
        if commits(text):
            found[path.relative_to(site).as_posix()] = commits(text)
    assert not found
