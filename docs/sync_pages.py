"""An MkDocs hook for ``make docs-serve``: the pages copied into the served folder before each build.

``docs/build.py --serve`` serves a build folder (the pages beside the executed notebooks) and has MkDocs
watch ``docs/pages``; when a page is edited, this hook copies ``docs/pages`` over the build folder's copy
(named by ``ATTNLAB_DOCS_SYNC``) before MkDocs rebuilds, so the browser shows the edit. Without the
variable (``make docs``) it does nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

PAGES = Path(__file__).resolve().parent / "pages"


def on_pre_build(config: Any) -> None:
    target = os.environ.get("ATTNLAB_DOCS_SYNC")
    if target:
        shutil.copytree(PAGES, target, dirs_exist_ok=True)
