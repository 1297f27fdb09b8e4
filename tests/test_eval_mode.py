"""attnlab._eval_mode: the one place a model's train/eval mode is held and given back."""

import threading

import pytest
from torch import nn

from attnlab._eval_mode import evaluating, preserved_modes


def _model() -> nn.Sequential:
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2), nn.Dropout(0.5))
    model.train()
    model[1].eval()  # a submodule the caller froze on purpose
    return model


def _flags(model: nn.Module) -> list[bool]:
    return [m.training for m in model.modules()]


def test_preserved_modes_gives_every_module_its_own_flag_back():
    model = _model()
    before = _flags(model)
    with preserved_modes(model):
        model.train()  # would unfreeze the BatchNorm for good without the context
        assert all(_flags(model))
    assert _flags(model) == before == [True, True, False, True]


def test_preserved_modes_restores_after_an_exception():
    model = _model()
    with pytest.raises(RuntimeError, match="boom"), preserved_modes(model):
        model.eval()
        raise RuntimeError("boom")
    assert _flags(model) == [True, True, False, True]


def test_evaluating_holds_eval_mode_until_the_last_holder_leaves():
    model = _model()
    with evaluating(model) as held:
        assert held is model and not any(_flags(model))
        with evaluating(model):
            assert not any(_flags(model))
        assert not any(_flags(model))  # the inner call left, the outer one still holds it
    assert _flags(model) == [True, True, False, True]


def test_evaluating_from_two_threads_keeps_eval_mode_for_both():
    model = _model()
    inside, release = threading.Barrier(2), threading.Event()
    seen: list[list[bool]] = []

    def first() -> None:
        with evaluating(model):
            inside.wait()
            release.wait()
            seen.append(_flags(model))  # the other thread has left by now

    thread = threading.Thread(target=first)
    thread.start()
    with evaluating(model):
        inside.wait()
    release.set()
    thread.join()
    assert seen == [[False, False, False, False]]
    assert _flags(model) == [True, True, False, True]


@pytest.mark.parametrize("helper", [evaluating, preserved_modes])
def test_a_non_module_names_the_argument(helper):
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got function"), helper(lambda x: x):
        pass


def test_the_squares_lab_runs_its_models_in_the_one_eval_mode_helper():
    from attnlab.labs.squares import inference

    assert inference.evaluating is evaluating
