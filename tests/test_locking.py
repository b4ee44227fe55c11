"""File locks go through one seam, so the package imports (and locks) where ``fcntl`` does not exist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import repo_python_env

from soba_notebook.locking import IMPLEMENTATION, lock_exclusive, lock_shared, unlock

# A Windows stand-in: ``fcntl`` cannot be imported and ``msvcrt.locking`` records what it is asked.
_WITHOUT_FCNTL = r"""
import os, sys, types, pkgutil, importlib
sys.modules["fcntl"] = None  # ``import fcntl`` raises ImportError, as on Windows
calls = []
held = set()
def locking(fd, mode, nbytes):
    key = (os.fstat(fd).st_ino, os.lseek(fd, 0, os.SEEK_CUR))
    calls.append((mode, key[1], nbytes))
    if mode == msvcrt.LK_UNLCK:
        held.discard(key)
    elif key in held:
        raise OSError(36, "Resource deadlock avoided")
    else:
        held.add(key)
msvcrt = types.ModuleType("msvcrt")
msvcrt.LK_UNLCK, msvcrt.LK_LOCK, msvcrt.LK_NBLCK, msvcrt.LK_RLCK, msvcrt.LK_NBRLCK = 0, 1, 2, 3, 4
msvcrt.locking = locking

import soba_notebook
skip = ("soba_notebook.notebook",)  # IPython's own imports are IPython's business
for info in pkgutil.walk_packages(soba_notebook.__path__, "soba_notebook."):
    if not info.name.startswith(skip):
        importlib.import_module(info.name)
# only now: the standard library (subprocess) takes an importable msvcrt for "this is Windows"
sys.modules["msvcrt"] = msvcrt

from soba_notebook import locking
from soba_notebook.flight import FlightRecorder
from soba_notebook.session import SessionStore, user_message
assert locking.IMPLEMENTATION == "msvcrt", locking.IMPLEMENTATION
root = sys.argv[1]
store = SessionStore.create(os.path.join(root, "sessions"), session_id="s1")
store.append(user_message("hello"))
assert [e.text for e in SessionStore.open(store.file).entries()] == ["hello"]
FlightRecorder(os.path.join(root, "flight.jsonl")).record("budget", {"effective": 1})
assert calls and all(offset == 2**40 and nbytes == 1 for _, offset, nbytes in calls), calls
assert not held, held  # every lock was released
print(len(calls))
"""


def test_the_package_imports_and_locks_where_fcntl_does_not_exist(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", _WITHOUT_FCNTL, str(tmp_path)], capture_output=True, text=True,
                         timeout=300, env=repo_python_env())  # a lock never released would hang here instead of failing
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) >= 3  # the store's append and open, and the flight record, all locked


def test_a_second_exclusive_lock_is_refused_without_blocking_until_the_first_is_released(tmp_path: Path) -> None:
    assert IMPLEMENTATION == "fcntl"  # the platform this suite runs on (Linux)
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
