"""Fault injection: disk full during an atomic save (a 2 MiB tmpfs mounted by the test; skipped
unless root and mount works). The save fails with ENOSPC naming the dir and "free space", the
last good file stays intact, and no temp file is left behind."""
import errno
import os
import subprocess

import pytest

from scalerl.utils.io import atomic_path


@pytest.fixture
def tiny_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)],
                      capture_output=True).returncode != 0:
        pytest.skip("mount -t tmpfs failed")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_save_until_full_fails_clearly_and_keeps_last_good(tiny_disk):
    payload = bytes(range(256)) * 2048  # 512 KiB
    saved = []
    with pytest.raises(OSError) as err:
        for i in range(10):
            target = tiny_disk / f"ckpt-{i}.bin"
            with atomic_path(target) as tmp:
                tmp.write_bytes(payload)
            saved.append(target)
    assert err.value.errno == errno.ENOSPC
    assert str(tiny_disk) in str(err.value) and "free space" in str(err.value)
    assert saved and saved[-1].read_bytes() == payload
    assert not [p for p in tiny_disk.iterdir() if ".tmp-" in p.name]
