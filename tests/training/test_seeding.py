"""Seeding: the first train() seeds 42, later calls continue the random streams instead of replaying them."""

import random

import torch

from trainer_helpers import make_trainer


def test_train_twice_continues_like_one_call():
    # The book re-seeded on every train() call, so the second call replayed the first
    # call's shuffles and dropout masks: 3 + 3 epochs differed from 6.
    split = make_trainer()
    split.train(3)
    split.train(3)
    straight = make_trainer()
    straight.train(6)
    assert split.losses == straight.losses
    assert split.val_losses == straight.val_losses


def test_second_call_does_not_replay_the_first():
    trainer = make_trainer(lr=0.0)  # frozen model: only the randomness changes the loss
    trainer.train(1)
    trainer.train(1)
    assert trainer.losses[0] != trainer.losses[1]


def test_first_call_seeds_42_whatever_the_global_state():
    a = make_trainer()
    torch.manual_seed(12345)
    a.train(2)
    b = make_trainer()
    torch.manual_seed(999)
    b.train(2)
    c = make_trainer()
    c.train(2, seed=42)
    assert a.losses == b.losses == c.losses


def test_explicit_seed_reseeds_every_time():
    a = make_trainer()
    a.train(2, seed=7)
    b = make_trainer()
    b.train(2, seed=7)
    assert a.losses == b.losses
    a.train(1, seed=7)
    b.train(1, seed=8)
    assert a.losses[-1] != b.losses[-1]


def test_set_seed_before_train_is_not_overridden():
    a = make_trainer()
    a.set_seed(5)
    a.train(2)
    b = make_trainer()
    b.train(2, seed=5)
    assert a.losses == b.losses


def test_set_seed_seeds_torch_python_and_the_loader():
    trainer = make_trainer()
    trainer.set_seed(3)
    g = trainer.train_loader.generator
    draws = (torch.rand(1).item(), random.random(), torch.rand(1, generator=g).item())
    trainer.set_seed(3)
    again = (torch.rand(1).item(), random.random(), torch.rand(1, generator=g).item())
    assert draws == again
