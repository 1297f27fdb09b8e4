"""Schedulers: per-epoch and per-batch steps as the book sorts them; ReduceLROnPlateau sees the val loss."""

import pytest
import torch

from trainer_helpers import make_trainer

S = torch.optim.lr_scheduler


def test_per_epoch_scheduler_steps_once_per_epoch(trainer):
    trainer.set_lr_scheduler(S.StepLR(trainer.optimizer, step_size=1, gamma=0.5))
    assert not trainer.is_batch_lr_scheduler
    trainer.train(3)
    assert trainer.learning_rates == [[0.025], [0.0125], [0.00625]]


def test_per_batch_schedulers_step_every_batch(trainer):
    # 40 samples in batches of 8: 5 batches per epoch.
    trainer.set_lr_scheduler(S.OneCycleLR(trainer.optimizer, max_lr=0.1, total_steps=10))
    assert trainer.is_batch_lr_scheduler
    trainer.train(2)
    assert len(trainer.learning_rates) == 10
    assert len({lrs[0] for lrs in trainer.learning_rates}) > 5


def test_cosine_warm_restarts_steps_in_fractional_epochs():
    trainer = make_trainer(optimizer="sgd", lr=0.1)
    trainer.set_lr_scheduler(S.CosineAnnealingWarmRestarts(trainer.optimizer, T_0=1))
    trainer.train(2)
    lrs = [lrs[0] for lrs in trainer.learning_rates]
    assert len(lrs) == 10
    # After batch i of 5, 0.2 * (i + 1) of the period has passed; at each epoch's end it restarts.
    dummy = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    reference = S.CosineAnnealingWarmRestarts(dummy, T_0=1)
    expected = []
    for epoch in range(2):
        for i in range(5):
            reference.step(epoch + (i + 1) / 5)
            expected.append(reference.get_last_lr()[0])
    assert lrs == pytest.approx(expected)
    assert lrs[4] == pytest.approx(0.1) and lrs[0] < 0.1


def test_reduce_on_plateau_is_given_the_validation_loss(trainer):
    seen = []

    class Spy(S.ReduceLROnPlateau):
        def step(self, metrics, *args, **kwargs):
            seen.append(metrics)
            return super().step(metrics, *args, **kwargs)

    trainer.set_lr_scheduler(Spy(trainer.optimizer))
    trainer.train(3)
    assert seen == trainer.val_losses
    assert len(trainer.learning_rates) == 3


def test_reduce_on_plateau_without_validation_is_refused():
    trainer = make_trainer(val=False)
    trainer.set_lr_scheduler(S.ReduceLROnPlateau(trainer.optimizer))
    with pytest.raises(ValueError, match="ReduceLROnPlateau.*val_loader"):
        trainer.train(1)


def test_scheduler_of_another_optimizer_is_refused(trainer):
    other = make_trainer()
    with pytest.raises(ValueError, match="bound to another optimizer"):
        trainer.set_lr_scheduler(S.StepLR(other.optimizer, step_size=1))
    with pytest.raises(TypeError, match="scheduler must be"):
        trainer.set_lr_scheduler("cosine")
    assert trainer.scheduler is None


def test_scheduler_can_be_removed_and_set_optimizer_drops_it(trainer):
    trainer.set_lr_scheduler(S.StepLR(trainer.optimizer, step_size=1))
    trainer.set_lr_scheduler(None)
    assert trainer.scheduler is None
    trainer.set_lr_scheduler(S.StepLR(trainer.optimizer, step_size=1))
    new = torch.optim.SGD(trainer.model.parameters(), lr=0.01)
    with pytest.warns(RuntimeWarning, match="dropped"):
        trainer.set_optimizer(new)
    assert trainer.optimizer is new and trainer.scheduler is None
    with pytest.raises(TypeError, match="optimizer"):
        trainer.set_optimizer(None)
