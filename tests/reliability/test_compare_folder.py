"""A comparison's run folder under bad input: `attnlab compare --resume` is all-or-nothing, and never
writes through a link out of the folder (issue 27).

Everything a resume reads (config.json, every model's record.json, the marker, the lock, the
folders on the way) is checked before anything in the folder is written: a refused resume
exits 2 with one line, prints nothing on stdout (nothing trained), and leaves every byte of the
folder, results.json included, as it was. One tiny comparison is built per module and copied
per test; a suite of two tiny tasks likewise.
"""

import errno
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.cli import main

from cli_helpers import cli

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster here

TINY_FLAGS = ["--encodings", "rotary,alibi", "--seeds", "1", "--epochs", "1", "--n-train", "64", "--n-test", "16",
              "--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--train-len", "4", "--test-lens", "4,6",
              "--no-progress", "--jobs", "1"]


# -- the folders -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished tiny comparison (rotary and alibi, one seed)."""
    folder = tmp_path_factory.mktemp("finished") / "cmp"
    code = main(["compare", *TINY_FLAGS, "--out", str(folder)])
    assert code == 0
    return folder


@pytest.fixture
def done(finished, tmp_path):
    """A copy of the finished comparison, for this test to damage."""
    folder = tmp_path / "cmp"
    shutil.copytree(finished, folder, symlinks=True)
    return folder


@pytest.fixture
def killed(done):
    """The comparison as a kill leaves it after its first model: alibi not trained, no results."""
    shutil.rmtree(done / "models" / "alibi-seed0")
    for name in ("results.json", "report.html", "accuracy.png", "tokens.png"):
        (done / name).unlink()
    return done


def snapshot(folder: Path) -> dict[str, str]:
    """Every entry under ``folder``: a file's hash, a link's target, a folder's mark (links not followed)."""
    state = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.is_symlink():
            state[key] = "-> " + os.readlink(path)
        elif path.is_file():
            state[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            state[key] = "dir" if path.is_dir() else "special"
    return state


def record_path(folder: Path, name: str = "rotary-seed0") -> Path:
    return folder / "models" / name / "record.json"


def edit_record(folder: Path, edit, name: str = "rotary-seed0") -> None:
    """Rewrite a model's record.json with ``edit(doc)`` applied."""
    edit_json(record_path(folder, name), edit)


def edit_json(path: Path, edit) -> None:
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def resume(capsys, folder, *flags):
    return cli(capsys, "compare", "--resume", "--out", str(folder), "--jobs", "1", "--no-progress", *flags)


def refused(capsys, folder: Path, match: str, *, outside: Path | None = None) -> str:
    """``compare --resume`` on ``folder`` exits 2 with one line matching ``match``, before training anything,
    and leaves the folder (and ``outside``) byte for byte as they were."""
    before = snapshot(folder)
    beside = snapshot(outside) if outside is not None else None
    code, out, err = resume(capsys, folder)
    assert code == 2, (code, out, err)
    assert out == "", out  # nothing announced: nothing trained
    assert len(err.strip().splitlines()) == 1, err
    assert re.search(match, err), err
    assert snapshot(folder) == before
    if outside is not None:
        assert snapshot(outside) == beside
    return err


# -- data loss: a refused resume leaves results.json (and everything else) as it was ------------


@pytest.mark.bad_input("data loss")
def test_a_record_naming_another_encoding_leaves_results_json_as_it_was(done, capsys):
    # issue 27 (a): rotary's folder holds alibi's record; results.json held alibi twice and no rotary
    shutil.copy(record_path(done, "alibi-seed0"), record_path(done, "rotary-seed0"))
    refused(capsys, done, r"rotary-seed0.*'alibi'.*'rotary'")
    assert {r["encoding"] for r in json.loads((done / "results.json").read_text())["records"]} == {"rotary", "alibi"}


@pytest.mark.bad_input("data loss")
def test_an_accuracy_of_99_leaves_results_json_as_it_was(done, capsys):
    # issue 27 (b): the resume said so, but the 99 was already in results.json
    edit_record(done, lambda doc: doc["records"][1].update(sequence_accuracy=99))
    refused(capsys, done, r"sequence_accuracy.*99.*\[0, 1\]")
    assert all(r["sequence_accuracy"] <= 1 for r in json.loads((done / "results.json").read_text())["records"])


@pytest.mark.bad_input("data loss")
def test_a_nan_accuracy_leaves_results_json_as_it_was(done, capsys):
    path = record_path(done)
    path.write_text(path.read_text().replace('"token_accuracy": 0.1', '"token_accuracy": NaN', 1))
    assert "NaN" in path.read_text()
    refused(capsys, done, r"token_accuracy.*(finite|nan)")


@pytest.mark.bad_input("data loss")
def test_a_repeated_record_leaves_results_json_as_it_was(done, capsys):
    edit_record(done, lambda doc: doc["records"].append(dict(doc["records"][0])))
    refused(capsys, done, r"rotary-seed0.*length 4.*(twice|repeat)")


@pytest.mark.bad_input("data loss")
def test_records_inside_of_another_encoding_leave_results_json_as_it_was(done, capsys):
    # the record's own "encoding" is right, the records in it are alibi's
    alibi = json.loads(record_path(done, "alibi-seed0").read_text())
    edit_record(done, lambda doc: doc.update(records=alibi["records"]))
    refused(capsys, done, r"rotary-seed0.*'alibi'")


@pytest.mark.bad_input("data loss")
def test_a_length_that_is_not_a_number_leaves_results_json_as_it_was(done, capsys):
    edit_record(done, lambda doc: doc["records"][0].update(length="4"))
    refused(capsys, done, r"rotary-seed0.*length.*'4'")


@pytest.mark.bad_input("data loss")
def test_a_bad_record_is_named_before_the_missing_model_trains(killed, capsys):
    # all-or-nothing: alibi is not trained (and saved) only to be refused on rotary's record after
    edit_record(killed, lambda doc: doc["records"][0].update(token_accuracy=-0.5))
    refused(capsys, killed, r"token_accuracy.*-0.5")
    assert not (killed / "models" / "alibi-seed0").exists()


# -- silent wrong results: every model of the settings is there, whole, or the resume says why ----


@pytest.mark.bad_input("silent wrong results")
def test_a_model_with_no_records_is_refused(done, capsys):
    # issue 27: exit 0, and rotary missing from results.json without a word
    edit_record(done, lambda doc: doc.update(records=[]))
    refused(capsys, done, r"rotary-seed0.*no records.*delete")


@pytest.mark.bad_input("silent wrong results")
def test_a_config_edited_to_other_test_lengths_is_refused(done, capsys):
    config = json.loads((done / "config.json").read_text())
    config["test_lens"] = [4, 6, 8]
    (done / "config.json").write_text(json.dumps(config))
    refused(capsys, done, r"rotary-seed0.*lengths \[4, 6\].*\[4, 6, 8\]")


@pytest.mark.bad_input("silent wrong results")
def test_a_record_missing_a_test_length_is_refused(done, capsys):
    edit_record(done, lambda doc: doc["records"].pop())
    refused(capsys, done, r"rotary-seed0.*lengths \[4\].*\[4, 6\]")


@pytest.mark.bad_input("silent wrong results")
def test_a_record_of_a_length_not_tested_is_refused(done, capsys):
    edit_record(done, lambda doc: doc["records"].append({**doc["records"][0], "length": 99}))
    refused(capsys, done, r"rotary-seed0.*lengths \[4, 6, 99\].*\[4, 6\]")


@pytest.mark.bad_input("silent wrong results")
def test_a_record_of_another_seed_is_refused(done, capsys):
    edit_record(done, lambda doc: [doc.update(seed=1)] + [r.update(seed=1) for r in doc["records"]])
    refused(capsys, done, r"rotary-seed0.*seed 1.*seed 0")


@pytest.mark.training
@pytest.mark.bad_input("silent wrong results")
def test_a_negative_squared_error_is_refused(tmp_path, capsys):
    # the figures check only that accuracies lie in [0, 1]: an error below 0 went into results.json
    folder = tmp_path / "squares"
    flags = [*TINY_FLAGS, "--task", "squares", "--encodings", "rotary", "--train-len", "3", "--test-lens", "3,5"]
    code, _, err = cli(capsys, "compare", *flags, "--out", str(folder))
    assert code == 0, err
    edit_record(folder, lambda doc: doc["records"][1].update(mean_squared_error=-1.0))
    refused(capsys, folder, r"rotary-seed0.*mean_squared_error -1.0 is an error, at least 0")


@pytest.mark.bad_input("silent wrong results")
def test_a_model_folder_of_a_seed_not_asked_is_refused(done, capsys):
    shutil.copytree(done / "models" / "rotary-seed0", done / "models" / "rotary-seed1")
    edit_record(done, lambda doc: [doc.update(seed=1)] + [r.update(seed=1) for r in doc["records"]],
                name="rotary-seed1")
    refused(capsys, done, r"rotary-seed1.*not a model of this comparison")


# -- tracebacks and messages: one line, before any training -------------------------------------


@pytest.mark.bad_input("tracebacks and messages")
def test_a_record_without_its_encoding_is_refused_before_training(killed, capsys):
    # issue 27: KeyError, after the missing model (alibi) had trained
    edit_record(killed, lambda doc: doc.pop("encoding"))
    refused(capsys, killed, r"rotary-seed0.*lacks 'encoding'")


@pytest.mark.bad_input("tracebacks and messages")
def test_a_record_without_its_time_is_one_line(done, capsys):
    edit_record(done, lambda doc: doc.pop("seconds"))
    refused(capsys, done, r"rotary-seed0.*lacks 'seconds'")


@pytest.mark.bad_input("tracebacks and messages")
def test_a_deeply_nested_config_is_one_line(done, capsys):
    # issue 27: RecursionError
    (done / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    refused(capsys, done, r"config.json.*nested too deeply")


@pytest.mark.bad_input("tracebacks and messages")
def test_a_deeply_nested_record_is_one_line(done, capsys):
    record_path(done).write_text("[" * 100_000 + "]" * 100_000)
    refused(capsys, done, r"record.json.*nested too deeply")


@pytest.mark.bad_input("tracebacks and messages")
def test_a_deeply_nested_marker_is_one_line(done, capsys):
    (done / "attnlab-run.json").write_text("[" * 30_000 + "]" * 30_000)
    refused(capsys, done, r"attnlab-run.json.*nested too deeply")


@pytest.mark.bad_input("tracebacks and messages")
def test_records_that_are_not_objects_are_one_line(done, capsys):
    edit_record(done, lambda doc: doc.update(records=[1, 2]))
    refused(capsys, done, r"rotary-seed0.*record.*must be a JSON object")


@pytest.mark.bad_input("tracebacks and messages")
def test_a_fifo_record_is_refused_unopened(done, capsys):
    record_path(done).unlink()
    os.mkfifo(record_path(done))
    refused(capsys, done, r"record.json.*not a regular file")  # a blocking open would hang here


@pytest.mark.bad_input("tracebacks and messages")
def test_models_that_is_a_file_is_refused_before_training(killed, capsys):
    shutil.rmtree(killed / "models")
    (killed / "models").write_text("not a folder\n")
    refused(capsys, killed, r"'models'.*not a folder")


@pytest.mark.bad_input("tracebacks and messages")
def test_an_output_that_is_a_folder_is_refused_before_training(killed, capsys):
    (killed / "results.json").mkdir()
    refused(capsys, killed, r"'results.json'.*is a folder")


@pytest.mark.bad_input("tracebacks and messages")
def test_a_lock_that_is_a_fifo_is_refused(done, capsys):
    (done / ".lock").unlink()
    os.mkfifo(done / ".lock")
    refused(capsys, done, r"'\.lock'.*not a regular file")


# In a child: writes past LIMIT bytes fail (EFBIG, SIGXFSZ ignored) as on a full disk, then attnlab runs.
LIMITED = ("import os, resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
           "limit = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)); "
           "os.execv(sys.executable, [sys.executable, '-m', 'attnlab', *sys.argv[2:]])")


@pytest.mark.process
@pytest.mark.bad_input("tracebacks and messages")
def test_a_disk_that_takes_no_more_bytes_is_one_line(tmp_path):
    # issue 27: a full disk during compare printed a 36-line traceback (torch.save to a path raises
    # RuntimeError from C++), where train prints one line. The kernel's file-size limit makes every
    # write past 4 kB fail as on a full disk: weights.pt (20 kB) is the first to meet it.
    # No bytecode under the limit: a truncated .pyc in src/ would break every later import of its module.
    env = dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path),
               PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-c", LIMITED, "4096", "compare", *TINY_FLAGS, "--out", str(tmp_path / "c")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert re.search(rf"error: .*(Errno {errno.EFBIG}|File too large)", proc.stderr), proc.stderr
    assert "weights.pt" in proc.stderr and ".tmp" not in proc.stderr, proc.stderr  # the file, not its temporary
    assert not list((tmp_path / "c").rglob("record.json"))  # no model without its weights


# -- writes outside the run folder: a link below the folder's root is refused or replaced ---------


@pytest.fixture
def outside(tmp_path):
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


@pytest.mark.bad_input("writes outside the run folder")
@pytest.mark.parametrize("holds", ["nothing", "the model"])
def test_a_model_folder_that_is_a_link_is_refused(holds, killed, outside, capsys):
    # issue 27: weights.pt and record.json were written into the link's target
    if holds == "the model":
        shutil.copytree(killed / "models" / "rotary-seed0", outside / "alibi-seed0")
        edit_json(outside / "alibi-seed0" / "record.json", lambda doc: [doc.update(encoding="alibi")]
                  + [r.update(encoding="alibi") for r in doc["records"]])
        target = outside / "alibi-seed0"
    else:
        target = outside
    (killed / "models" / "alibi-seed0").symlink_to(target)
    refused(capsys, killed, r"models/alibi-seed0.*symbolic link", outside=outside)


@pytest.mark.bad_input("writes outside the run folder")
def test_models_that_is_a_link_is_refused(killed, outside, capsys):
    # issue 27: the missing model was written into the link's target
    shutil.move(killed / "models", outside / "models")
    (killed / "models").symlink_to(outside / "models")
    refused(capsys, killed, r"'models'.*symbolic link", outside=outside)


@pytest.mark.bad_input("writes outside the run folder")
@pytest.mark.parametrize("name", ["models/rotary-seed0/record.json", "config.json"])
def test_a_file_read_through_a_link_out_of_the_folder_is_refused(name, done, outside, capsys):
    # the file it points to is the one that was there: only where it lies is wrong
    shutil.move(done / name, outside / "theirs.json")
    (done / name).symlink_to(outside / "theirs.json")
    refused(capsys, done, rf"{Path(name).name}.*symbolic link", outside=outside)


@pytest.mark.bad_input("writes outside the run folder")
def test_a_lock_that_is_a_link_never_truncates_its_target(done, outside, capsys):
    users = outside / "notes.txt"
    users.write_text("a user's file\n")
    (done / ".lock").unlink()
    (done / ".lock").symlink_to(users)
    refused(capsys, done, r"\.lock.*symbolic link", outside=outside)
    assert users.read_text() == "a user's file\n"


@pytest.mark.training
@pytest.mark.bad_input("writes outside the run folder")
@pytest.mark.parametrize("name", ["results.json", "report.html", "accuracy.png", "models/alibi-seed0/weights.pt"])
def test_an_output_that_is_a_link_is_replaced_not_written_through(name, killed, outside, capsys):
    users = outside / "theirs"
    users.write_text("a user's file\n")
    (killed / "models" / "alibi-seed0").mkdir(exist_ok=True)
    (killed / name).unlink(missing_ok=True)
    (killed / name).symlink_to(users)
    code, _, err = resume(capsys, killed)
    assert code == 0, err
    assert users.read_text() == "a user's file\n"
    assert not (killed / name).is_symlink() and (killed / name).stat().st_size > 0


@pytest.mark.bad_input("writes outside the run folder")
def test_a_compare_whose_models_link_dangles_is_refused_before_training(tmp_path, outside, capsys):
    # a fresh comparison reusing a folder killed before its first model: `models` dangles into outside
    folder = tmp_path / "fresh"
    folder.mkdir()
    (folder / "attnlab-run.json").write_text(json.dumps({"kind": "compare"}))
    (folder / "models").symlink_to(outside / "made-here")
    before = snapshot(folder)
    code, out, err = cli(capsys, "compare", *TINY_FLAGS, "--out", str(folder))
    assert code == 2 and out == "" and re.search(r"'models'.*symbolic link", err), (out, err)
    assert snapshot(folder) == before and not (outside / "made-here").exists()


# -- a suite: one comparison per task in tasks/TASK -------------------------------------------------

SUITE_TASKS = ("copy", "reverse")


def _run_suite(folder, *, resume, tasks=SUITE_TASKS, name="kazemnejad2023"):
    """Two tiny comparisons (copy, reverse: no positions, one seed) as one suite, through the library."""
    from attnlab.labs.lengths.compare import run_compare
    from attnlab.labs.lengths.config import CompareConfig
    from attnlab.labs.lengths.presets import preset
    from attnlab.labs.lengths.suite import run_suite  # (none of these at cefd342)

    tiny = dict(encodings=("none",), n_seeds=1, epochs=1, n_train=64, n_test=16, d_model=16, n_heads=2, n_layers=1,
                train_len=4, test_lens=(4, 6))
    configs = [CompareConfig(**tiny, task=task) for task in tasks]
    return run_suite(configs, folder, preset(name), resume=resume,
                     run_one=lambda config, where, again: run_compare(config, where, resume=again, progress=False))


@pytest.fixture(scope="module")
def finished_suite(tmp_path_factory):
    folder = tmp_path_factory.mktemp("suite") / "suite"
    _run_suite(folder, resume=False)
    return folder


@pytest.fixture
def suite(finished_suite, tmp_path):
    folder = tmp_path / "suite"
    shutil.copytree(finished_suite, folder, symlinks=True)
    return folder


def suite_refused(folder: Path, match: str, *, outside: Path | None = None) -> None:
    before = snapshot(folder)
    beside = snapshot(outside) if outside is not None else None
    with pytest.raises(ValueError, match=match):
        _run_suite(folder, resume=True)
    assert snapshot(folder) == before
    if outside is not None:
        assert snapshot(outside) == beside


@pytest.mark.bad_input("writes outside the run folder")
def test_a_suite_whose_tasks_folder_is_a_link_is_refused(suite, outside):
    shutil.move(suite / "tasks", outside / "tasks")
    (suite / "tasks").symlink_to(outside / "tasks")
    suite_refused(suite, r"'tasks'.*symbolic link", outside=outside)


@pytest.mark.bad_input("writes outside the run folder")
def test_a_suite_whose_task_folder_is_a_link_is_refused(suite, outside):
    shutil.move(suite / "tasks" / "reverse", outside / "reverse")
    (suite / "tasks" / "reverse").symlink_to(outside / "reverse")
    suite_refused(suite, r"tasks/reverse.*symbolic link", outside=outside)


@pytest.mark.training
@pytest.mark.bad_input("writes outside the run folder")
@pytest.mark.parametrize("name", ["tasks/reverse/results.json", "suite.json", "report.html"])
def test_a_suite_output_that_is_a_link_is_replaced_not_written_through(name, suite, outside):
    users = outside / "theirs"
    users.write_text("a user's file\n")
    (suite / name).unlink()
    (suite / name).symlink_to(users)
    _run_suite(suite, resume=True)
    assert users.read_text() == "a user's file\n"
    assert not (suite / name).is_symlink() and (suite / name).stat().st_size > 0


@pytest.mark.bad_input("data loss")
def test_a_bad_record_in_a_later_task_is_named_before_an_earlier_task_is_written(suite):
    # all-or-nothing over the tasks too: copy's outputs are not written again before reverse is refused
    edit_record(suite / "tasks" / "reverse", lambda doc: doc.update(records=[]), name="none-seed0")
    suite_refused(suite, r"tasks/reverse/models/none-seed0.*no records")


# A suite resumed with another preset or other tasks overwrote suite.json, suite.txt and report.html and mixed
# both presets' task folders. The folder records what it is a suite of; another suite is refused, writing nothing.
@pytest.mark.bad_input("data loss")
@pytest.mark.parametrize("preset_name", ["ruoss2023", "abacus2024"])
def test_a_suite_resumed_with_another_preset_is_refused_untouched(suite, capsys, preset_name):
    before = snapshot(suite)
    code, out, err = cli(capsys, "compare", "--resume", "--out", str(suite), "--preset", preset_name, "--quick",
                         "--no-progress")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"holds a suite of preset 'kazemnejad2023', not '{preset_name}'" in err
    assert snapshot(suite) == before


@pytest.mark.bad_input("data loss")
@pytest.mark.parametrize("tasks", [("copy",), ("copy", "reverse", "sort")])
def test_a_suite_resumed_with_other_tasks_is_refused_untouched(suite, tasks):
    before = snapshot(suite)
    with pytest.raises(ValueError, match=r"holds the tasks copy, reverse, not "):
        _run_suite(suite, resume=True, tasks=tasks)
    assert snapshot(suite) == before


@pytest.mark.bad_input("data loss")
def test_a_suite_without_its_record_is_known_by_its_task_folders(suite):
    # a suite killed before it wrote anything of its own: the task folders it began say what it is
    for name in ("suite-settings.json", "suite.json"):
        (suite / name).unlink()
    before = snapshot(suite)
    with pytest.raises(ValueError, match=r"holds comparisons of reverse, which this suite \(kazemnejad2023: copy, "
                                         r"sort\) does not run"):
        _run_suite(suite, resume=True, tasks=("copy", "sort"))
    assert snapshot(suite) == before


@pytest.mark.training
def test_a_suite_records_its_preset_and_tasks(suite):
    assert json.loads((suite / "suite-settings.json").read_text()) == {"preset": "kazemnejad2023",
                                                                       "tasks": ["copy", "reverse"]}
    _run_suite(suite, resume=True)  # the same suite resumes


# `compare --resume --out SUITE --preset kazemnejad2023` on a folder a ruoss2023 suite wrote: refused, before
# anything in it is written, whichever way the other suite (or a single comparison) is asked for.
@pytest.fixture(scope="module")
def finished_ruoss_suite(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ruoss") / "suite"
    _run_suite(folder, resume=False, tasks=("parity-check", "even-pairs"), name="ruoss2023")
    return folder


@pytest.fixture
def ruoss_suite(finished_ruoss_suite, tmp_path):
    folder = tmp_path / "ruoss-suite"
    shutil.copytree(finished_ruoss_suite, folder, symlinks=True)
    return folder


def _resume_refused(capsys, folder: Path, argv, said: str) -> None:
    before = snapshot(folder)
    code, out, err = cli(capsys, "compare", "--resume", "--out", str(folder), *argv, "--no-progress", "--jobs", "1")
    assert code == 2 and out == "" and err.count("\n") == 1, (out, err)
    assert re.search(said, err), err
    assert snapshot(folder) == before


@pytest.mark.bad_input("data loss")
@pytest.mark.parametrize("argv", [["--preset", "kazemnejad2023"], ["--preset", "kazemnejad2023", "--quick"],
                                  ["--preset", "kazemnejad2023-full"], ["--preset", "abacus2024", "--quick"],
                                  ["--preset", "ruoss2023-full"]])
def test_a_ruoss_suite_resumed_as_another_preset_is_refused_untouched(ruoss_suite, capsys, argv):
    _resume_refused(capsys, ruoss_suite, argv, rf"holds a suite of preset 'ruoss2023', not '{argv[1]}'; give another "
                                               "--out")


@pytest.mark.bad_input("data loss")
@pytest.mark.parametrize("argv", [[], ["--preset", "kazemnejad2023", "--task", "copy-repeat"],
                                  ["--preset", "ruoss2023", "--task", "parity-check"], ["--task", "parity-check"]])
def test_a_suite_resumed_as_one_comparison_is_refused_untouched(ruoss_suite, capsys, argv):
    _resume_refused(capsys, ruoss_suite, argv, r"holds an attnlab suite run, not a compare run")


@pytest.mark.bad_input("data loss")
def test_a_ruoss_suite_killed_before_its_record_is_known_by_its_task_folders(ruoss_suite, capsys):
    for name in ("suite-settings.json", "suite.json"):
        (ruoss_suite / name).unlink()
    _resume_refused(capsys, ruoss_suite, ["--preset", "kazemnejad2023"],
                    r"holds comparisons of even-pairs, parity-check, which this suite \(kazemnejad2023: copy-repeat, "
                    r"reverse-random-2x\) does not run")
