"""The presets as the papers' protocols: their settings tables, the settings they describe, and the optimisers."""

import re

import pytest
import torch
from transformers.optimization import get_linear_schedule_with_warmup, get_polynomial_decay_schedule_with_warmup

from attnlab.labs.lengths.claims import SETTING_STATUSES, Setting
from attnlab.labs.lengths.presets import PRESETS, format_settings, preset
from attnlab.labs.lengths.protocols import protocol_named

from cli_helpers import cli


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_has_a_settings_table_with_a_source_per_row(name):
    table = preset(name).protocol_table
    assert len(table) >= 8
    assert len({row.what for row in table}) == len(table)  # one row per setting
    for row in table:
        assert row.status in SETTING_STATUSES and row.lab and row.paper and row.source
    text = format_settings(name)
    assert all(row.source in text and row.what in text for row in table)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_tests_its_models_at_the_longest_training_length(name):
    # Competence before judgement: every comparison scores the models in distribution, at train_len.
    chosen = preset(name)
    for task in chosen.tasks:
        for quick in (False, True):
            settings = {**chosen.settings, **(chosen.quick if quick else {}), **chosen.per_task.get(task, {}),
                        **(chosen.quick_per_task.get(task, {}) if quick else {})}
            assert settings["train_len"] in settings["test_lens"], (task, quick)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_the_model_row_of_the_settings_table_is_the_presets_model(name):
    chosen = preset(name)
    s = chosen.settings
    (row,) = [r for r in chosen.protocol_table if r.what == "layers x width x heads"]
    assert row.lab.startswith(f"{s['n_layers']} x {s['d_model']} x {s['n_heads']}, feed-forward {s['ff_units']}") \
        or row.lab == f"{s['n_layers']} x {s['d_model']} x {s['n_heads']}"


def test_ruoss2023_runs_the_reference_codes_model_and_optimiser():
    # google-deepmind/randomized_positional_encodings: experiments/example.py and models/transformer.py
    s = preset("ruoss2023").settings
    assert (s["n_layers"], s["d_model"], s["n_heads"], s["ff_units"], s["dropout"]) == (5, 64, 8, 256, 0.1)
    assert (s["lr"], s["l_max"], s["protocol"], s["architecture"]) == (1e-3, 2048, "ruoss2023", "encoder-only")
    schedule = protocol_named("ruoss2023").schedule(6400)
    assert {schedule(step) for step in (0, 1, 3199, 6399)} == {1.0}  # optax.adam(1e-3): constant
    # the paper's relative encoding is Transformer-XL's, each scheme beside its randomized version
    for base in ("sinusoidal", "transformer-xl", "alibi"):  # rotary, the fourth, only in -full (45 minutes)
        assert base in s["encodings"] and f"random-{base}" in s["encodings"]
    full = preset("ruoss2023-full").settings
    for base in ("sinusoidal", "transformer-xl", "rotary", "alibi", "learned"):
        assert base in full["encodings"] and f"random-{base}" in full["encodings"]
    assert "none" in full["encodings"] and "relative" not in full["encodings"] + s["encodings"]
    assert preset("ruoss2023").aggregate == "best" and preset("ruoss2023").metric == "token_accuracy"
    assert (full["train_len"], full["batch_size"], full["n_train"] // full["batch_size"]) == (40, 128, 10_000)
    assert set(range(41, 501)) <= set(full["test_lens"])


def test_kazemnejad2023_runs_the_papers_lengths_data_and_metric():
    chosen = preset("kazemnejad2023")
    s = chosen.settings
    assert s["architecture"] == "decoder-only" and s["protocol"] == "kazemnejad2023"
    assert set(s["encodings"]) == {"none", "t5-shared", "alibi", "rotary-quarter", "sinusoidal"}
    # trained on 2-20, tested on every length 21-40 (the paper's pooled test set) and at 20 in distribution
    assert (s["min_train_len"], s["train_len"]) == (2, 20) and tuple(s["test_lens"]) == tuple(range(20, 41))
    assert (s["n_train"], s["batch_size"]) == (100_000, 64)
    # the paper's dropout at the paper's size; none in the default's small model, which it keeps from learning
    assert s["dropout"] == 0.0 and preset("kazemnejad2023-full").settings["dropout"] == 0.1
    assert preset("kazemnejad2023-full").per_task.get("copy-repeat") is None  # all 40,000 steps at full size
    assert chosen.metric == "sequence_accuracy" and chosen.aggregate == "mean"
    assert chosen.tasks == ("copy-repeat", "reverse-random-2x")  # the paper's figure's Copy and Reverse


def test_kazemnejad_schedule_is_the_hugging_face_trainers():
    # Their trainer: warmup_ratio 0.06 and lr_scheduler_type polynomial (power 1), configs/trainer/default.jsonnet
    total = 3126
    ours = protocol_named("kazemnejad2023").schedule(total)
    param = torch.nn.Parameter(torch.zeros(1))
    warmup = 188  # ceil(0.06 * 3126), as the trainer's get_warmup_steps
    linear = get_linear_schedule_with_warmup(torch.optim.SGD([param], lr=1.0), warmup, total)
    poly = get_polynomial_decay_schedule_with_warmup(torch.optim.SGD([param], lr=1.0), warmup, total, lr_end=1e-7)
    for step in (0, 1, 100, 187, 188, 189, 1500, 3000, 3125):
        assert ours(step) == pytest.approx(linear.lr_lambdas[0](step), abs=1e-12)
        assert ours(step) == pytest.approx(poly.lr_lambdas[0](step), abs=1e-6)  # to 1e-7, not 0


def test_kazemnejad_optimiser_decays_weights_not_biases_and_norms():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    config = type("Config", (), {"lr": 3e-3})()
    optimizer = protocol_named("kazemnejad2023").optimizer(model, config)
    assert isinstance(optimizer, torch.optim.AdamW)
    decays = {id(p): group["weight_decay"] for group in optimizer.param_groups for p in group["params"]}
    assert decays[id(model[0].weight)] == 0.05
    assert decays[id(model[0].bias)] == decays[id(model[1].weight)] == decays[id(model[1].bias)] == 0.0
    # the other protocols: Adam, no weight decay
    assert type(protocol_named("ruoss2023").optimizer(model, config)) is torch.optim.Adam


@pytest.mark.bad_input("numbers")
def test_a_setting_of_an_unknown_status_is_refused():
    with pytest.raises(ValueError, match="status must be one of same, scaled, differs, got 'close'"):
        Setting("dropout", "0.1", "0.1", "somewhere", "close")


def test_the_command_line_prints_a_presets_settings_table(capsys):
    code, out, err = cli(capsys, "compare", "--preset", "ruoss2023", "--settings")
    assert code == 0 and not err
    assert "layers x width x heads" in out and "experiments/example.py" in out
    assert re.search(r"^ ~ batch$", out, re.M)  # scaled rows are marked


@pytest.mark.bad_input("messages and streams")
def test_settings_without_a_preset_is_one_line(capsys):
    code, out, err = cli(capsys, "compare", "--settings")
    assert code == 2 and not out and "give --preset NAME" in err and len(err.strip().splitlines()) == 1
