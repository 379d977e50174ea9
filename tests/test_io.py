"""Atomic writes leave the old file intact on failure."""

import pytest

from scalerl.utils.io import atomic_path, write_json_atomic


def test_atomic_file_keeps_old_on_error(tmp_path):
    target = tmp_path / "out.json"
    write_json_atomic(target, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert target.read_text().strip().startswith("{")
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_atomic_directory_swap(tmp_path):
    target = tmp_path / "ckpt"
    with atomic_path(target, directory=True) as tmp:
        (tmp / "a").write_text("1")
    with atomic_path(target, directory=True) as tmp:
        (tmp / "b").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
