"""torch.compile and torch.export of the models, as a GPU user runs them: one graph, every size, eager's numbers.

``torch.compile(model, fullgraph=True, dynamic=True)`` refuses a graph break (a value read back from a
tensor: the vocabulary check, a branch on whether a row is empty) with an error, and
``error_on_recompile`` refuses a second graph for another batch size or length (a size specialised by a
guard, or duck-sized to a constant's). Both live in dynamo, so the cheap ``"eager"`` backend finds them
for every scheme, each in one architecture (a trace costs seconds: the decoder-only and encoder-only
models in turn, the causal-only schemes in the decoder-only; the encoder-decoder adds no scheme code of
its own, only cross-attention, and is compiled through aot_autograd and exported); inductor compiles
the decoder-only rotary model, which it once failed on after dynamic-shape recompiles. The compiled
model is always compared with its eager twin (the same weights, the same random draws): compiling must
not change a number.

The sizes: tiny models (``d_model`` 16, one layer), and first calls whose sizes equal a constant's
(batch 2 = the heads of ALiBi's slopes, length 4 = rotary's speeds ``Dh / 2``), which is where duck
sizing ties a dynamic size to a constant's and the next batch recompiles. Lengths stay >= 3: a
randomized scheme's ``L - 1`` drawn distances would otherwise be one, which torch specialises.
"""

from __future__ import annotations

import copy
import shutil

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch.export import Dim, export

from attnlab.catalog import CAUSAL_ONLY, ENCODINGS
from attnlab.encodings.positions import positions_from_mask
from attnlab.labs.squares.models import squares_model
from attnlab.models import DecoderOnlyTransformer, EncoderOnlyTransformer, Transformer

V = 11  # vocabulary: ids 1 .. 10, 0 is padding
SIZES = ((2, 4), (3, 7), (5, 3))  # (batch, length): the first sizes equal the constants' (module docstring)
ARCHITECTURES = {"decoder-only": DecoderOnlyTransformer, "encoder-only": EncoderOnlyTransformer,
                 "encoder-decoder": Transformer}


def _architecture(i: int, name: str) -> str:
    """Every scheme in one architecture (module docstring): in turn, the causal-only ones in the decoder-only."""
    return "decoder-only" if name in CAUSAL_ONLY or i % 2 else "encoder-only"


SCHEMES = [pytest.param(_architecture(i, name), name, id=f"{_architecture(i, name)}-{name}")
           for i, name in enumerate(ENCODINGS)]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test compiles from nothing: no graph of another test is reused, or counted as a recompile."""
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def _graphs() -> int:
    """The graphs dynamo has made since the test began (a restarted analysis counts once)."""
    return counters["stats"]["unique_graphs"]


def _model(architecture: str, position: str, n_layers: int = 1) -> torch.nn.Module:
    torch.manual_seed(0)
    return ARCHITECTURES[architecture](vocab_size=V, d_model=16, n_heads=2, n_layers=n_layers, ff_units=32,
                                       position=position, max_len=64)


def _batch(model: torch.nn.Module, B: int, L: int, seed: int,
           left_padded: bool = False) -> tuple[tuple[torch.Tensor, ...], dict, torch.Tensor]:
    """``(args, kwargs, labels)`` of one call: tokens, the target for the encoder-decoder, the task's positions.

    ``left_padded``: a decoder-only batch whose rows start with 0 to 2 padding elements, masked and
    placed by ``position_ids`` counted over the real ones (as ``generate`` places a padded prompt).
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(1, V, (B, L), generator=g)
    target = torch.randint(1, V, (B, L + 1), generator=g)
    encoder_decoder = isinstance(model, Transformer)
    args = (x, target) if encoder_decoder else (x,)
    kwargs = {}
    if model.task_positions is not None:  # Abacus, coupling: digit indices, some repeated
        ids = torch.arange(L) % 3 + torch.arange(B)[:, None]  # [B, L]
        kwargs = {"source_position_ids" if encoder_decoder else "position_ids": ids}
    if left_padded:
        mask = torch.arange(L) >= torch.arange(B)[:, None] % 3  # [B, L]: row b starts with b % 3 padding elements
        kwargs = {"mask": mask, "position_ids": positions_from_mask(mask)}
    return args, kwargs, target if encoder_decoder else x


def _step(model, call, optimizer, args, kwargs, labels, seed: int) -> torch.Tensor:
    """One training step (the same random draws for both twins); the loss."""
    torch.manual_seed(seed)
    optimizer.zero_grad()
    out = call(*args, **kwargs)
    loss = F.cross_entropy(out.flatten(0, 1), labels.flatten())
    loss.backward()
    optimizer.step()
    return loss.detach()


def _train_side_by_side(model, backend: str, *, rtol: float = 1e-5, atol: float = 1e-6,
                        left_padded: bool = False) -> int:
    """Train ``model`` compiled and its eager twin through :data:`SIZES`; the number of graphs compiled."""
    eager = copy.deepcopy(model).train()
    model.train()
    compiled = torch.compile(model, backend=backend, fullgraph=True, dynamic=True)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, model)]
    with torch._dynamo.config.patch(error_on_recompile=True):
        for seed, (B, L) in enumerate(SIZES):
            args, kwargs, labels = _batch(model, B, L, seed, left_padded)
            expected = _step(eager, eager, optimizers[0], args, kwargs, labels, seed)
            got = _step(model, compiled, optimizers[1], args, kwargs, labels, seed)
            torch.testing.assert_close(got, expected, rtol=rtol, atol=atol)
            for (name, want), have in zip(eager.named_parameters(), model.parameters(), strict=True):
                torch.testing.assert_close(have, want, rtol=rtol, atol=atol, msg=lambda m, n=name: f"{n}: {m}")
    return _graphs()


@pytest.mark.slow
@pytest.mark.parametrize(("architecture", "name"), SCHEMES)
def test_every_scheme_trains_compiled_in_one_graph_for_every_size(architecture, name):
    # fullgraph: any graph break raises; error_on_recompile: a second graph for new sizes raises.
    assert _train_side_by_side(_model(architecture, name), "eager") == 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["t5", "random-alibi"])
def test_left_padded_rows_at_their_own_positions_compile_too(name):
    # Per-row positions: T5's buckets per row; the randomized draw as long as the largest id, a size from the data.
    assert _train_side_by_side(_model("decoder-only", name), "eager", left_padded=True) == 1


@pytest.mark.slow
@pytest.mark.process  # inductor compiles C++ with the system's compiler
@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="inductor needs a C++ compiler")
def test_inductor_compiles_the_rotary_decoder_for_every_size():
    # Forward and backward compiled (aot_autograd's joint graph), each size through them.
    assert _train_side_by_side(_model("decoder-only", "rotary"), "inductor", rtol=1e-4, atol=1e-5) == 1


EXPORTED = [("decoder-only", "rotary"), ("encoder-only", "alibi"), ("encoder-decoder", "t5")]


@pytest.mark.parametrize(("architecture", "name"), EXPORTED)
def test_export_with_dynamic_batch_and_length_gives_eager_numbers(architecture, name):
    model = _model(architecture, name).eval()
    batch, length = Dim("batch", min=2, max=64), Dim("length", min=3, max=64)
    args, _, _ = _batch(model, 2, 4, 0)
    shapes: tuple[dict, ...] = ({0: batch, 1: length},)
    if architecture == "encoder-decoder":
        shapes += ({0: batch, 1: Dim("target", min=3, max=64)},)
    program = export(model, args, dynamic_shapes=shapes).module()
    with torch.no_grad():
        for seed, (B, L) in enumerate(SIZES[1:], start=1):
            args, _, _ = _batch(model, B, L, seed)
            torch.testing.assert_close(program(*args), model(*args))
        # The vocabulary check is in the program: ids past it are refused, not read out of bounds.
        bad = (torch.full_like(args[0], V),) + args[1:]
        with pytest.raises(RuntimeError, match="outside the vocabulary"):
            program(*bad)


def test_the_vocabulary_check_stays_a_value_error_in_eager_and_raises_compiled():
    model = _model("decoder-only", "alibi").eval()
    bad = torch.tensor([[1, 2, V]])
    with pytest.raises(ValueError, match=f"holds ids from 1 to {V}"):
        model(bad)
    compiled = torch.compile(model, backend="eager", fullgraph=True, dynamic=True)
    with pytest.raises(RuntimeError, match="outside the vocabulary"):
        compiled(torch.tensor([[1, 2, 3], [4, 5, V]]))


def test_cached_generation_compiles_one_graph_for_the_prompt_and_one_for_the_steps():
    model = _model("decoder-only", "rotary", n_layers=2).eval()
    prompt = torch.randint(1, V, (3, 5), generator=torch.Generator().manual_seed(0))
    expected = model.generate(prompt, steps=6)
    model.compile(backend="eager", fullgraph=True, dynamic=True)  # generate() calls the compiled model
    assert torch.equal(model.generate(prompt, steps=6), expected)
    assert _graphs() == 2  # the prompt (no layer's cache yet), then every step: the cache's length is no guard


@pytest.mark.slow
@pytest.mark.parametrize(("name", "backend"), [("selfattn-pe", "eager"), ("transformer", "aot_eager")])
def test_the_squares_attention_models_compile_for_training_and_prediction(name, backend):
    # The transformer is attnlab's encoder-decoder: aot_eager traces its backward too, as inductor does
    # (cross-attention, the decoder's causal self-attention).
    torch.manual_seed(0)
    model = squares_model(name)
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend=backend, fullgraph=True, dynamic=True)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for B in (3, 5, 7):
            X = torch.randn(B, 4, 2, generator=torch.Generator().manual_seed(B))
            for twin, call in ((eager, eager), (model, compiled)):
                twin.train().zero_grad()
                ((call(X) - X[:, 2:]) ** 2).mean().backward()
            for want, have in zip(eager.parameters(), model.parameters(), strict=True):
                torch.testing.assert_close(have.grad, want.grad)
    assert _graphs() == 1
    # Prediction is another graph (greedy decoding from the first two corners), with no backward to trace.
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="eager", fullgraph=True, dynamic=True)
    with torch.no_grad(), torch._dynamo.config.patch(error_on_recompile=True):
        for B in (3, 5, 7):
            X = torch.randn(B, 2, 2, generator=torch.Generator().manual_seed(B))
            torch.testing.assert_close(compiled.eval()(X), eager.eval()(X))
    assert _graphs() == 2
