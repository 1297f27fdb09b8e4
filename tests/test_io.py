"""attnlab._io: whole files or none, the permissions a plain open() gives, folders checked before work."""

import os
import stat

import pytest

from attnlab._io import atomic_write, check_folder, check_writable


def test_atomic_write_gives_the_permissions_of_a_plain_open(tmp_path):
    old = os.umask(0o027)
    try:
        plain = tmp_path / "plain.txt"
        plain.write_text("x")
        atomic_write(tmp_path / "atomic.txt", lambda p: p.write_text("x"))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "atomic.txt").stat().st_mode) == stat.S_IMODE(plain.stat().st_mode) == 0o640


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "data.txt"
    target.write_text("old")

    def broken(path):
        path.write_text("half")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        atomic_write(target, broken)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["data.txt"]


@pytest.mark.parametrize(("make", "kwargs", "match"), [
    (lambda root: root / "a_file", {}, r"--out '.*a_file' is a file, not a folder"),
    (lambda root: root / "missing" / "run", {}, r"folder '.*missing' does not exist"),
    (lambda root: root / "a_file" / "run", {}, r"'.*a_file' is not a folder"),
    (lambda root: root / "a_file" / "deep" / "run", {"parents": True}, r"'.*a_file' is not a folder"),
    (lambda root: "/proc/attnlab-run", {}, r"folder '/proc' is not writable"),
    (lambda root: "", {}, r"--out is empty"),
])
def test_check_folder_refuses(tmp_path, make, kwargs, match):
    (tmp_path / "a_file").write_text("keep")
    with pytest.raises(ValueError, match=match):
        check_folder(make(tmp_path), **kwargs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]  # nothing created


def test_check_folder_accepts_and_creates_nothing(tmp_path):
    assert check_folder(tmp_path) == tmp_path
    assert check_folder(tmp_path / "new") == tmp_path / "new"
    assert check_folder(tmp_path / "a" / "b" / "c", parents=True) == tmp_path / "a" / "b" / "c"
    assert list(tmp_path.iterdir()) == []


def test_check_writable_names_the_argument(tmp_path):
    with pytest.raises(ValueError, match=r"checkpoint '.*' is a folder; give a file name"):
        check_writable(tmp_path, name="checkpoint")
    with pytest.raises(ValueError, match=r"keep_best '/proc/x.pt': folder '/proc' is not writable"):
        check_writable("/proc/x.pt", name="keep_best")
