"""A scheme attnlab does not have, defined here, outside ``src/``: it goes through every door a built-in one does.

Sandwich (Chi et al. 2023, "Dissecting Transformer Length Extrapolation via the Lens of Receptive
Field Analysis", ACL, arXiv:2212.10356): the bias is the inner product of the query's and the key's
sinusoidal embeddings (width ``d'``), ``p_i . p_j = sum_k cos((j - i) w_k)``, shifted so distance 0
adds nothing and scaled per head. Written with the protocol's primitives only, in under 40 lines.
"""

import inspect
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from attnlab.analysis import audit_position
from attnlab.attention import MultiHeadAttention
from attnlab.encodings import ModelSizes, PositionScheme, register, resolve, spec_name
from attnlab.encodings.registry import attention_position
from attnlab.encodings.scheme import bias_dtype, check_heads, check_rel
from attnlab.models import DecoderOnlyTransformer, EncoderOnlyTransformer, Transformer
from attnlab.models.labs.squares_transformer import squares_transformer


class Sandwich(PositionScheme):
    """Sandwich (Chi et al. 2023): head ``h`` adds ``(p_i . p_j - d'/2) / 8h``, ``p`` sinusoids of width ``d'``."""

    adds_score = True
    relative = True  # a function of j - i alone: written at distances, randomizable by distances
    by_distance = True  # and not of the queries' values: FlexAttention and the chunks get it per distance
    has_score_mod = True

    def __init__(self, n_heads: int, *, width: int = 64) -> None:
        super().__init__()
        self.n_heads, self.width = n_heads, width
        speeds = 10000.0 ** (-torch.arange(0, width, 2, dtype=torch.float64) / width)  # w_k [d'/2]
        self.register_buffer("speeds", speeds, persistent=False)
        self.register_buffer("scales", 1.0 / (8.0 * torch.arange(1, n_heads + 1, dtype=torch.float64)),
                             persistent=False)  # [H]

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> "Sandwich":
        return cls(sizes.n_heads)

    def bias_rel(self, q: torch.Tensor, *, rel: torch.Tensor, k: torch.Tensor | None = None) -> torch.Tensor:
        check_heads("q", q, n_heads=self.n_heads)
        check_rel(rel, q.shape[2])
        angles = rel.to(device=self.speeds.device, dtype=torch.float64)[..., None] * self.speeds  # [T, S, d'/2]
        dot = angles.cos().sum(-1) - self.width / 2  # [T, S]: p_i . p_j, 0 at distance 0, negative elsewhere
        bias = self.scales[:, None, None] * dot  # [H, T, S]
        return bias[None].to(device=q.device, dtype=bias_dtype(q.dtype))  # [1, H, T, S]


def test_the_scheme_is_written_in_at_most_40_lines():
    assert len(inspect.getsource(Sandwich).splitlines()) <= 40


def _mha(backend, *, n_heads=4, d_model=32, seed=0):
    torch.manual_seed(seed)
    return MultiHeadAttention(n_heads, d_model, position=Sandwich(n_heads), backend=backend).double()


@pytest.mark.parametrize("is_causal", [True, False])
def test_dense_and_chunked_paths_agree_on_outputs_and_gradients(is_causal):
    dense, chunked = _mha("dense"), _mha("chunked")
    x = torch.randn(2, 37, 32, dtype=torch.float64)
    results = []
    for mha in (dense, chunked):
        xi = x.clone().requires_grad_(True)
        out = mha(xi, is_causal=is_causal)
        out.square().sum().backward()
        results.append((out, xi.grad, [p.grad for p in mha.parameters()]))
    (out_d, gx_d, gp_d), (out_c, gx_c, gp_c) = results
    torch.testing.assert_close(out_c, out_d, rtol=0, atol=1e-10)
    torch.testing.assert_close(gx_c, gx_d, rtol=0, atol=1e-10)
    for a, b in zip(gp_c, gp_d, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


def test_flex_path_agrees_where_the_device_allows(monkeypatch):
    # torch 2.13 has no FlexAttention backward on the CPU: the forward pass is compared there, run eagerly
    # (the compiled kernel costs seconds per shape family); on CUDA the tests marked cuda compile it.
    from attnlab.attention.backends import flex

    eager = flex.flex_attend
    monkeypatch.setattr(flex, "flex_attend", lambda *a, **kw: eager(*a, **kw, compiled=False))
    dense, flex = _mha("dense"), _mha("flex")
    x = torch.randn(2, 19, 32, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(flex(x, is_causal=True), dense(x, is_causal=True), rtol=0, atol=1e-10)


def test_the_score_term_is_the_float64_formula():
    scheme = Sandwich(2, width=8)
    q = torch.zeros(1, 2, 3, 4, dtype=torch.float64)
    bias = scheme.bias(q, 5, q_offset=2)  # queries at 2..4, keys at 0..4
    for h, i, j in [(0, 0, 0), (1, 2, 4), (1, 0, 4), (0, 1, 0)]:
        distance = j - (2 + i)
        want = sum(torch.cos(torch.tensor(distance * 10000.0 ** (-2 * m / 8), dtype=torch.float64)).item()
                   for m in range(4)) - 4
        assert bias[0, h, i, j].item() == pytest.approx(want / (8 * (h + 1)), abs=1e-12)


@pytest.mark.parametrize("encoding", [Sandwich, lambda sizes: Sandwich(sizes.n_heads, width=16)],
                         ids=["class", "factory"])
def test_every_transformer_model_takes_the_scheme(encoding):
    torch.manual_seed(0)
    tokens = torch.randint(1, 11, (2, 9))
    models = [Transformer(vocab_size=11, d_model=16, n_heads=2, n_layers=1, position=encoding),
              DecoderOnlyTransformer(vocab_size=11, d_model=16, n_heads=2, n_layers=1, position=encoding),
              EncoderOnlyTransformer(vocab_size=11, d_model=16, n_heads=2, n_layers=1, position=encoding)]
    for model in models:
        schemes = [m for m in model.modules() if isinstance(m, Sandwich)]
        assert schemes and all(s.n_heads == 2 for s in schemes), type(model).__name__
        out = model(tokens, tokens) if isinstance(model, Transformer) else model(tokens)
        assert out.shape == (2, 9, 11) and torch.isfinite(out).all()
    squares = squares_transformer(d_model=16, n_heads=2, position=encoding, backend="chunked")  # the lab's Transformer
    assert any(isinstance(m, Sandwich) for m in squares.modules())
    corners = torch.randn(3, 4, 2)
    assert squares(corners).shape == (3, 2, 2)
    # Decoding with a cache gives the full pass's numbers: the base derives the offsets.
    decoder = models[1].eval()
    torch.testing.assert_close(decoder.generate(tokens[:, :4], steps=5),
                               decoder.generate(tokens[:, :4], steps=5, use_cache=False))


def test_a_model_takes_the_backend_and_its_layers_use_it():
    model = DecoderOnlyTransformer(vocab_size=11, d_model=16, n_heads=2, n_layers=2, position=Sandwich,
                                   backend="chunked")
    assert {m.backend for m in model.modules() if isinstance(m, MultiHeadAttention)} == {"chunked"}
    with pytest.raises(ValueError, match="backend.*'fast'"):
        DecoderOnlyTransformer(vocab_size=11, position=Sandwich, backend="fast")


def test_register_randomize_and_name_it_for_another_process():
    register("test-sandwich", Sandwich)
    assert resolve("test-sandwich") is Sandwich and spec_name(Sandwich) == "test-sandwich"
    drawn = attention_position("random-test-sandwich", n_heads=2, head_dim=8, causal=True, max_len=64)
    assert drawn.draws_positions and drawn.sample == "positions" and isinstance(drawn.scheme, Sandwich)
    with pytest.raises(ValueError, match="built-in"):
        register("alibi", Sandwich)
    with pytest.raises(TypeError, match="factory"):
        spec_name(lambda sizes: Sandwich(2))


def test_audit_position_finds_it_relative():
    report = audit_position(Sandwich(2), head_dim=8)
    verdicts = {check.name: check.verdict for check in report.checks}
    assert verdicts["shift_invariant"] == "pass" and verdicts["offsets_consistent"] == "pass", verdicts


@pytest.fixture(scope="module")
def sandwich_package(tmp_path_factory):
    """A tiny package with Sandwich in it and an ``attnlab.schemes`` entry point, installed by pip into a folder."""
    root = tmp_path_factory.mktemp("sandwich_pkg")
    src = root / "src"
    (src / "attnlab_sandwich").mkdir(parents=True)
    header = "import torch\nfrom attnlab.encodings import ModelSizes, PositionScheme\n" \
             "from attnlab.encodings.scheme import bias_dtype, check_heads, check_rel\n\n\n"
    (src / "attnlab_sandwich" / "__init__.py").write_text(header + textwrap.dedent(inspect.getsource(Sandwich)))
    (root / "pyproject.toml").write_text(textwrap.dedent("""
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "attnlab-sandwich"
        version = "0.0.1"
        [project.entry-points."attnlab.schemes"]
        sandwich = "attnlab_sandwich:Sandwich"
        [tool.setuptools.packages.find]
        where = ["src"]
    """))
    target = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(target), str(root)], check=True, capture_output=True, timeout=300)
    return target


@pytest.mark.process
def test_an_installed_package_adds_its_scheme_through_the_entry_point(sandwich_package):
    code = textwrap.dedent("""
        import torch
        from attnlab.encodings import resolve
        from attnlab.models import DecoderOnlyTransformer
        cls = resolve("sandwich")
        model = DecoderOnlyTransformer(vocab_size=7, d_model=8, n_heads=2, n_layers=1, position="sandwich")
        random = DecoderOnlyTransformer(vocab_size=7, d_model=8, n_heads=2, n_layers=1,
                                        position="random-attnlab_sandwich:Sandwich", max_len=32)
        out = model(torch.ones(1, 5, dtype=torch.long))
        print(cls.__module__, cls.__name__, tuple(out.shape), type(random.layers[0].self_attn.position).__name__)
    """)
    env = {**_env(), "PYTHONPATH": f"{sandwich_package}:{_env().get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["attnlab_sandwich", "Sandwich", "(1,", "5,", "7)", "RandomizedPositions"]


def _env():
    import os

    return dict(os.environ)


@pytest.mark.process
def test_compare_runs_it_by_module_and_class_in_workers_and_after_resume(sandwich_package, tmp_path):
    """``attnlab compare --encodings pkg.module:Class --jobs 2``, then ``--resume`` after a model is lost."""
    import json
    import shutil

    out = tmp_path / "cmp"
    env = {**_env(), "PYTHONPATH": f"{sandwich_package}:{_env().get('PYTHONPATH', '')}"}
    flags = ["--encodings", "rotary,attnlab_sandwich:Sandwich", "--seeds", "1", "--epochs", "1", "--n-train", "64",
             "--n-test", "16", "--train-len", "4", "--test-lens", "4,6", "--d-model", "16", "--n-heads", "2",
             "--n-layers", "1", "--backend", "chunked", "--no-progress", "--jobs", "2", "--out", str(out)]
    attnlab = [sys.executable, "-m", "attnlab", "compare"]
    first = subprocess.run(attnlab + flags, capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["encodings"] == ["rotary", "attnlab_sandwich:Sandwich"]
    assert results["config"]["backend"] == "chunked"
    records = [r for r in results["records"] if r["encoding"] == "attnlab_sandwich:Sandwich"]
    assert {r["length"] for r in records} == {4, 6}
    # The lab's figures and report name it as they name a built-in scheme.
    assert "attnlab_sandwich:Sandwich" in (out / "report.html").read_text()
    assert list(out.glob("*.png"))
    # A lost model is trained again on --resume, in a worker that imports the module from the environment.
    (model,) = [p for p in (out / "models").iterdir() if p.name.startswith("attnlab_sandwich")]
    shutil.rmtree(model)
    again = subprocess.run(attnlab + ["--resume", "--out", str(out), "--jobs", "2", "--no-progress"],
                           capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    resumed = json.loads((out / "results.json").read_text())
    assert [r for r in resumed["records"] if r["encoding"] == "attnlab_sandwich:Sandwich"] == records


def test_resume_never_imports_a_scheme_from_inside_the_run_folder(tmp_path, monkeypatch):
    from attnlab.labs.lengths.saved import _check_imports  # (where a comparison folder is read)

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "planted_scheme.py").write_text("raise SystemExit('this code must never run')\n")
    monkeypatch.syspath_prepend(str(folder))  # e.g. `python -m attnlab` started inside the folder
    with pytest.raises(ValueError, match="planted_scheme:Sandwich.*inside the run folder"):
        _check_imports(folder, {"encodings": ["rotary", "planted_scheme:Sandwich"]})
    _check_imports(folder, {"encodings": ["rotary", "attnlab.encodings.alibi:ALiBi"]})  # the environment's: fine


def test_the_readme_section_defines_a_scheme_outside_attnlab():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "## Bring your own position scheme" in readme


# -- a user's scheme or table that is wrong: named, never a deep error or a silent broadcast ----------

MESSAGES = pytest.mark.bad_input("tracebacks and messages")
SILENT = pytest.mark.bad_input("silent wrong results")


class _Faulty(PositionScheme):
    """A score term that says nothing about positions (what a faulty scheme returns is set per class)."""

    adds_score = True

    def bias_at(self, q, *, q_pos, k_pos, k=None):
        return torch.zeros(1, q.shape[1], q.shape[2], k_pos.shape[-1])


class WrongShapeBias(_Faulty):
    def bias_at(self, q, *, q_pos, k_pos, k=None):
        return torch.zeros(3, 5, 7, 2)  # no [B, H, T, S] at all


class TransposedBias(_Faulty):
    def bias_at(self, q, *, q_pos, k_pos, k=None):
        return torch.zeros(1, q.shape[1], k_pos.shape[-1] + 1, q.shape[2])  # [1, H, S + 1, T]


class IntegerBias(_Faulty):
    def bias_at(self, q, *, q_pos, k_pos, k=None):
        return torch.zeros(1, 1, q.shape[2], k_pos.shape[-1], dtype=torch.long)


class RaisingBias(_Faulty):
    def bias_at(self, q, *, q_pos, k_pos, k=None):
        raise RuntimeError("the scheme's own bug")


class IndexingBias(_Faulty):
    def bias_at(self, q, *, q_pos, k_pos, k=None):
        return torch.zeros(2)[q_pos]  # an IndexError deep in the user's code


class NoneRotation(PositionScheme):
    rotates = True

    def rotate_at(self, q, k, *, q_pos, k_pos):
        return None


class OneTensorRotation(PositionScheme):
    rotates = True

    def rotate_at(self, q, k, *, q_pos, k_pos):
        return q


class WrongValue(PositionScheme):
    adds_value = True

    def value_term_at(self, weights, *, q_pos, k_pos):
        return torch.zeros(1, 1, 3, 3)


class RaisingValue(PositionScheme):
    adds_value = True

    def value_term_at(self, weights, *, q_pos, k_pos):
        raise AssertionError


class NoScheme(_Faulty):
    @classmethod
    def for_model(cls, sizes):
        return None


class NotAScheme(_Faulty):
    @classmethod
    def for_model(cls, sizes):
        return torch.nn.Linear(2, 2)


class DistanceWithoutTerm(_Faulty):
    by_distance = True  # a term per distance, it says, for the chunked path's table

    def bias_at(self, q, *, q_pos, k_pos, k=None):
        return None


@MESSAGES
@pytest.mark.parametrize("backend", ["dense", "chunked"])
@pytest.mark.parametrize(("scheme", "error", "said"), [
    (WrongShapeBias, ValueError, r"bias_at must return None or a floating tensor broadcastable to \[B, H, T, S\] = "
                                 r"\[2, 2, 6, 6\].*got shape \[3, 5, 7, 2\]"),
    (TransposedBias, ValueError, r"bias_at must return .*\[B, H, T, S\].*got shape \[1, 2, 7, 6\]"),
    (IntegerBias, TypeError, r"bias_at must return None or a floating tensor.*got dtype torch.int64"),
    (RaisingBias, ValueError, r"its bias_at raised RuntimeError: the scheme's own bug"),
    (IndexingBias, ValueError, r"its bias_at raised IndexError"),
    (NoneRotation, TypeError, r"rotate_at must return \(q, k\) of the shapes it was given, \[2, 2, 6, 8\] and "
                              r"\[2, 2, 6, 8\].*got NoneType"),
    (OneTensorRotation, TypeError, r"rotate_at must return \(q, k\).*got Tensor"),
    (WrongValue, ValueError, r"value_term_at must return None or a floating tensor broadcastable to "
                             r"\[B, H, T, Dv\] = \[2, 2, 6, 8\].*got shape \[1, 1, 3, 3\]"),
    (RaisingValue, ValueError, r"its value_term_at raised AssertionError"),
    (NoScheme, TypeError, r"for_model\(sizes\) must return an attnlab.encodings.PositionScheme.*got NoneType"),
    (NotAScheme, TypeError, r"for_model\(sizes\) must return an attnlab.encodings.PositionScheme.*got Linear"),
    (DistanceWithoutTerm, TypeError, r"declares by_distance = True but its bias_at returned None"),
])
def test_a_faulty_scheme_is_named_with_what_was_expected(scheme, error, said, backend):
    if scheme is DistanceWithoutTerm and backend == "dense":
        pytest.skip("the dense path reads the term itself (None: no term); the per-distance table is chunked's")
    with pytest.raises(error, match=f"position scheme {scheme.__name__}: .*{said}"):
        model = DecoderOnlyTransformer(vocab_size=13, d_model=16, n_heads=2, n_layers=1, position=scheme,
                                       backend=backend)  # for_model is called here
        model(torch.randint(0, 13, (2, 6)))


@SILENT
@pytest.mark.parametrize("turned", [
    lambda q, k: (q[..., :1, :], k),  # one query left: attention broadcast it to every row
    lambda q, k: (q, k[:, :1]),  # one key head: broadcast to every head
    lambda q, k: (q[..., :4], k[..., :4]),  # half the head width: scores from half the features
    lambda q, k: (k, q[:, :, :3]),  # fewer keys than given
])
def test_a_rotation_of_another_shape_is_refused_not_broadcast(turned):
    class Reshaping(PositionScheme):
        rotates = True

        def rotate_at(self, q, k, *, q_pos, k_pos):
            return turned(q, k)

    mha = MultiHeadAttention(2, 16, position=Reshaping())
    with pytest.raises(ValueError, match=r"position scheme Reshaping: rotate_at must return \(q, k\) of the shapes "
                                         r"it was given, \[1, 2, 5, 8\] and \[1, 2, 5, 8\]"):
        mha(torch.randn(1, 5, 16))


@MESSAGES
@pytest.mark.parametrize("per_row", [False, True])
def test_a_randomized_faulty_scheme_names_the_scheme_it_wraps(per_row):
    from attnlab.encodings import RandomizedPositions

    mha = MultiHeadAttention(2, 16, position=RandomizedPositions(WrongShapeBias(), max_len=32))
    ids = {"position_ids": torch.tensor([[0, 1, 2, 3, 4]])} if per_row else {}
    with pytest.raises(ValueError, match=r"position scheme WrongShapeBias: bias_at must return .*\[3, 5, 7, 2\]"):
        mha(torch.randn(1, 5, 16), **ids)


class ShortTable(torch.nn.Module):
    """An input table whose forward drops every position but the first (the issue's example)."""

    def __init__(self, d_model):
        super().__init__()
        self.d_model = d_model

    @classmethod
    def for_model(cls, sizes):
        return cls(sizes.d_model)

    def forward(self, h, *, offset=0, position_ids=None):
        return h[:, :1] + 0


class RowsOnlyTable(ShortTable):
    def forward(self, h, *, offset=0, position_ids=None):
        return torch.zeros(1, h.shape[1], h.shape[2])  # its rows, not added to h


class WiderTable(ShortTable):
    def forward(self, h, *, offset=0, position_ids=None):
        return torch.cat([h, h[..., :1]], dim=-1)


class NothingTable(ShortTable):
    def forward(self, h, *, offset=0, position_ids=None):
        return None


class IntegerTable(ShortTable):
    def forward(self, h, *, offset=0, position_ids=None):
        return h.long()


@SILENT
@pytest.mark.parametrize("model_class", [DecoderOnlyTransformer, EncoderOnlyTransformer, Transformer])
@pytest.mark.parametrize(("table", "error", "got"), [
    (ShortTable, ValueError, r"got shape \[2, 1, 16\]"),
    (RowsOnlyTable, ValueError, r"got shape \[1, 6, 16\]"),
    (WiderTable, ValueError, r"got shape \[2, 6, 17\]"),
    (NothingTable, TypeError, r"got NoneType"),
    (IntegerTable, TypeError, r"got dtype torch.int64"),
])
def test_an_input_table_of_another_shape_is_named_not_broadcast(model_class, table, error, got):
    model = model_class(vocab_size=13, d_model=16, n_heads=2, n_layers=1, position=table)
    x = torch.randint(1, 13, (2, 6))
    with pytest.raises(error, match=rf"input table {table.__name__}: forward\(h\) must return h with its positions "
                                    rf"added, a tensor \[B, L, D\] = \[2, 6, 16\] \(the shape of h\), {got}"):
        model(x, x) if model_class is Transformer else model(x)


def _faulty_module(tmp_path, monkeypatch):
    """A module of faulty schemes and tables, importable as ``faulty_schemes`` (this file's classes)."""
    source = textwrap.dedent(f"""
        import torch
        from attnlab.encodings import PositionScheme
        {textwrap.indent(inspect.getsource(_Faulty), ' ' * 8).strip()}
        {textwrap.indent(inspect.getsource(WrongShapeBias), ' ' * 8).strip()}
        {textwrap.indent(inspect.getsource(RaisingBias), ' ' * 8).strip()}
        {textwrap.indent(inspect.getsource(ShortTable), ' ' * 8).strip()}

        class NaNBias(_Faulty):
            def bias_at(self, q, *, q_pos, k_pos, k=None):
                return torch.full((1, 1, q.shape[2], k_pos.shape[-1]), float("nan"))

        class InfTable(ShortTable):
            def forward(self, h, *, offset=0, position_ids=None):
                return h + float("inf")

        class RaisesInEvaluation(_Faulty):
            def bias_at(self, q, *, q_pos, k_pos, k=None):
                if not self.training:  # the model in evaluation mode: scoring the test sets
                    raise RuntimeError("only when evaluated")
                return None
    """)
    (tmp_path / "faulty_schemes.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


_COMPARE = ["--seeds", "1", "--epochs", "1", "--n-train", "64", "--n-test", "16", "--train-len", "4",
            "--test-lens", "4,6", "--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--no-progress"]


@MESSAGES
@pytest.mark.parametrize(("encoding", "said"), [
    ("faulty_schemes:ShortTable", r"input table ShortTable: forward\(h\) must return h with its positions added"),
    ("faulty_schemes:WrongShapeBias", r"position scheme WrongShapeBias: bias_at must return"),
    ("faulty_schemes:RaisingBias", r"position scheme RaisingBias: its bias_at raised RuntimeError"),
    ("faulty_schemes:NaNBias", r"encoding 'faulty_schemes:NaNBias': the loss is nan on the first batch with the "
                               r"model's initial weights, before any step, so the learning rate is not the cause: "
                               r"layers\.0\.self_attn's position scheme NaNBias gives non-finite values"),
    ("faulty_schemes:InfTable", r"the learning rate is not the cause: its input table InfTable gives non-finite"),
])
def test_the_command_line_names_the_faulty_scheme_or_table_not_a_flag(capsys, tmp_path, monkeypatch, encoding, said):
    from cli_helpers import cli

    _faulty_module(tmp_path, monkeypatch)
    out = tmp_path / "cmp"
    code, stdout, err = cli(capsys, "compare", "--encodings", encoding, *_COMPARE, "--out", str(out))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and re.search(said, lines[0]), err
    assert "--batch-size" not in err and "Traceback" not in err and stdout == ""
    assert not out.exists()  # refused by the first step's check, before the folder is claimed


@MESSAGES
@pytest.mark.process
def test_a_worker_reports_a_faulty_scheme_as_one_line_naming_it(tmp_path, monkeypatch):
    """``compare --jobs 2``: a scheme that fails only when evaluated, in a worker, is one line naming it."""
    import os

    folder = _faulty_module(tmp_path, monkeypatch)
    env = {**os.environ, "PYTHONPATH": f"{folder}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-m", "attnlab", "compare", "--encodings",
                           "alibi,faulty_schemes:RaisesInEvaluation", "--jobs", "2", *_COMPARE,
                           "--out", str(tmp_path / "cmp")], capture_output=True, text=True, env=env, timeout=600,
                          cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert lines[-1] == ("attnlab compare: error: position scheme RaisesInEvaluation: its bias_at raised "
                         "RuntimeError: only when evaluated"), proc.stderr
    assert "Traceback" not in proc.stderr


@MESSAGES
@pytest.mark.parametrize(("encoding", "said"), [
    ("faulty_schemes:NaNBias", r"encoder_layers\.0\.self_attn's position scheme NaNBias gives non-finite values"),
    ("faulty_schemes:InfTable", r"its input table InfTable gives non-finite values"),
    ("faulty_schemes:WrongShapeBias", r"position scheme WrongShapeBias: bias_at must return"),
])
def test_train_refuses_a_first_step_that_is_not_finite_before_the_folder(capsys, tmp_path, monkeypatch, encoding,
                                                                         said):
    from cli_helpers import cli

    _faulty_module(tmp_path, monkeypatch)
    out = tmp_path / "run"
    code, stdout, err = cli(capsys, "train", "--model", "transformer", "--encoding", encoding, "--epochs", "1",
                            "--no-progress", "--out", str(out))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and re.search(said, lines[0]), err
    assert "lower the learning rate" not in err and stdout == ""
    assert not out.exists()


# -- register: a name the command line can take, and a replace that is a bool ---------------------------------
# `register("mine\n", cls)` was accepted (the name pattern's "$" matches before a final newline) and
# `register(..., replace="no")` replaced: any truthy value did.


@pytest.fixture
def registry(monkeypatch):
    """The registry with no user scheme in it, restored after the test."""
    from attnlab.encodings import registry as module

    monkeypatch.setattr(module, "_registered", {})
    return module


@pytest.mark.bad_input("silent wrong results")
@pytest.mark.parametrize("name", ["mine\n", "mine\r\n", "\nmine", "mi ne", " mine", "mine\t", "mi\x00ne", "",
                                  "mod:Class", "all", "Mine", "mïne", "-mine", "random-mine"])
def test_register_refuses_a_name_no_command_line_takes(registry, name):
    with pytest.raises(ValueError, match=r"^name must be lower-case letters, digits, '-' and '_'.*got " +
                       re.escape(repr(name)) + "$"):
        register(name, Sandwich)
    assert registry._registered == {}  # nothing was registered, under the name or any other


@pytest.mark.bad_input("silent wrong results")
@pytest.mark.parametrize("name", [3, None, b"mine", ("mine",)])
def test_register_refuses_a_name_that_is_not_a_string(registry, name):
    with pytest.raises(TypeError, match=r"^name must be a string, got " + re.escape(repr(name))):
        register(name, Sandwich)


class _OtherSandwich(Sandwich):
    pass


@pytest.mark.bad_input("silent wrong results")
@pytest.mark.parametrize("replace", ["no", "False", 1, 0, None, [True]])
def test_register_takes_replace_as_a_bool_only(registry, replace):
    register("test-sandwich", Sandwich)
    with pytest.raises(TypeError, match=r"^replace must be True or False, got " + re.escape(repr(replace))):
        register("test-sandwich", _OtherSandwich, replace=replace)
    assert resolve("test-sandwich") is Sandwich  # not replaced
    register("test-sandwich", _OtherSandwich, replace=True)
    assert resolve("test-sandwich") is _OtherSandwich


@pytest.mark.bad_input("silent wrong results")
def test_a_module_class_path_with_a_trailing_newline_is_not_imported():
    with pytest.raises(ValueError, match=r"unknown encoding 'attnlab.encodings.alibi:ALiBi\\n'"):
        resolve("attnlab.encodings.alibi:ALiBi\n")
