"""File locks (``soba_notebook.locking``, ``flock``): exclusive refuses a second holder, readers share.

(A test that imported the package with a stand-in ``msvcrt`` was removed with the Windows code
path: Windows is not supported, README "Platforms", issue 21 item 16.)"""

from __future__ import annotations

import os
from pathlib import Path

from soba_notebook.locking import lock_exclusive, lock_shared, unlock


def test_a_second_exclusive_lock_is_refused_without_blocking_until_the_first_is_released(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    first, second = os.open(path, os.O_RDONLY), os.open(path, os.O_RDONLY)
    try:
        assert lock_exclusive(first, blocking=False)
        assert not lock_exclusive(second, blocking=False)
        unlock(first)
        assert lock_exclusive(second, blocking=False)
        unlock(second)
        lock_shared(first)
        lock_shared(second)  # readers share
        third = os.open(path, os.O_RDONLY)
        assert not lock_exclusive(third, blocking=False)  # a writer waits for the readers
        os.close(third)
    finally:
        os.close(first)
        os.close(second)
