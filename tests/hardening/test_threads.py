"""Concurrent calls on one model (issue 13, class 3): every public predict and generate path, from two threads.

Two threads share one model and call the same entry point 200 times each, started
together by a barrier, on different inputs (3 and 5 rows, so that a batch mixed
up between the calls shows). Every output is compared bit for bit (``torch.equal``)
with the result of the same call made sequentially first. Per-call state (hidden
states, projected keys, key/value caches, recorded weights, the train/eval flag,
torch's random stream) must stay in the call. ``pytest -m bad_input -q`` counts
the cases that failed before the fix under "threads"; the ones that already passed
are kept unmarked, as regression tests.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from attnlab.attention import DecodingCache, collect_attention, record_attention
from attnlab.labs.squares.models import SQUARES_MODELS, squares_model
from attnlab.labs.squares.train import predict_corners
from attnlab.models import DecoderOnlyTransformer, Transformer
from attnlab.training import Trainer

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one intra-op thread each

CALLS = 120  # per thread (200 before; the suite must stay under 5 minutes)
THREADS = "threads"


# -- the harness -----------------------------------------------------------------------------


def same(a: Any, b: Any) -> bool:
    """Bitwise equality of outputs: tensors, arrays, and dicts / tuples of them."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(map(same, a, b))
    return bool(a == b)


def run_two_threads(call: Callable[[Any], Any], inputs: tuple[Any, Any], calls: int = CALLS) -> list[list[Any]]:
    """``call(inputs[i])`` ``calls`` times in thread ``i``, both started by one barrier; every result, by thread."""
    barrier = threading.Barrier(2)
    results: list[list[Any]] = [[], []]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            barrier.wait()
            for _ in range(calls):
                results[i].append(call(inputs[i]))
        except BaseException as exc:  # reported in the main thread
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise AssertionError(f"a thread raised {type(errors[0]).__name__}: {errors[0]}") from errors[0]
    return results


def assert_no_mismatch(call: Callable[[Any], Any], inputs: tuple[Any, Any], calls: int = CALLS) -> None:
    """Sequential results first, then two threads: zero mismatches."""
    expected = [call(x) for x in inputs]
    assert same(call(inputs[0]), expected[0])  # deterministic when alone
    results = run_two_threads(call, inputs, calls)
    mismatches = [sum(not same(r, expected[i]) for r in results[i]) for i in (0, 1)]
    assert mismatches == [0, 0], f"mismatches per thread, of {calls} calls each: {mismatches}"


# -- models and inputs -----------------------------------------------------------------------


def squares(seed: int = 0) -> dict[str, nn.Module]:
    """The four squares models, built with their default sizes, in eval mode."""
    models = {}
    for i, name in enumerate(SQUARES_MODELS):
        torch.manual_seed(seed + i)
        models[name] = squares_model(name).eval()
    return models


g = torch.Generator().manual_seed(13)
POINTS = (torch.randn(3, 2, 2, generator=g), torch.randn(5, 2, 2, generator=g))  # first two corners [B, 2, 2]
VOCAB = 11
TOKENS = (torch.randint(3, VOCAB, (3, 4), generator=g), torch.randint(3, VOCAB, (5, 6), generator=g))
STEPS = 2
with torch.random.fork_rng(devices=[]):  # seeded weights, without moving the global stream at collection
    MODELS = squares()
    torch.manual_seed(5)
    ENC_DEC = Transformer(vocab_size=VOCAB, d_model=8, n_heads=2, n_layers=1, ff_units=16, position="rotary").eval()
    torch.manual_seed(6)
    DEC_ONLY = DecoderOnlyTransformer(vocab_size=VOCAB, d_model=8, n_heads=2, n_layers=1, ff_units=16,
                                      position="alibi").eval()


def _attention_weights(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """attention_figures' weights path: one run of the model on ``x``, recorded, by layer."""
    try:
        from attnlab.labs.squares.figures import attention_weights
    except ImportError:  # before the fix: attention_figures' own lines
        from attnlab.training.rng import preserved_rng

        with preserved_rng({}), torch.no_grad(), record_attention():
            model(x)
        return collect_attention(model)
    return attention_weights(model, x)


def _recorded(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """A prediction under record_attention(), and the weights collect_attention gives in the same block."""
    with torch.no_grad(), record_attention():
        out = model(x)
        return out, collect_attention(model)


def _trainer(model: nn.Module) -> Trainer:
    return Trainer(model, nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1), progress=False)


# (case, the call, the inputs), every model kind on every path
CASES: list[tuple[str, Callable[[Any], Any], tuple[Any, Any]]] = []
TRAINERS = {name: _trainer(model) for name, model in MODELS.items()}
for _name, _model in MODELS.items():
    CASES.append((f"{_name}: predict_corners", lambda x, m=_model: predict_corners(m, x), POINTS))
    CASES.append((f"{_name}: Trainer.predict", lambda x, t=TRAINERS[_name]: t.predict(x), POINTS))
    CASES.append((f"{_name}: record_attention + collect_attention", lambda x, m=_model: _recorded(m, x), POINTS))
    if _name == "gru":
        CASES.append((f"{_name}: model.predict", lambda x, m=_model: m.predict(x), POINTS))
    else:
        CASES.append((f"{_name}: attention_figures' weights", lambda x, m=_model: _attention_weights(m, x), POINTS))
        if _name == "gru-attn":
            CASES.append((f"{_name}: model.predict", lambda x, m=_model: m.predict(x), POINTS))
    if _name in ("selfattn-pe", "transformer"):
        for _cache in (True, False):
            CASES.append((f"{_name}: model.predict(use_cache={_cache})",
                          lambda x, m=_model, c=_cache: m.predict(x, use_cache=c), POINTS))
for _cache in (True, False):
    CASES.append((f"Transformer.generate(use_cache={_cache})",
                  lambda x, c=_cache: ENC_DEC.generate(x, STEPS, start=1, use_cache=c), TOKENS))
    CASES.append((f"DecoderOnlyTransformer.generate(use_cache={_cache})",
                  lambda x, c=_cache: DEC_ONLY.generate(x, STEPS, use_cache=c), TOKENS))

# The cases that were already right before the fix: kept as regression tests, not counted as findings.
ALREADY_RIGHT = {
    "Transformer.generate(use_cache=True)", "Transformer.generate(use_cache=False)",
    "DecoderOnlyTransformer.generate(use_cache=True)", "DecoderOnlyTransformer.generate(use_cache=False)",
    "transformer: predict_corners", "transformer: Trainer.predict", "transformer: model.predict(use_cache=True)",
    "transformer: model.predict(use_cache=False)", "selfattn-pe: model.predict(use_cache=True)",
    "selfattn-pe: predict_corners", "selfattn-pe: Trainer.predict",
}


# The forward pass (Trainer.predict, and model(x) under recording) of the attention lab's GRU models draws
# their teacher-forcing coin in eval mode too, as the lab does; every other path draws nothing.
DRAWS = {f"{name}: {path}" for name in ("gru", "gru-attn")
         for path in ("Trainer.predict", "record_attention + collect_attention")}


def _params():
    for case, call, inputs in CASES:
        marks = () if case in ALREADY_RIGHT else (pytest.mark.bad_input(THREADS),)
        yield pytest.param(call, inputs, case not in DRAWS, id=case, marks=marks)


@pytest.mark.parametrize(("call", "inputs", "draws_nothing"), list(_params()))
def test_two_threads_on_one_model_get_the_sequential_results(call, inputs, draws_nothing):
    before = torch.get_rng_state()
    assert_no_mismatch(call, inputs)
    if draws_nothing:  # the caller's global torch stream is as it was: nothing drawn, nothing restored
        assert torch.equal(torch.get_rng_state(), before)


def test_every_model_kind_and_path_is_tried():
    kinds = {case.split(":")[0] for case, _, _ in CASES}
    assert set(SQUARES_MODELS) <= kinds
    assert {"Transformer.generate(use_cache=True)", "DecoderOnlyTransformer.generate(use_cache=False)"} <= kinds


# -- further cases ---------------------------------------------------------------------------


@pytest.mark.bad_input(THREADS)
@pytest.mark.parametrize("name", SQUARES_MODELS)
def test_a_model_left_in_train_mode_predicts_in_eval_mode_in_both_threads_and_stays_in_train_mode(name):
    # Each call used to switch the model to eval and back: one thread's "back to train"
    # landed in the middle of the other's prediction (a teacher-forced or training forward).
    model = squares(seed=40)[name].train()
    trainer = _trainer(model)
    assert_no_mismatch(lambda x: predict_corners(model, x), POINTS, calls=50)
    assert_no_mismatch(lambda x: torch.as_tensor(trainer.predict(x)), POINTS, calls=50)
    assert all(m.training for m in model.modules())


@pytest.mark.bad_input(THREADS)
@pytest.mark.parametrize("name", ["selfattn-pe", "gru-attn", "transformer"])
def test_a_recording_thread_keeps_its_weights_while_another_thread_predicts_unrecorded(name):
    # An unrecorded call used to clear the modules' stored weights under the recording thread's feet.
    model = MODELS[name]
    expected = _recorded(model, POINTS[0])

    def call(i: int) -> Any:
        if i == 0:
            return _recorded(model, POINTS[0])
        return predict_corners(model, POINTS[1])

    results = run_two_threads(call, (0, 1), calls=50)
    assert sum(not same(r, expected) for r in results[0]) == 0


@pytest.mark.bad_input(THREADS)
def test_the_labs_stateful_calls_in_one_thread_leave_the_other_threads_predictions_alone():
    # The labs' encode/decode (init_keys) in one thread; predict in the other: predict keeps its keys in the call.
    model = MODELS["selfattn-pe"]
    source, other = POINTS[1], POINTS[0]
    expected = model.predict(source, use_cache=False)

    def call(i: int) -> Any:
        with torch.no_grad():
            if i == 0:
                return model.predict(source, use_cache=False)
            model.encode(other)  # the labs' stateful use: the decoder keeps these keys
            return model.decode(other[:, -1:])

    results = run_two_threads(call, (0, 1), calls=50)
    assert sum(not same(r, expected) for r in results[0]) == 0


@pytest.mark.bad_input(THREADS)
def test_the_gru_labs_forward_in_one_thread_leaves_the_other_threads_predictions_alone():
    model = MODELS["gru-attn"]
    expected = predict_corners(model, POINTS[0])

    def call(i: int) -> Any:
        if i == 0:
            return predict_corners(model, POINTS[0])
        with torch.no_grad():
            return model(POINTS[1])  # the labs' forward: keeps outputs, alphas, hidden states on the modules

    results = run_two_threads(call, (0, 1), calls=50)
    assert sum(not same(r, expected) for r in results[0]) == 0


def test_each_thread_decoding_with_its_own_cache_gets_the_sequential_tokens():
    # The caches belong to the call (attnlab.attention.DecodingCache): already right, kept as a regression test.
    def decode(prompt: torch.Tensor) -> torch.Tensor:
        cache, step, out = DecodingCache(), prompt, []
        with torch.no_grad():
            for _ in range(4):
                step = DEC_ONLY(step, cache=cache)[:, -1:].argmax(-1)  # [B, 1]
                cache.advance(prompt.shape[1] if not out else 1)
                out.append(step)
        return torch.cat(out, dim=1)

    assert_no_mismatch(decode, TOKENS, calls=50)


def _figure_data(fig: Any) -> list[Any]:
    """What a figure shows: every axes' texts, tick labels and drawn points, in order."""
    data = []
    for ax in fig.axes:
        data.append([t.get_text() for t in ax.texts])
        data.append([t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()])
        data.append([np.asarray(c.get_offsets()).round(6).tolist() for c in ax.collections])
        data.append([np.asarray(c.get_array()).round(6).tolist() for c in ax.collections
                     if c.get_array() is not None])
    return data


@pytest.mark.bad_input(THREADS)
def test_plot_attention_and_sequence_pred_from_two_threads_draw_the_sequential_figures():
    # The GRU with attention: plot_attention read the model's alphas after the run, the last caller's.
    from attnlab.compat.chapter9 import plot_attention, sequence_pred

    model = MODELS["gru-attn"]
    layer = "decoder.attn"
    full = (torch.cat([POINTS[0][:1]] * 2, dim=1), torch.cat([POINTS[1][:2]] * 2, dim=1))  # [1 | 2, 4, 2]

    def draw(x: torch.Tensor) -> list[Any]:
        return _figure_data(plot_attention(model, x[:, :2], layer=layer)) + _figure_data(
            sequence_pred(model, x, n_rows=1, n_cols=5))

    before = torch.get_rng_state()
    assert_no_mismatch(draw, full, calls=3)
    assert torch.equal(torch.get_rng_state(), before)
