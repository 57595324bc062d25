"""Atomic writes: the whole file or the old one, open()'s permissions, no temporary left on failure."""
import os

import pytest

from hqflow.common.files import atomic_text, atomic_write


def test_atomic_text_replaces_with_the_mode_open_would_give(tmp_path):
    path = tmp_path / "a.json"
    path.write_text("old")
    atomic_text(path, "new")
    assert path.read_text() == "new"
    plain = tmp_path / "plain"
    plain.write_text("x")
    assert (path.stat().st_mode & 0o777) == (plain.stat().st_mode & 0o777)
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "a.json"
    path.write_text("old")

    def boom(tmp):
        open(tmp, "w").write("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(path, boom)
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["a.json"]
