"""Running one cell of Python for the ``python`` tool: a REPL-style cell on its own thread.

This module owns in-process code execution, kept apart from the tool contract in :mod:`.tools`
because it is a different idea (threads, interpreter state, output routing):

* **A dedicated thread.** Each cell runs on a fresh daemon thread, not the event loop and not the
  shared ``to_thread`` pool, so the loop stays free and a cancel can interrupt exactly this cell.
* **Output capture.** ``sys.stdout``/``sys.stderr`` are replaced, while any cell runs, by a router
  that sends the writes of a cell's thread to that cell's buffer (stdout and stderr in order) and
  every other thread's writes, including the kernel's own, to the original stream.
* **REPL semantics.** A trailing expression is evaluated separately and its ``repr`` returned, like
  a notebook cell; top-level ``await`` works (a fresh event loop in the worker thread). Errors come
  back as a traceback trimmed to the cell's own frames.
* **Cancel.** The thread gets a ``KeyboardInterrupt`` (``PyThreadState_SetAsyncExc``); code blocked
  in a C call may not notice, and is then reported as possibly still running.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import ctypes
import inspect
import linecache
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import count
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from ..cancel import CancelToken

__all__ = ["PythonResult", "ThreadRun", "capture_this_thread", "run_code", "run_on_thread", "run_python",
           "user_traceback"]

T = TypeVar("T")

#: Seconds to wait for a python worker thread after interrupting it on cancel.
_PYTHON_INTERRUPT_GRACE = 2.0


@dataclass(frozen=True, slots=True)
class PythonResult:
    """How one cell ended, shaped for a tool result.

    ``text`` is the printed output followed by the trailing expression's ``repr`` or the traceback;
    ``footer`` is the cancel note that must survive truncation (empty otherwise); ``data`` holds
    ``has_value`` for a completed cell or ``cancelled`` for an interrupted one.
    """

    text: str
    is_error: bool = False
    data: Mapping[str, Any] = field(default_factory=dict)
    footer: str = ""


class _ThreadRoutedStream:
    """Stands in for ``sys.stdout``/``sys.stderr``: writes from registered threads go to their
    buffer, every other thread's writes go to the original stream (the kernel's output)."""

    def __init__(self, fallback: Any) -> None:
        self.fallback = fallback
        self.targets: dict[int, Callable[[str], Any]] = {}

    def write(self, text: str) -> int:
        target = self.targets.get(threading.get_ident())
        if target is None:
            return self.fallback.write(text)
        target(str(text))
        return len(text)

    def flush(self) -> None:
        if threading.get_ident() not in self.targets:
            self.fallback.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fallback, name)


_ROUTING_LOCK = threading.Lock()


@contextlib.contextmanager
def capture_this_thread(sinks: Mapping[str, Callable[[str], Any]]) -> Iterator[None]:
    """While inside, this thread's writes to ``sys.stdout``/``sys.stderr`` go to ``sinks["stdout"]``
    and ``sinks["stderr"]``; every other thread's keep going where they went."""
    ident = threading.get_ident()
    routers: list[tuple[str, _ThreadRoutedStream]] = []
    with _ROUTING_LOCK:
        for name in ("stdout", "stderr"):
            current = getattr(sys, name)
            if not isinstance(current, _ThreadRoutedStream):
                current = _ThreadRoutedStream(current)
                setattr(sys, name, current)
            current.targets[ident] = sinks[name]
            routers.append((name, current))
    try:
        yield
    finally:
        with _ROUTING_LOCK:
            for name, router in routers:
                router.targets.pop(ident, None)
                if not router.targets and getattr(sys, name) is router:
                    setattr(sys, name, router.fallback)


_cell_numbers = count(1)


def user_traceback(exc: BaseException, filename: str) -> str:
    if isinstance(exc, SyntaxError) and exc.filename == filename:
        return "".join(traceback.format_exception_only(type(exc), exc))
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))


def _execute_python(code: str, namespace: dict[str, Any], filename: str,
                    out: list[str]) -> tuple[str | None, str | None]:
    """Run ``code`` like a REPL cell: ``(repr of the trailing expression, traceback text)``."""
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    with capture_this_thread({"stdout": out.append, "stderr": out.append}):
        try:
            tree = ast.parse(code, filename, "exec")
            last: ast.Expression | None = None
            if tree.body and isinstance(tail := tree.body[-1], ast.Expr):
                tree.body.pop()
                last = ast.Expression(tail.value)
            body = compile(tree, filename, "exec", flags=flags)
            run_code(body, namespace)
            if last is None:
                return None, None
            value = run_code(compile(last, filename, "eval", flags=flags), namespace)
            return (None if value is None else repr(value)), None
        except BaseException as exc:  # the cell's own errors (and interrupts) are its output
            return None, user_traceback(exc, filename)


def run_code(code: Any, namespace: dict[str, Any]) -> Any:
    result = eval(code, namespace)
    if code.co_flags & inspect.CO_COROUTINE:
        result = asyncio.run(result)  # top-level await: a fresh loop in this worker thread
    return result


@dataclass(slots=True)
class _PythonRun:
    lock: threading.Lock = field(default_factory=threading.Lock)
    finished: bool = False
    thread_id: int | None = None


def _interrupt(run: _PythonRun) -> None:
    with run.lock:
        if run.finished or run.thread_id is None:
            return
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(run.thread_id),
                                                   ctypes.py_object(KeyboardInterrupt))


@dataclass(frozen=True, slots=True)
class ThreadRun(Generic[T]):
    """How :func:`run_on_thread` ended: ``value`` the work's return (``None`` when it did not return
    in time), ``stopped`` ``""``, ``"cancelled"`` or ``"timeout"``, and ``still_running`` when the
    interrupt did not end the thread within the grace period."""

    value: T | None
    stopped: str = ""
    still_running: bool = False


async def run_on_thread(work: Callable[[], T], fallback: T, cancel: CancelToken | None = None,
                        timeout: float | None = None, name: str = "soba-python") -> ThreadRun[T]:
    """Run ``work`` on a fresh daemon thread (not the shared ``to_thread`` pool, so an interrupt never
    lands in someone else's work) and await it, the event loop free. On cancel or after ``timeout``
    seconds the thread gets a ``KeyboardInterrupt``; what ``work`` returns then (its own record of
    the interrupt) is kept when it ends within the grace period. ``fallback`` is the result when the
    interrupt lands outside ``work``."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()
    run = _PythonRun()

    def deliver(result: T) -> None:
        if not done.done():
            done.set_result(result)

    def worker() -> None:
        result = fallback
        try:
            result = work()
        except BaseException:  # an interrupt that landed outside the work: the fallback says so
            pass
        finally:
            with run.lock:
                run.finished = True
            with contextlib.suppress(RuntimeError):  # the loop may be gone if the agent shut down
                loop.call_soon_threadsafe(deliver, result)

    thread = threading.Thread(target=worker, name=name, daemon=True)
    thread.start()
    run.thread_id = thread.ident
    waiters: set[asyncio.Future[Any]] = {done}
    cancel_watch = asyncio.ensure_future(cancel.wait()) if cancel is not None else None
    if cancel_watch is not None:
        waiters.add(cancel_watch)
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if cancel_watch is not None:
            cancel_watch.cancel()
        if not done.done():
            _interrupt(run)
    if done.done() and not done.cancelled():
        return ThreadRun(done.result())
    stopped = "cancelled" if cancel is not None and cancel.cancelled else "timeout"
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(done), _PYTHON_INTERRUPT_GRACE)
    if done.done():
        return ThreadRun(done.result(), stopped)
    return ThreadRun(None, stopped, still_running=True)


async def run_python(code: str, namespace: dict[str, Any], cancel: CancelToken | None = None) -> PythonResult:
    """Run a cell on its own worker thread so the event loop stays free.

    Output printed by that thread (stdout and stderr, in order) is captured; other threads,
    including the kernel's own, keep printing where they did. Because the cell runs off the main
    thread, code that needs it (installing signal handlers, some GUI backends) fails with its
    usual error. On cancel the thread gets a ``KeyboardInterrupt``; code blocked inside a C call
    may not notice, and is then reported as possibly still running.
    """
    filename = f"<soba-python-{next(_cell_numbers)}>"
    out: list[str] = []
    interrupted: tuple[str | None, str | None] = (None, "KeyboardInterrupt: interrupted before the code started\n")
    ended = await run_on_thread(lambda: _execute_python(code, namespace, filename, out),
                                interrupted, cancel)
    if ended.stopped:
        text = "".join(out).rstrip("\n")
        note = "[cancelled: the code could not be interrupted and may still be running in the background]" \
            if ended.still_running else "[cancelled: the code was interrupted]"
        return PythonResult((text + "\n" if text else ""), is_error=True, data={"cancelled": True}, footer=note)
    assert ended.value is not None
    value, error = ended.value
    text = "".join(out)
    if error is not None:
        return PythonResult((text.rstrip("\n") + "\n" if text.strip() else "") + error.rstrip("\n"), is_error=True)
    if value is not None:
        text = (text.rstrip("\n") + "\n" if text else "") + value
    return PythonResult(text.rstrip("\n") or "(no output)", data={"has_value": value is not None})
