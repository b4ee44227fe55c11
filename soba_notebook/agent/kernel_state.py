"""The kernel's live state: which user variables exist, summarized without their values.

An agent living in a kernel can know what a terminal agent cannot: ``df`` exists, is a
DataFrame of 1,200 rows and 5 columns, and was changed a moment ago. This module reads a
namespace (a plain ``dict``; it never imports IPython) and owns three things:

* :func:`describe` — a few tokens per value: type, and shape/len/dtype for arrays, DataFrames,
  Series and collections (duck-typed: pandas and numpy are never imported). Never a value's repr.
* :class:`KernelStateTracker` — the user-visible names (not modules, not IPython's own names,
  not ``_``-names, nothing that looks like a secret), most recently changed first, capped at
  :data:`MAX_NAMES`. The notebook layer gives it to the compaction engine as its kernel-state
  provider, so every capsule records the namespace (:mod:`~soba_notebook.compaction.kernel_section`).
* :func:`inspect_variable` — one variable in more detail (type, shape, dtypes, the head of a
  DataFrame, a bounded repr), for the ``variables`` tool (:data:`VARIABLES_TOOL`); the text is
  bounded and redacted like every capsule file.
"""

from __future__ import annotations

import reprlib
import threading
import types
from collections import OrderedDict
from collections.abc import Mapping, Sized
from typing import Any

from ..errors import ToolError
from ..memory.redact import redact_text
from ..providers.base import ToolSpec
from .tools import Tool, ToolContext, ToolResult

__all__ = ["MAX_NAMES", "VARIABLES_TOOL", "KernelStateTracker", "describe", "inspect_variable",
           "is_secret_name", "tracker_for", "user_names"]

MAX_NAMES = 60
#: Names IPython (or Python) puts in a user namespace; never the user's.
HIDDEN_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython", "display"})
_SECRET_WORDS = ("APIKEY", "API_KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE_KEY",
                 "ACCESS_KEY", "AUTH")
MAX_COLUMNS = 8
ITEM_CHARS = 200
INSPECT_CHARS = 4_000
HEAD_ROWS = 5


def is_secret_name(name: str) -> bool:
    """A name that looks like it holds a secret (``OPENAI_API_KEY``, ``db_password``, ``token``…)."""
    upper = name.upper()
    return any(word in upper for word in _SECRET_WORDS) or upper.endswith("_KEY") or upper == "KEY"


_NOTHING: Mapping[str, Any] = {}


def _visible(name: str, value: Any, hidden: Mapping[str, Any] = _NOTHING) -> bool:
    """A user's name: not ``_``-prefixed, not a module, not secret-looking, and not one the shell
    put there itself (``hidden``: IPython's ``user_ns_hidden``, name → the object it inserted)."""
    return (isinstance(name, str) and not name.startswith("_") and name not in HIDDEN_NAMES
            and not isinstance(value, types.ModuleType) and not is_secret_name(name)
            and not (name in hidden and hidden[name] is value))


def _items(namespace: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """A copy of the namespace's items (the kernel thread may be changing it)."""
    for _ in range(5):
        try:
            return list(namespace.items())
        except RuntimeError:  # changed size during iteration
            continue
    return []


def user_names(namespace: Mapping[str, Any], hidden: Mapping[str, Any] = _NOTHING) -> list[str]:
    """The user-visible names of ``namespace``, in its order (creation order for a dict)."""
    return [name for name, value in _items(namespace) if _visible(name, value, hidden)]


def _shape(value: Any) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple) and all(isinstance(n, int) for n in shape):
        return shape
    return None


def _fmt_shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(f"{n:,}" for n in shape) + ("," if len(shape) == 1 else "") + ")"


def _columns(value: Any, limit: int = MAX_COLUMNS) -> str:
    dtypes: Any = getattr(value, "dtypes", None)
    items = list(dtypes.items()) if hasattr(dtypes, "items") else []
    shown = ", ".join(f"{str(k)[:40]} {v}" for k, v in items[:limit])
    return shown + (f", +{len(items) - limit:,} more" if len(items) > limit else "")


def describe(value: Any) -> str:
    """Type plus shape/len/dtype: ``DataFrame shape (3, 2); columns: x int64, y object``. No values."""
    kind = type(value).__name__
    try:
        if isinstance(value, type):
            return "class"
        if isinstance(value, types.FunctionType | types.BuiltinFunctionType | types.MethodType):
            return "function"
        shape = _shape(value)
        if shape is not None:
            text = f"{kind} shape {_fmt_shape(shape)}"
            if kind == "DataFrame" and hasattr(value, "dtypes"):
                return f"{text}; columns: {_columns(value)}"
            dtype = getattr(value, "dtype", None)
            return f"{text} dtype {dtype}" if dtype is not None else text
        if isinstance(value, bool | int | float | complex | type(None)):
            return kind
        if isinstance(value, Sized):
            return f"{kind} len {len(value):,}"
    except Exception:  # a property that raises: the type is still worth knowing
        return kind
    return kind


def _fingerprint(value: Any) -> tuple[Any, ...]:
    try:
        size = _shape(value) or (len(value) if isinstance(value, Sized) else None)
    except Exception:
        size = None
    return id(value), type(value), size


class KernelStateTracker:
    """The user variables of one namespace, ordered by when each last changed (newest first).

    A change is a new object under the name, or a new shape/length of the same one. Call
    :meth:`observe` after each cell (the notebook layer does, on ``post_run_cell``); every
    :meth:`lines` call observes too. Names seen in the first observation keep their creation order.
    """

    def __init__(self, namespace: Mapping[str, Any], hidden: Mapping[str, Any] = _NOTHING) -> None:
        self.namespace = namespace
        self.hidden = hidden
        self._seen: dict[str, tuple[tuple[Any, ...], int]] = {}
        self._tick = 0
        self._lock = threading.Lock()

    def observe(self) -> None:
        with self._lock:
            current = {name: value for name, value in _items(self.namespace) if _visible(name, value, self.hidden)}
            for name in [n for n in self._seen if n not in current]:
                del self._seen[name]
            for name, value in current.items():
                fingerprint = _fingerprint(value)
                prior = self._seen.get(name)
                if prior is None or prior[0] != fingerprint:
                    self._tick += 1
                    self._seen[name] = (fingerprint, self._tick)

    def names(self) -> list[str]:
        """Every visible name, most recently changed first."""
        self.observe()
        with self._lock:
            return sorted(self._seen, key=lambda n: -self._seen[n][1])

    def lines(self, limit: int = MAX_NAMES) -> list[str]:
        """``name: summary`` for at most ``limit`` names, newest first (a last line counts the rest)."""
        names = self.names()
        out = []
        for name in names[:limit]:
            value = self.namespace.get(name) if hasattr(self.namespace, "get") else None
            out.append(redact_text(f"{name}: {describe(value)}")[:ITEM_CHARS])
        if len(names) > limit:
            out.append(f"(+{len(names) - limit:,} more names not listed)")
        return out


_TRACKERS: OrderedDict[int, KernelStateTracker] = OrderedDict()
_TRACKERS_LOCK = threading.Lock()


def tracker_for(namespace: Mapping[str, Any], hidden: Mapping[str, Any] | None = None) -> KernelStateTracker:
    """The one tracker of ``namespace`` (kept for the last 16 namespaces used); ``hidden`` (the
    shell's own names) is remembered by it."""
    with _TRACKERS_LOCK:
        tracker = _TRACKERS.get(id(namespace))
        if hidden is not None and tracker is not None:
            tracker.hidden = hidden
        if tracker is None or tracker.namespace is not namespace:
            tracker = KernelStateTracker(namespace, hidden if hidden is not None else _NOTHING)
            _TRACKERS[id(namespace)] = tracker
            while len(_TRACKERS) > 16:
                _TRACKERS.popitem(last=False)
        _TRACKERS.move_to_end(id(namespace))
        return tracker


def _bounded(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[cut: {len(text):,} characters, the first {limit:,} shown]"


def inspect_variable(namespace: Mapping[str, Any], name: str, hidden: Mapping[str, Any] = _NOTHING) -> str:
    """One variable in detail: type, shape, dtypes, a DataFrame's head, a bounded repr (redacted)."""
    if is_secret_name(name):
        raise ToolError(f"{name} looks like it holds a secret; its value is not shown")
    if name not in namespace or not _visible(name, namespace[name], hidden):
        known = ", ".join(user_names(namespace, hidden)[:20]) or "none"
        raise ToolError(f"no user variable named {name!r}; variables: {known}")
    value = namespace[name]
    lines = [f"{name}: {describe(value)}", f"type: {type(value).__module__}.{type(value).__qualname__}"]
    try:
        if hasattr(value, "dtypes") and hasattr(value.dtypes, "items"):
            lines.append("dtypes:\n" + "\n".join(f"  {k}: {v}" for k, v in list(value.dtypes.items())[:50]))
        if type(value).__name__ == "DataFrame" and hasattr(value, "head"):
            lines.append("head:\n" + str(value.head(HEAD_ROWS).to_string(max_cols=20, max_colwidth=40)))
        else:
            short = reprlib.Repr()
            short.maxstring, short.maxother, short.maxlist, short.maxdict = 200, 400, 10, 10
            lines.append("repr: " + short.repr(value))
    except Exception as exc:  # a broken __repr__ is reported, not raised
        lines.append(f"(could not show more: {type(exc).__name__})")
    return redact_text(_bounded("\n".join(lines), INSPECT_CHARS))


async def _variables(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    namespace = ctx.python_namespace
    tracker = tracker_for(namespace)
    name = str(args.get("name") or "").strip()
    if name:
        return ToolResult(inspect_variable(namespace, name, tracker.hidden), data={"name": name})
    lines = tracker.lines()
    text = "\n".join(lines) if lines else "no user variables in the kernel yet"
    return ToolResult(text, data={"count": len(lines)})


VARIABLES_TOOL = Tool(ToolSpec(
    "variables", "List the kernel's user variables (name, type, shape; most recently changed first), or "
    "inspect one by name: type, shape, dtypes, the head of a DataFrame, a short repr. Cheaper than python.",
    {"type": "object", "required": [], "additionalProperties": False,
     "properties": {"name": {"type": "string", "description": "A variable to inspect; omit to list them all."}}}),
    _variables)
