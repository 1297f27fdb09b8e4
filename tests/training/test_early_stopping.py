"""Early stopping (patience, min_delta) and keeping the best checkpoint."""

import pytest

from attnlab.training import read_checkpoint

from trainer_helpers import make_trainer


def test_stops_after_patience_epochs_without_improvement():
    trainer = make_trainer(lr=0.0)  # frozen: the validation loss never improves after epoch 1
    trainer.train(20, early_stopping=3)
    assert trainer.stopped_early
    assert trainer.total_epochs == 4 and trainer.best_epoch == 1
    assert len(trainer.losses) == 4


def test_min_delta_sets_what_counts_as_improvement():
    improving = make_trainer()
    improving.train(6, early_stopping=2)
    assert not improving.stopped_early and improving.total_epochs == 6
    strict = make_trainer()
    strict.train(6, early_stopping=2, min_delta=1e6)  # nothing improves by a million
    assert strict.stopped_early and strict.total_epochs == 3


def test_patience_counts_across_calls():
    trainer = make_trainer(lr=0.0)
    trainer.train(2)
    trainer.train(10, early_stopping=2)  # the best was epoch 1: one more epoch is enough
    assert trainer.total_epochs == 3 and trainer.stopped_early
    trainer.train(1)
    assert not trainer.stopped_early


def test_keep_best_saves_only_improvements(tmp_path):
    path = tmp_path / "best.pt"
    frozen = make_trainer(lr=0.0)
    frozen.train(4, keep_best=path)
    state = read_checkpoint(path)
    assert state["epoch"] == 1 and state["best_epoch"] == 1 and len(state["loss"]) == 1

    learning = make_trainer()
    learning.train(4, keep_best=path)
    best = min(range(4), key=lambda i: learning.val_losses[i]) + 1
    assert read_checkpoint(path)["epoch"] == best == learning.best_epoch
    assert learning.best_val_loss == min(learning.val_losses)


def test_early_stopping_and_keep_best_need_validation(tmp_path):
    trainer = make_trainer(val=False)
    with pytest.raises(ValueError, match="early_stopping=2 watches the validation loss"):
        trainer.train(3, early_stopping=2)
    with pytest.raises(ValueError, match="keep_best=.*validation loss"):
        trainer.train(3, keep_best=tmp_path / "b.pt")
