"""How many files a reader crosses to follow one idea: the code's grain, counted.

Five counts, each from running the code rather than reading it:

- **span**: the attnlab files (and their lines) whose functions run while a decoder-only Transformer with ALiBi
  is built and takes one forward and backward pass;
- **imports**: the attnlab modules loaded by ``import attnlab.models.decoder_only``, in a fresh interpreter;
- **forward**: the files, and the distinct cross-file calls (caller function -> callee function, in different
  files), crossed by the model's first forward pass inside ``attnlab compare --encodings alibi``;
- **resolutions**: look-ups of a scheme's name in the registry (``registry._named``, what ``resolve`` does with
  a string; given a class or a resolved spec it looks nothing up) per model trained by that comparison;
- **sizes**: the package's files over 500 lines, and those under 60 that are not a package's ``__init__``
  (a reader decides whether each holds a concept of its own; the list is printed).

Run:
    python benchmarks/grain.py               # print the counts
    python benchmarks/grain.py --json OUT    # and write them as JSON
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "attnlab"


def _ours(filename: str) -> str | None:
    """The path of ``filename`` relative to the package, or None outside it."""
    try:
        return Path(filename).resolve().relative_to(PACKAGE).as_posix()
    except ValueError:
        return None


class Tracer:
    """Every call into attnlab's code while active: the files entered and the cross-file call edges."""

    def __init__(self) -> None:
        self.files: set[str] = set()
        self.edges: set[tuple[str, str]] = set()
        self.calls: dict[str, int] = {}

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = _ours(frame.f_code.co_filename)
        if callee is None:
            return
        self.files.add(callee)
        name = f"{callee}:{frame.f_code.co_qualname}"
        self.calls[name] = self.calls.get(name, 0) + 1
        back = frame.f_back
        # Walk out of torch's and Python's frames (nn.Module.__call__, hooks) to the attnlab caller, if any.
        while back is not None and _ours(back.f_code.co_filename) is None:
            back = back.f_back
        if back is not None:
            caller = _ours(back.f_code.co_filename)
            if caller != callee:
                self.edges.add((f"{caller}:{back.f_code.co_qualname}", name))

    @contextmanager
    def active(self) -> Iterator[Tracer]:
        sys.setprofile(self)
        try:
            yield self
        finally:
            sys.setprofile(None)


def lines(path: str) -> int:
    return len((PACKAGE / path).read_text().splitlines())


def span() -> dict[str, Any]:
    """Files and lines that build, run forward and backward a decoder-only Transformer with ALiBi."""
    import torch

    from attnlab.models import DecoderOnlyTransformer

    torch.manual_seed(0)
    tokens = torch.randint(3, 13, (2, 6))
    with Tracer().active() as tracer:
        model = DecoderOnlyTransformer(vocab_size=13, d_model=32, n_heads=4, n_layers=2, position="alibi")
        model(tokens).sum().backward()
    files = sorted(tracer.files)
    return {"files": len(files), "lines": sum(lines(f) for f in files), "which": files}


def imports() -> dict[str, Any]:
    """attnlab modules loaded by ``import attnlab.models.decoder_only`` in a fresh interpreter."""
    code = ("import sys, attnlab.models.decoder_only; "
            "print('\\n'.join(sorted(m for m in sys.modules if m == 'attnlab' or m.startswith('attnlab.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    files = set()
    for name in out:
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None) if module is not None else None
        if where is None:
            base = PACKAGE.joinpath(*name.split(".")[1:])
            where = str(base / "__init__.py") if base.is_dir() else str(base.with_suffix(".py"))
        rel = _ours(where)
        if rel is not None:
            files.add(rel)
    return {"modules": len(out), "lines": sum(lines(f) for f in files if (PACKAGE / f).exists()), "which": out}


def _compare(out: Path) -> tuple[Tracer, Tracer]:
    """Run ``attnlab compare --encodings alibi`` at a tiny size; trace the whole run and, apart, one forward."""
    import torch

    from attnlab.cli import main
    from attnlab.models import DecoderOnlyTransformer

    whole = Tracer()
    forward = Tracer()
    state = {"done": False}

    def pre(module: torch.nn.Module, args: Any) -> None:
        if isinstance(module, DecoderOnlyTransformer) and not state["done"]:
            sys.setprofile(forward)

    def post(module: torch.nn.Module, args: Any, output: Any) -> None:
        if isinstance(module, DecoderOnlyTransformer) and not state["done"]:
            state["done"] = True
            sys.setprofile(whole)

    hooks = [torch.nn.modules.module.register_module_forward_pre_hook(pre),
             torch.nn.modules.module.register_module_forward_hook(post)]
    argv = ["compare", "--encodings", "alibi", "--seeds", "1", "--train-len", "4", "--test-lens", "4,6",
            "--n-train", "64", "--n-test", "8", "--epochs", "1", "--d-model", "16", "--n-heads", "2",
            "--n-layers", "2", "--jobs", "1", "--out", str(out), "--no-progress"]
    try:
        with whole.active(), redirect_stdout(io.StringIO()):
            status = main(argv)
    finally:
        for hook in hooks:
            hook.remove()
    if status != 0:
        raise SystemExit(f"attnlab {' '.join(argv)} exited {status}")
    for name, n in forward.calls.items():
        whole.calls[name] = whole.calls.get(name, 0) + n
    return forward, whole


def forward_and_resolutions() -> tuple[dict[str, Any], dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        forward, whole = _compare(Path(tmp) / "run")
    resolve = sum(n for name, n in whole.calls.items()
                  if name.startswith("encodings/") and name.endswith(":_named"))
    files = sorted(forward.files)
    return ({"files": len(files), "cross_file_calls": len(forward.edges), "which": files,
             "edges": sorted(f"{a} -> {b}" for a, b in forward.edges)},
            {"per_model": resolve, "models": 1})


def sizes() -> dict[str, Any]:
    counted = {p.relative_to(PACKAGE).as_posix(): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    over = {p: n for p, n in sorted(counted.items()) if n > 500}
    under = {p: n for p, n in sorted(counted.items()) if n < 60 and Path(p).name not in ("__init__.py", "__main__.py")}
    return {"files": len(counted), "lines": sum(counted.values()), "over_500": over, "under_60": under}


def commit() -> str:
    run = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return run.stdout.strip() or "unknown"


def measure() -> dict[str, Any]:
    forward, resolutions = forward_and_resolutions()
    return {"commit": commit(), "span": span(), "imports": imports(), "forward": forward,
            "resolutions": resolutions, "sizes": sizes()}


def summary(counts: dict[str, Any]) -> str:
    s = counts["sizes"]
    return "\n".join([
        f"grain at {counts['commit']}:",
        f"  decoder-only + ALiBi spans      {counts['span']['files']} files, {counts['span']['lines']} lines",
        f"  import attnlab.models.decoder_only loads {counts['imports']['modules']} attnlab modules "
        f"({counts['imports']['lines']} lines)",
        f"  compare --encodings alibi, one forward: {counts['forward']['files']} files, "
        f"{counts['forward']['cross_file_calls']} distinct cross-file calls",
        f"  scheme-name resolutions per model: {counts['resolutions']['per_model']}",
        f"  {s['files']} files, {s['lines']} lines; over 500 lines: {len(s['over_500'])} "
        f"({', '.join(f'{p} {n}' for p, n in s['over_500'].items()) or 'none'})",
        f"  under 60 lines, not an __init__: {len(s['under_60'])} "
        f"({', '.join(f'{p} {n}' for p, n in s['under_60'].items()) or 'none'})",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the counts, with every file named, to this file")
    args = parser.parse_args(argv)
    counts = measure()
    print(summary(counts))
    if args.json:
        args.json.write_text(json.dumps(counts, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
