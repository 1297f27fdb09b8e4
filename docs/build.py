"""Build attnlab's documentation site: the notebooks executed, then MkDocs.

    python docs/build.py [--out site] [--build build/docs] [--parameters JSON] [--executed DIR]
    python docs/build.py --notebook NAME [--notebook NAME ...] [--build DIR] [--parameters JSON]
    python docs/build.py --serve [--dev-addr HOST:PORT]

1. Each notebook in ``notebooks/`` is executed by papermill from a clean kernel running this
   interpreter, in a working folder of its own under the build folder. papermill injects
   ``--parameters`` (a JSON object, or the ``ATTNLAB_DOCS_PARAMETERS`` environment variable)
   after the cell tagged ``parameters``; without them the notebooks run at their own, full
   length. A name given at the top level goes to every notebook whose parameters cell defines it;
   a key that is a notebook's file name holds that notebook's own, which win:
   ``{"EPOCHS": 2, "07_length_generalisation.ipynb": {"N_SEEDS": 1}}``. A name that no
   parameters cell defines is refused, before anything is run.
   Their LaTeX becomes MathML (docs/offline.py), so the pages need no MathJax.
2. ``docs/pages/`` and the executed copies are put together in ``BUILD/src`` (the executed
   copies never go back into ``notebooks/``, which is committed without outputs). Each figure a
   notebook draws takes its alternative text from its cell's ``alt`` metadata (a figure without
   one stops the build), and the topic pages' figures are drawn into ``BUILD/src/figures`` by
   ``docs/site_figures.py``, from committed results and attnlab's tables.
3. MkDocs builds ``BUILD/src`` with ``docs/mkdocs.yml`` into ``--out``, in strict mode: a
   warning (a broken link or anchor, a missing page) fails the build.

An executed notebook is kept in a cache (``build/docs-cache/``, ``--cache``), under a key that hashes the
notebook's file, the parameters it gets, every file of ``src/attnlab``, and the Python and torch versions:
a rebuild runs only the notebooks whose key changed (``--no-cache`` runs them all), so rebuilding the site
after a change to the pages takes seconds, not the notebooks' full-length minutes.

``--serve`` builds the sources as above, then serves the site at ``--dev-addr`` (default 127.0.0.1:8000)
with MkDocs' live reload: an edit under ``docs/pages/`` or to ``README.md`` rebuilds the page in the
browser (the notebooks are not run again; restart to take a change to them or to attnlab's code).

``--notebook NAME`` runs step 1 alone, for the notebooks named, into ``BUILD/src/notebooks``
(no site, ``--out`` untouched); ``--executed DIR`` then takes the notebooks found in ``DIR``
as executed (by ``--notebook`` with the same ``--parameters``) instead of running them again,
and runs the others. The test suite runs each notebook once this way, as a test of its own,
and builds the site from them.

Exit status 0 when the site (or the notebooks named) is built; 1 when a notebook or MkDocs fails; 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# Left in --out and --build by a build: only a folder that holds it (or an empty one) is emptied by the next.
MARKER = ".attnlab-docs"


def parameters(text: str) -> dict[str, object]:
    """The ``--parameters`` JSON object: names to values, and notebook file names to their own."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text!r} ({err.msg})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text!r}")
    for key, own in value.items():
        if key.endswith(".ipynb") and (not (ROOT / "notebooks" / key).is_file() or not isinstance(own, dict)):
            raise argparse.ArgumentTypeError(f"{key!r} must name a notebook in notebooks/ and map to "
                                             f"a JSON object, got {own!r}")
    return value


def for_notebook(values: dict[str, object], notebook: Path, defined: set[str]) -> dict[str, object]:
    """What ``notebook`` gets: the shared names its parameters cell ``defined``, then its own (which win)."""
    shared = {key: value for key, value in values.items() if not key.endswith(".ipynb") and key in defined}
    own = values.get(notebook.name, {})
    assert isinstance(own, dict)  # checked by parameters()
    return {**shared, **own}


def unknown_names(values: dict[str, object], defined: dict[str, set[str]]) -> list[str]:
    """The names given that no parameters cell defines: a notebook's own in that notebook, a shared one in any."""
    unknown = [key for key in values if not key.endswith(".ipynb") and not any(key in d for d in defined.values())]
    for name, own in values.items():
        if name.endswith(".ipynb") and isinstance(own, dict):
            unknown += [f"{key} (in {name})" for key in own if key not in defined[name]]
    return unknown


def code_digest() -> str:
    """A hash of every file under ``src/attnlab`` (names and bytes) and of the Python and torch versions."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "src" / "attnlab").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(sys.version.encode())
    digest.update(importlib.metadata.version("torch").encode())
    return digest.hexdigest()


def cache_key(notebook: Path, given: dict[str, object], code: str) -> str:
    """What an executed ``notebook`` depends on: its file, the parameters ``given`` to it, attnlab's ``code``."""
    digest = hashlib.sha256(notebook.read_bytes())
    digest.update(json.dumps(given, sort_keys=True).encode())
    digest.update(code.encode())
    return f"{notebook.stem}-{digest.hexdigest()[:20]}.ipynb"


def kernel_path(build: Path) -> Path:
    """A Jupyter data folder whose ``python3`` kernel is this interpreter.

    Put first on ``JUPYTER_PATH``, it wins over any ``python3`` kernel the machine or the user
    has installed, so the notebooks run against the attnlab this build documents.
    """
    spec = build / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "Python 3", "language": "python"}))
    return build / "jupyter"


def execute_notebooks(build: Path, target: Path, values: dict[str, object], defined: dict[str, set[str]],
                      timeout: int, *, only: set[str] | None = None, executed: Path | None = None,
                      cache: Path | None = None) -> None:
    """Run the notebooks with papermill into ``target``, each in its own working folder.

    ``only``: the file names to run (default: every notebook). ``executed``: a folder of notebooks
    already executed by this function (same parameters): those found there are copied, not run.
    ``cache``: a folder of executed notebooks under :func:`cache_key`'s names: a hit is copied, a
    notebook run is stored there (and older entries of the same notebook removed).
    """
    # Imported here: ``--help`` and bad arguments need none of Jupyter.
    import nbformat
    import papermill
    from jupyter_client import KernelManager
    from offline import math_to_mathml  # docs/offline.py, beside this file

    sockets = build / "kernel"

    class Kernel(KernelManager):
        """Unix sockets in the build folder rather than TCP ports: no race for a free port with the
        kernels of other processes (the test suite's workers). A socket path has at most 107
        characters; in a deeper folder, TCP it is."""

        def __init__(self, **kwargs: object) -> None:
            ipc = len(str(sockets)) < 90
            super().__init__(**kwargs, transport="ipc" if ipc else "tcp", ip=str(sockets) if ipc else "127.0.0.1")

    kernels = [str(kernel_path(build)), os.environ.get("JUPYTER_PATH")]
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, kernels))
    # The kernel draws its figures inline only when no other backend is forced on it (the test
    # suite sets MPLBACKEND=Agg); torch gets one thread, as for every tiny model on this machine.
    os.environ.pop("MPLBACKEND", None)
    os.environ["OMP_NUM_THREADS"] = "1"
    target.mkdir(parents=True, exist_ok=True)
    code = code_digest() if cache is not None else ""
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        if only is not None and notebook.name not in only:
            continue
        if executed is not None and (executed / notebook.name).is_file():
            shutil.copyfile(executed / notebook.name, target / notebook.name)
            print(f"took {notebook.name} as executed, from {executed}", flush=True)
            continue
        given = for_notebook(values, notebook, defined[notebook.name])
        cached = cache / cache_key(notebook, given, code) if cache is not None else None
        if cached is not None and cached.is_file():
            shutil.copyfile(cached, target / notebook.name)
            print(f"took {notebook.name} from the cache ({cached.name}: notebook, parameters and attnlab unchanged)",
                  flush=True)
            continue
        workdir = build / "work" / notebook.stem
        workdir.mkdir(parents=True)
        start = time.perf_counter()
        # Not named `executed`: that is the folder of notebooks to copy, read again for the next notebook.
        result = papermill.execute_notebook(notebook, target / notebook.name,
                                            parameters=given,
                                            cwd=str(workdir),
                                            kernel_name="python3", kernel_manager_class=Kernel,
                                            execution_timeout=timeout, progress_bar=False)
        math_to_mathml(result)  # drawn by the browser itself: no MathJax to fetch
        nbformat.write(result, target / notebook.name)
        print(f"executed {notebook.name} in {time.perf_counter() - start:.1f} s", flush=True)
        if cached is not None:
            for old in cached.parent.glob(f"{notebook.stem}-*.ipynb"):
                old.unlink()
            partial = cached.with_suffix(".tmp")
            shutil.copyfile(target / notebook.name, partial)
            partial.replace(cached)  # whole or absent: a build killed mid-copy leaves no half notebook


def describe_figures(folder: Path) -> None:
    """Every figure of the executed notebooks in ``folder`` shown with its cell's ``alt`` metadata as its text.

    A code cell that draws figures names them in its metadata, ``"alt": "..."`` (or a list, one per figure,
    in order). nbconvert writes a figure as an ``<img>`` without ``alt``; so each figure's output also gets
    a ``text/html`` form, the same PNG in an ``<img alt=...>``, which nbconvert prefers.

    Raises:
        ValueError: naming the notebook and the cell, where a cell draws a figure its metadata does not describe.
    """
    import html

    import nbformat

    for path in sorted(folder.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        described = False
        for index, cell in enumerate(nb.cells):
            figures = [out for out in cell.get("outputs", []) if "image/png" in out.get("data", {})]
            if not figures:
                continue
            alt = cell.metadata.get("alt")
            texts = [alt] if isinstance(alt, str) else alt
            if (not isinstance(texts, list) or len(texts) != len(figures)
                    or not all(isinstance(text, str) and text.strip() for text in texts)):
                raise ValueError(f"{path.name}: cell {cell.get('id', index)} draws {len(figures)} figure(s), and its "
                                 f"metadata's 'alt' does not describe each (got {alt!r}): give the alternative text "
                                 "of each, a string or a list of strings")
            for output, text in zip(figures, texts, strict=True):
                png = "".join(output.data["image/png"].split())
                output.data["text/html"] = f'<img src="data:image/png;base64,{png}" alt="{html.escape(text)}">'
            described = True
        if described:
            nbformat.write(nb, path)


def site_sources(source: Path) -> None:
    """What MkDocs needs beside the pages and the executed notebooks: the notebooks' figures described,
    the topic pages' figures drawn (docs/site_figures.py)."""
    from site_figures import draw  # docs/site_figures.py, beside this file

    describe_figures(source / "notebooks")
    draw(source / "figures")


def build_site(source: Path, out: Path) -> None:
    """MkDocs, strict, from ``source`` into ``out`` (replaced)."""
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    config = load_config(str(DOCS / "mkdocs.yml"), docs_dir=str(source), site_dir=str(out), strict=True)
    build(config)


def serve_site(source: Path, address: str) -> None:
    """MkDocs' development server on ``source`` at ``address``, reloading on edits to the pages or the README.

    MkDocs watches ``docs/pages`` and ``README.md``; before each rebuild the hook ``docs/sync_pages.py``
    copies the pages into ``source`` (told where by ``ATTNLAB_DOCS_SYNC``), as the build did.
    """
    from mkdocs.commands.serve import serve

    os.environ["ATTNLAB_DOCS_SYNC"] = str(source)
    serve(config_file=str(DOCS / "mkdocs.yml"), docs_dir=str(source), dev_addr=address,
          watch=[str(DOCS / "pages"), str(ROOT / "README.md")])


class Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line on stderr (exit status 2), as everywhere in attnlab."""

    def error(self, message: str) -> NoReturn:
        print(f"build.py: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "site", help="the site's folder (default: site/)")
    parser.add_argument("--build", type=Path, default=ROOT / "build" / "docs",
                        help="the build folder: executed notebooks, their working folders (default: build/docs/)")
    parser.add_argument("--parameters", type=parameters, default=None,
                        help="JSON object injected into every notebook's parameters cell (default: none, full length; "
                             "or $ATTNLAB_DOCS_PARAMETERS)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds one notebook cell may take (default: 1800)")
    parser.add_argument("--notebook", action="append", default=None, metavar="NAME",
                        help="execute only this notebook (a file name in notebooks/; repeatable) into "
                             "BUILD/src/notebooks, and build no site")
    parser.add_argument("--cache", type=Path, default=ROOT / "build" / "docs-cache",
                        help="executed notebooks kept by what they depend on, reused when nothing changed "
                             "(default: build/docs-cache/)")
    parser.add_argument("--no-cache", action="store_true", help="run every notebook, and store none")
    parser.add_argument("--serve", action="store_true",
                        help="build the sources, then serve the site with live reload instead of writing --out")
    parser.add_argument("--dev-addr", default="127.0.0.1:8000", metavar="HOST:PORT",
                        help="where --serve listens (default: 127.0.0.1:8000)")
    parser.add_argument("--executed", type=Path, default=None, metavar="DIR",
                        help="a folder of notebooks executed by --notebook with the same --parameters: "
                             "taken as they are instead of running them again")
    try:
        args = parser.parse_args(argv)
        values = args.parameters
        if values is None and os.environ.get("ATTNLAB_DOCS_PARAMETERS"):
            values = parameters(os.environ["ATTNLAB_DOCS_PARAMETERS"])
    except argparse.ArgumentTypeError as err:  # from the environment variable: argparse has not seen it
        print(f"build.py: ATTNLAB_DOCS_PARAMETERS {err}", file=sys.stderr)
        return 2
    if args.timeout < 1:
        print(f"build.py: --timeout must be at least 1, got {args.timeout}", file=sys.stderr)
        return 2
    names = {nb.name for nb in (ROOT / "notebooks").glob("*.ipynb")}
    if unnamed := [name for name in args.notebook or [] if name not in names]:
        print(f"build.py: --notebook {unnamed[0]!r} is not a notebook in notebooks/", file=sys.stderr)
        return 2
    if args.executed is not None and not args.executed.is_dir():
        print(f"build.py: --executed {args.executed} is not a folder", file=sys.stderr)
        return 2
    if args.notebook and args.executed is not None:
        print("build.py: --notebook executes notebooks; --executed builds the site from executed ones: give one",
              file=sys.stderr)
        return 2
    import papermill  # after the arguments: --help needs none of Jupyter

    defined = {nb.name: set(papermill.inspect_notebook(nb)) for nb in sorted((ROOT / "notebooks").glob("*.ipynb"))}
    if unknown := unknown_names(values or {}, defined):
        print(f"build.py: --parameters: no notebook's parameters cell defines {', '.join(unknown)}", file=sys.stderr)
        return 2
    build, out = args.build.resolve(), args.out.resolve()
    cache = None if args.no_cache else args.cache.resolve()
    folders = (("--build", build),) if args.notebook or args.serve else (("--build", build), ("--out", out))
    if cache is not None:
        folders += (("--cache", cache),)
    if cache is not None and cache.is_relative_to(build):
        print(f"build.py: --cache {cache} is inside --build {build}, which every build empties: give another",
              file=sys.stderr)
        return 2
    for flag, folder in folders:
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir()) and not (folder / MARKER).is_file()):
            print(f"build.py: {flag} {folder} is not a folder this script wrote, nor an empty one: give another",
                  file=sys.stderr)
            return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)-7s %(message)s")
    shutil.rmtree(build, ignore_errors=True)  # a fresh build: no notebook or page left from a previous one
    for _, folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / MARKER).touch()  # MkDocs empties --out but keeps its hidden files
    source = build / "src"
    shutil.copytree(DOCS / "pages", source)
    try:
        execute_notebooks(build, source / "notebooks", values or {}, defined, args.timeout,
                          only=set(args.notebook) if args.notebook else None,
                          executed=args.executed.resolve() if args.executed else None, cache=cache)
        if args.notebook:
            print(f"executed into {source / 'notebooks'}", flush=True)
            return 0
        site_sources(source)
        if args.serve:
            serve_site(source, args.dev_addr)
            return 0
        build_site(source, out)
    except Exception as err:  # a notebook's error or MkDocs' abort: one line, the details above it
        print(f"build.py: {type(err).__name__}: {str(err).strip().splitlines()[-1] if str(err).strip() else ''}",
              file=sys.stderr)
        return 1
    print(f"site built in {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
