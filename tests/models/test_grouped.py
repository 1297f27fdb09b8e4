"""ModelGroup and train_group: a group computes and trains every member exactly as the member alone.

The reference is the member alone, run side by side: built after ``torch.manual_seed(seed)`` and
trained through :func:`attnlab.training.fit` with ``torch.optim.Adam(foreach=True)``, a
``LambdaLR`` schedule and norm clipping at 1.0, as :func:`attnlab.labs.lengths.train.train_one`
trains it. Sizes are tiny and the dtype float64, so the only differences are roundings of sums
taken in another order.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F

from attnlab.models import DecoderOnlyTransformer, EncoderOnlyTransformer
from attnlab.models.grouped import ModelGroup
from attnlab.training import fit
from attnlab.training.clipping import GradientClipping
from attnlab.training.grouped import GroupAdam, MemberInputs, clip_group_grad_norm_, member_calls, train_group
from attnlab.training.threads import intra_op_threads

V, PAD = 7, 0
SEEDS = (0, 1, 2)
STEPS = 4
ENCODINGS = ("none", "sinusoidal", "learned", "rotary", "alibi", "t5", "fire", "relative",
             "random-alibi", "random-rotary", "random-t5", "random-sinusoidal")


@pytest.fixture(autouse=True)
def float64() -> Iterator[None]:
    """float64 and one intra-op thread (ops this small only wait for each other on more) for every test."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    with intra_op_threads(1):
        yield
    torch.set_default_dtype(before)


def _builder(cls: type, encoding: str, dropout: float = 0.0):  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        return cls(vocab_size=V, d_model=16, n_heads=2, n_layers=2, ff_units=24, position=encoding, max_len=32,
                   pad_id=PAD, dropout=dropout)
    return build


def _schedule(step: int) -> float:
    """The lab's shape: a warm-up, then a cosine decay (any factor per step does)."""
    return (step + 1) / 2 if step < 2 else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - 2) / STEPS))


def _batches(seed: int, lengths: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A member's own batches ``(x [B, L], labels [B, L])``, a length per step, from its own generator."""
    g = torch.Generator().manual_seed(1000 + seed)
    out = []
    for n in lengths:
        x = torch.randint(1, V, (3, n), generator=g)
        x[1, -1] = PAD  # a padded row: padding inside a member's own batch too
        out.append((x, torch.randint(1, V, (3, n), generator=g)))
    return out


def _loss(logits: torch.Tensor, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), batch[1].flatten())


def _alone(build, seed: int, lr: float, batches) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
    """The member trained alone, as train_one trains a model."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build()
        optimizer = torch.optim.Adam(model.parameters(), lr=lr, foreach=True)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule)
        clipping = GradientClipping()
        clipping.set_norm(1.0)
        fit(model, optimizer, batches, epochs=1, loss=lambda m, b: _loss(m(b[0]), b), scheduler=scheduler,
            scheduler_interval="batch", clipping=clipping)
    return {k: v.detach() for k, v in model.named_parameters()}


def _grouped(build, lrs: list[float], batches) -> ModelGroup:  # type: ignore[no-untyped-def]
    group = ModelGroup.build(build, SEEDS)
    train_group(group, zip(*batches, strict=True), lrs=lrs, steps=STEPS, inputs=lambda b: MemberInputs(b[0]),
                loss=_loss, schedule=_schedule)
    return group


@pytest.mark.parametrize("cls", [EncoderOnlyTransformer, DecoderOnlyTransformer])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_forward_equals_each_member(cls: type, encoding: str) -> None:
    build = _builder(cls, encoding)
    group = ModelGroup.build(build, SEEDS)
    x = torch.randint(0, V, (len(SEEDS), 4, 9), generator=torch.Generator().manual_seed(5))  # [G, B, L]
    out = group(x)  # [G, B, L, V]
    for g, seed in enumerate(SEEDS):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            alone = build()(x[g])  # its draws come from where its build left the global stream
        assert (out[g] - alone).abs().max().item() < 1e-12


@pytest.mark.parametrize("cls", [EncoderOnlyTransformer, DecoderOnlyTransformer])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_training_equals_each_member_alone(cls: type, encoding: str) -> None:
    build = _builder(cls, encoding)
    # Each member has its own lengths per step (Ruoss et al.'s protocol), so the group pads.
    lengths = {0: [6, 9, 7, 9], 1: [9, 5, 7, 8], 2: [9, 9, 7, 6]}
    batches = [_batches(seed, lengths[seed]) for seed in SEEDS]
    lrs = [1e-2, 3e-3, 1e-3]  # a group spanning learning rates
    group = _grouped(build, lrs, batches)
    for g, seed in enumerate(SEEDS):
        alone = _alone(build, seed, lrs[g], batches[g])
        trained = group.member_state_dict(g)
        worst = max((trained[name] - p).abs().max().item() for name, p in alone.items())
        assert worst < 1e-10, (encoding, g, worst)
        start = _initial(build, seed)
        moved = max((p - start[name]).abs().max().item() for name, p in alone.items())
        assert moved > 1e-4  # the run trained at all


@pytest.mark.parametrize("cls", [EncoderOnlyTransformer, DecoderOnlyTransformer])
@pytest.mark.parametrize("encoding", ["sinusoidal", "t5", "random-alibi", "random-rotary"])
def test_training_with_dropout_equals_each_member_alone(cls: type, encoding: str) -> None:
    """Dropout 0.1 at every site: each member's masks are the ones it draws alone, so the runs are equal."""
    build = _builder(cls, encoding, dropout=0.1)
    lengths = {0: [6, 9, 7, 9], 1: [9, 5, 7, 8], 2: [9, 9, 7, 6]}
    batches = [_batches(seed, lengths[seed]) for seed in SEEDS]
    lrs = [1e-2, 3e-3, 1e-3]
    group = _grouped(build, lrs, batches)
    without = _alone(_builder(cls, encoding), SEEDS[0], lrs[0], batches[0])
    for g, seed in enumerate(SEEDS):
        alone = _alone(build, seed, lrs[g], batches[g])
        trained = group.member_state_dict(g)
        worst = max((trained[name] - p).abs().max().item() for name, p in alone.items())
        assert worst < 1e-10, (encoding, g, worst)
    # The dropout did something: the same member trained without it ends elsewhere.
    assert max((without[name] - p).abs().max().item() for name, p in group.member_state_dict(0).items()
               if name in without) > 1e-4


def test_evaluation_draws_no_dropout() -> None:
    build = _builder(DecoderOnlyTransformer, "alibi", dropout=0.5)
    group = ModelGroup.build(build, SEEDS).eval()
    x = torch.randint(1, V, (len(SEEDS), 2, 6), generator=torch.Generator().manual_seed(0))
    assert torch.equal(group(x), group(x))
    assert not torch.equal(group.train()(x), group(x))  # in training the masks differ call to call


def test_adamw_with_weight_decay_per_parameter_equals_torch_adamw_in_float32() -> None:
    """GroupAdam.like of each member's AdamW (decay on matrices only, as Kazemnejad et al.) steps as torch's."""
    torch.set_default_dtype(torch.float32)
    build = _builder(DecoderOnlyTransformer, "t5")
    group = ModelGroup.build(build, SEEDS)
    members = group.to_members()
    alone = [build() for _ in SEEDS]
    lrs = [1e-2, 3e-3, 1e-3]

    def adamw(model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
        params = list(model.parameters())
        return torch.optim.AdamW([{"params": [p for p in params if p.dim() > 1], "weight_decay": 0.05},
                                  {"params": [p for p in params if p.dim() <= 1], "weight_decay": 0.0}],
                                 lr=lr, foreach=True)

    ours = GroupAdam.like(group, [adamw(m, lr) for m, lr in zip(members, lrs, strict=True)])
    assert ours.lrs == lrs and sorted(set(ours.weight_decay)) == [0.0, 0.05]
    for a, m in zip(alone, members, strict=True):
        a.load_state_dict(m.state_dict())
    theirs = [adamw(a, lr) for a, lr in zip(alone, lrs, strict=True)]
    schedulers = [torch.optim.lr_scheduler.LambdaLR(o, _schedule) for o in theirs]
    g = torch.Generator().manual_seed(0)
    names = [name for name, _ in alone[0].named_parameters()]
    for step in range(4):
        grads = [{name: torch.randn(p.shape, generator=g) for name, p in alone[0].named_parameters()} for _ in SEEDS]
        for a, own in zip(alone, grads, strict=True):
            for name, p in a.named_parameters():
                p.grad = own[name].clone()
        for name in names:
            group.parameter(name).grad = torch.stack([own[name] for own in grads])
        for o, s in zip(theirs, schedulers, strict=True):
            o.step()
            s.step()
        ours.step(factor=_schedule(step))
    for j, a in enumerate(alone):
        for name, p in a.named_parameters():
            assert torch.equal(group.parameter(name)[j], p), name


def test_like_refuses_what_it_cannot_step() -> None:
    group = ModelGroup.build(_builder(EncoderOnlyTransformer, "alibi"), SEEDS[:2])
    members = group.to_members()
    with pytest.raises(TypeError, match="SGD"):
        GroupAdam.like(group, [torch.optim.SGD(m.parameters(), lr=0.1) for m in members])
    with pytest.raises(ValueError, match="L2"):
        GroupAdam.like(group, [torch.optim.Adam(m.parameters(), weight_decay=0.1) for m in members])
    with pytest.raises(ValueError, match="amsgrad"):
        GroupAdam.like(group, [torch.optim.Adam(m.parameters(), amsgrad=True) for m in members])
    with pytest.raises(ValueError, match="does not train"):
        GroupAdam.like(group, [torch.optim.Adam(list(m.parameters())[1:]) for m in members])
    with pytest.raises(ValueError, match="one per member"):
        GroupAdam.like(group, [torch.optim.Adam(members[0].parameters())])


def test_member_calls_runs_a_batch_loss_on_the_group() -> None:
    """fit's loss(model, batch) split into the call it makes and the loss of given outputs."""
    build = _builder(DecoderOnlyTransformer, "rotary")
    member = build()
    batch = _batches(0, [7])[0]
    ids = torch.arange(7).view(1, 7)

    def batch_loss(model, b):  # type: ignore[no-untyped-def]
        assert model.vocab_size == V  # the member's attributes are there
        return _loss(model(b[0], position_ids=ids), b)

    inputs, loss = member_calls(batch_loss, member)
    call = inputs(batch)
    assert torch.equal(call.x, batch[0]) and call.mask is None and list(call.position_ids.shape) == [3, 7]
    out = member(batch[0], position_ids=ids)
    assert torch.equal(loss(out, batch), batch_loss(member, batch))
    with pytest.raises(ValueError, match="never called"):
        member_calls(lambda model, b: torch.zeros(()), member)[0](batch)


def _initial(build, seed: int) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return {k: v.detach() for k, v in build().named_parameters()}


def test_to_members_gives_the_trained_models() -> None:
    build = _builder(EncoderOnlyTransformer, "t5")
    batches = [_batches(seed, [8] * STEPS) for seed in SEEDS]
    group = _grouped(build, [1e-2] * 3, batches)
    x = torch.randint(1, V, (len(SEEDS), 2, 8))
    out = group(x)
    for g, member in enumerate(group.to_members()):
        assert type(member) is EncoderOnlyTransformer
        assert torch.equal(member(x[g]), out[g]) or (member(x[g]) - out[g]).abs().max().item() < 1e-12
        fresh = build()
        fresh.load_state_dict(group.member_state_dict(g))
        assert (fresh(x[g]) - out[g]).abs().max().item() < 1e-12


def test_adam_equals_torch_adam_per_member_in_float32() -> None:
    """GroupAdam and per-member clipping on stacked tensors give torch's numbers, bit for bit, in float32."""
    torch.set_default_dtype(torch.float32)
    g = torch.Generator().manual_seed(0)
    shapes = [(5,), (8, 3), (16, 16), (7, 5, 3)]
    members = [[torch.randn(s, generator=g, requires_grad=True) for s in shapes] for _ in range(3)]
    lrs = [1e-2, 3e-3, 1e-3]
    stacked = [torch.stack([m[i].detach() for m in members]).requires_grad_() for i in range(len(shapes))]
    ours = GroupAdam(stacked, lrs=lrs)
    theirs = [torch.optim.Adam(m, lr=lr, foreach=True) for m, lr in zip(members, lrs, strict=True)]
    schedulers = [torch.optim.lr_scheduler.LambdaLR(o, _schedule) for o in theirs]
    for step in range(5):
        grads = [[3 * torch.randn(s, generator=g) for s in shapes] for _ in range(3)]
        for m, gs in zip(members, grads, strict=True):
            for p, gr in zip(m, gs, strict=True):
                p.grad = gr.clone()
            torch.nn.utils.clip_grad_norm_(m, 1.0)
        for i, p in enumerate(stacked):
            p.grad = torch.stack([gs[i] for gs in grads])
        clip_group_grad_norm_(stacked, 1.0)
        for o, s in zip(theirs, schedulers, strict=True):
            o.step()
            s.step()
        ours.step(factor=_schedule(step))
    for i, p in enumerate(stacked):
        for j, m in enumerate(members):
            assert (p[j] - m[i]).abs().max().item() <= 1e-7 * max(1.0, m[i].abs().max().item())


def test_refuses_what_it_cannot_group() -> None:
    with pytest.raises(ValueError, match="dropout=0.1 draws masks"):
        ModelGroup([EncoderOnlyTransformer(vocab_size=V, d_model=8, n_heads=2, dropout=0.1)])
    with pytest.raises(ValueError, match="dropout"):
        ModelGroup([EncoderOnlyTransformer(vocab_size=V, d_model=8, n_heads=2, dropout=0.1),
                    EncoderOnlyTransformer(vocab_size=V, d_model=8, n_heads=2)], streams=[torch.Generator()] * 2)
    with pytest.raises(ValueError, match="d_model"):
        ModelGroup([EncoderOnlyTransformer(vocab_size=V, d_model=8, n_heads=2),
                    EncoderOnlyTransformer(vocab_size=V, d_model=16, n_heads=2)])
    with pytest.raises(TypeError, match="one class"):
        ModelGroup([EncoderOnlyTransformer(vocab_size=V, d_model=8, n_heads=2),
                    DecoderOnlyTransformer(vocab_size=V, d_model=8, n_heads=2)])
    with pytest.raises(ValueError, match="streams"):
        ModelGroup([EncoderOnlyTransformer(vocab_size=V, d_model=8, n_heads=2, position="random-alibi",
                                           max_len=16)])
    group = ModelGroup.build(_builder(EncoderOnlyTransformer, "alibi"), SEEDS)
    with pytest.raises(ValueError, match="x must be"):
        group(torch.randint(0, V, (2, 3, 4)))
    with pytest.raises(ValueError, match="lrs"):
        train_group(group, [], lrs=[1e-3], steps=1, inputs=MemberInputs, loss=_loss)
