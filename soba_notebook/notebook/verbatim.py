"""Keep IPython's help syntax off the package's magic lines, so a prompt may end in ``?``.

IPython reads any line ending in ``?`` or ``??`` as a help request: ``%soba what does greet.py
print?`` becomes ``pinfo print`` and the agent never sees the prompt. Its ``HelpEnd`` token
transform runs after the *line* transforms of ``shell.input_transformer_manager``, so
:func:`verbatim_magic_lines`, appended to ``line_transforms`` at ``%load_ext`` (and removed at
``%unload_ext``), rewrites such a line first into the call IPython's own ``%magic`` escape would
have made, ``get_ipython().run_line_magic(name, text)``, with the text exactly as typed. The
magic's variable expansion and stack depth are therefore unchanged.

Left alone, so IPython handles them as before:

* ``%soba?`` and ``%soba??`` (nothing after the name): the magic's own help;
* every line of a ``%%`` cell: the ``cell_magic`` line transform, which runs before this one, has
  already made the whole cell one ``run_cell_magic`` call with its body as a string, so a body
  ending in ``?`` reaches ``%%soba`` verbatim without help from here;
* lines inside a triple-quoted string (a heuristic scan for ``\"\"\"`` and ``'''``, as IPython's
  own prompt stripper does), and every line that does not start with one of :data:`MAGICS`,
  so ``obj?`` help is untouched.
"""

from __future__ import annotations

import re
from typing import Any

from IPython.core.inputtransformer2 import assemble_continued_line, find_end_of_continued_line

__all__ = ["MAGICS", "install", "uninstall", "verbatim_magic_lines"]

#: The line magics whose text is never read as a help request.
MAGICS = ("soba", "compact", "capsule", "budget", "auto_compact")

#: ``%name`` then a space: the only form rewritten (``%name?`` stays the magic's help).
_MAGIC_LINE = re.compile(r"[ \t]*%(" + "|".join(MAGICS) + r") ")
_TRIPLE_QUOTE = re.compile(r"(?<!\\)(\"\"\"|''')")


def _call(name: str, text: str) -> str:
    """What IPython's ``%`` escape makes of ``%name text``."""
    return f"get_ipython().run_line_magic({name!r}, {text!r})"


def verbatim_magic_lines(lines: list[str]) -> list[str]:
    """The line transform: each of our magic lines ending in ``?`` becomes a verbatim call."""
    if not lines or lines[0].startswith("%%"):
        return lines
    out: list[str] = []
    in_triple: str | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        match = _MAGIC_LINE.match(line) if in_triple is None else None
        if match is None:
            for quote in _TRIPLE_QUOTE.findall(line):  # a magic line's own text is prose, never scanned
                in_triple = quote if in_triple is None else (None if quote == in_triple else in_triple)
            out.append(line)
            index += 1
            continue
        end = find_end_of_continued_line(lines, index)
        indent = line[:match.start(1) - 1]
        text = assemble_continued_line(lines, (index, match.end()), end)
        if text.endswith("?"):
            out.append(indent + _call(match.group(1), text) + "\n")
        else:
            out.extend(lines[index:end + 1])
        index = end + 1
    return out


def install(shell: Any) -> None:
    """Register the transform on ``shell`` (once)."""
    transforms = shell.input_transformer_manager.line_transforms
    if verbatim_magic_lines not in transforms:
        transforms.append(verbatim_magic_lines)


def uninstall(shell: Any) -> None:
    """Remove the transform from ``shell``, if it is there."""
    transforms = shell.input_transformer_manager.line_transforms
    while verbatim_magic_lines in transforms:
        transforms.remove(verbatim_magic_lines)
