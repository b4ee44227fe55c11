"""Shared helpers for the benchmarks: timing with repeats, and generated sessions."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

from soba_notebook.session import SessionStore, ToolCall, assistant_message, tool_result, user_message

WORDS = ("parser token lexer stream buffer cursor node tree visit emit check error value scope "
         "symbol table frame stack heap index").split()


def timed(fn: Callable[[], object], repeat: int = 5) -> tuple[float, float]:
    """(median, min) seconds over ``repeat`` runs."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), min(samples)


def text(n_words: int, seed: int) -> str:
    return " ".join(WORDS[(seed * 7 + i) % len(WORDS)] for i in range(n_words))


def generate_session(directory: Path, entries: int, *, result_words: int = 60) -> SessionStore:
    """A realistic session: user prompts, assistant tool calls, tool results, in that rhythm."""
    store = SessionStore.create(directory)
    i = 0
    while i < entries:
        store.append(user_message(text(20, i)))
        store.append(assistant_message(text(15, i), [ToolCall(f"c{i}", "read_file", {"path": f"src/m{i}.py"})]))
        store.append(tool_result(f"c{i}", "read_file", text(result_words, i)))
        store.append(assistant_message(text(25, i + 1)))
        i += 4
    return store
