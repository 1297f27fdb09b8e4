"""Each notebook executed once per test session by ``docs/build.py --notebook``, for the tests that read it.

``tests/test_notebooks.py`` checks each executed notebook (a test per notebook, so no test pays
for all seven), and ``tests/test_docs_site.py`` builds the site from the same files with
``docs/build.py --executed``: the notebooks run once, by the code ``make docs`` runs, whichever
xdist worker asks first (:func:`shared_once.shared_once`).
"""

import json
import subprocess
import sys
from pathlib import Path

from shared_once import shared_once

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "docs" / "build.py"

# A quick run of each notebook, as one ``--parameters`` object: the names every notebook gets whose
# parameters cell defines them, then each notebook's own under its file name (which win).
PARAMETERS = {
    "EPOCHS": 2,
    "02_tensorflow_position_encoding.ipynb": {"NUM_POSITIONS": 30, "DEPTH": 20},
    "03_d2l_self_attention_and_positional_encoding.ipynb": {"ENCODING_DIM": 16, "NUM_STEPS": 20},
    "05_pe_walkthrough.ipynb": {"MAX_LEN": 6, "D_MODEL": 8},
    "06_schemes_inside_attention.ipynb": {"SEQ_LEN": 8, "DECODE_LEN": 3},
    "07_length_generalisation.ipynb": {"TASK": "copy", "TRAIN_LEN": 4, "TEST_LENS": [4, 6, 8], "N_SEEDS": 1,
                                       "EPOCHS": 4, "N_TRAIN": 512, "N_TEST": 32, "D_MODEL": 32, "N_HEADS": 2,
                                       "N_LAYERS": 1, "LR": 0.01},
}
HANG_GUARD = 900  # seconds: only a hung kernel reaches it, never a slow machine's outcome

# Two quick notebooks executed by one run of the builder, as `make docs` executes all seven: a fault that
# shows only from a run's second notebook on (docs/build.py once bound the executed notebook to the
# name of its --executed folder, a TypeError at the next notebook) fails these two notebooks' tests.
TOGETHER = ("05_pe_walkthrough.ipynb", "06_schemes_inside_attention.ipynb")


def executed_notebook(tmp_path_factory, name: str) -> Path:
    """``notebooks/NAME`` executed with :data:`PARAMETERS` by ``docs/build.py --notebook NAME`` (with the other
    of :data:`TOGETHER`, for those two), once per session."""
    names = TOGETHER if name in TOGETHER else (name,)

    def run(folder: Path) -> None:
        # A cache of this session's own (empty): the notebooks are executed, never taken from a cache an
        # earlier run left in build/docs-cache, and each executed notebook is stored there (checked below).
        argv = [sys.executable, str(BUILD), "--build", str(folder / "build"), "--cache", str(folder / "cache"),
                "--parameters", json.dumps(PARAMETERS)]
        for each in names:
            argv += ["--notebook", each]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_GUARD, check=False, cwd=folder)
        assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
        assert all(f"executed {each} in" in result.stdout for each in names), result.stdout[-4000:]
        assert all(len(list((folder / "cache").glob(f"{Path(each).stem}-*.ipynb"))) == 1 for each in names)

    folder = shared_once(tmp_path_factory, "notebook-" + "-".join(Path(each).stem for each in names), run)
    return folder / "build" / "src" / "notebooks" / name


def notebook_cache(tmp_path_factory, name: str) -> Path:
    """The cache folder :func:`executed_notebook` stored ``name`` in (executing it first, once per session)."""
    return executed_notebook(tmp_path_factory, name).parents[3] / "cache"


def executed_folder(tmp_path_factory, names) -> Path:
    """A folder holding every notebook of ``names`` executed (links to :func:`executed_notebook`'s files)."""

    def gather(folder: Path) -> None:
        for name in names:
            (folder / name).symlink_to(executed_notebook(tmp_path_factory, name))

    return shared_once(tmp_path_factory, "notebooks-executed", gather)
