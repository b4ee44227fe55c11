"""Whether a sentence a model wrote is supported by the history: the matching rules, as pure functions.

After a compaction the model believes its capsule over everything else, so a constraint the
capsule attributes to the user becomes an instruction, and a decision about a file nobody touched
becomes a fact. This module owns the tests a model-written item must pass (docs/CAPSULE_FORMAT.md,
"Grounding"), for :mod:`.grounding` and for anything that scores a capsule against its history:

* **said by the user** (:func:`user_support`): a goal or constraint is supported when its
  normalised text (:func:`normalise`: casefolded, punctuation and quotes gone, whitespace
  collapsed, a leading attribution such as ``User:`` or ``the user wants`` removed) is a substring
  of one normalised user message, or when at least :data:`USER_OVERLAP` of its content words
  (:func:`content_words`: words of two or more characters, not stop words, crudely stemmed) occur
  in one user message. A claim that says *not* / *never* / *no* is supported only by a message
  that says so too, so overlap cannot turn "never edit tests" into "edit tests".
* **named things** (:func:`mentions`): the files, commands, notebook cells and error names an
  item names; each must occur in the history's text (:func:`unsupported_mentions`).
* **junk** (:func:`junk_reason`): an item of one word or none, or an echo of the summary
  prompt's own instructions (a substring of one, or :data:`ECHO_OVERLAP` of its content words in
  one instruction line).

Nothing here reads a file or a transcript: the history arrives as strings.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ECHO_OVERLAP",
    "USER_OVERLAP",
    "Mention",
    "MentionKind",
    "content_words",
    "haystack",
    "is_echo",
    "junk_reason",
    "mentions",
    "normalise",
    "overlap",
    "unsupported_mentions",
    "user_support",
]

#: Share of a claim's content words one user message must hold for the claim to count as said.
USER_OVERLAP = 0.6
#: Share of an item's content words one instruction line of the summary prompt must hold for the
#: item to count as an echo of the prompt (the item has at least two content words).
ECHO_OVERLAP = 0.8

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
_ATTRIBUTION = re.compile(
    r"^\s*(?:the\s+)?user(?:'s)?\s*(?::|-|said|says|wants|wanted|asked(?:\s+to)?|asks(?:\s+to)?|requested|"
    r"requires|required|prefers|insists(?:\s+on)?|instructed|constraint|request|goal)?\s*(?:that|to)?\s*[:\-]?\s*",
    re.IGNORECASE)
_NEGATIONS = frozenset({"not", "no", "never", "dont", "don't", "don’t", "without", "nothing", "avoid", "cannot",
                        "can't", "mustn't", "shouldn't", "won't", "doesn't", "isn't"})
_STOP = frozenset("""
a an the and or but if then else of to in on at by for with from into onto as is are was were be been being it its
this that these those there here i me my we our you your he she they them their his her us do does did done have has
had having will would shall should can could may might must also just so than too very please user users want
wants wanted need needs needed make sure use using used about all any each some such only own same other again
further once more most via per etc ok okay now new
""".split())


def normalise(text: str) -> str:
    """``text`` casefolded, every run of punctuation, quotes and whitespace made one space, a
    leading attribution (``User:``, ``The user wants to``) removed."""
    text = _ATTRIBUTION.sub("", text.strip(), count=1) if _ATTRIBUTION.match(text.strip()) else text
    return " ".join(w.replace("’", "'") for w in _WORD.findall(text.casefold()))


def _stem(word: str) -> str:
    """A crude stem: common English endings off a word of five or more letters (``fails`` and
    ``failing`` meet at ``fail``); enough to match a paraphrase, not a linguist's stemmer."""
    if len(word) < 5 or not word.isalpha():
        return word
    for ending in ("ing", "ed", "es", "s", "e"):
        if word.endswith(ending) and len(word) - len(ending) >= 4:
            return word[: -len(ending)]
    return word


def content_words(text: str) -> frozenset[str]:
    """The words that carry ``text``'s meaning, stemmed: two characters or more, not stop words
    (negations are content: they decide what a constraint means)."""
    words = normalise(text).split()
    return frozenset(_stem(w.replace("'", "")) for w in words
                     if (len(w) > 1 and w not in _STOP) or w in _NEGATIONS)


_BARE_NEGATIONS = frozenset(n.replace("'", "").replace("’", "") for n in _NEGATIONS)
_CLAUSE = re.compile(r"[.,;:!?\n]+")


def _negated(words: frozenset[str]) -> bool:
    return any(w.replace("'", "") in _BARE_NEGATIONS for w in words)


def _negated_clauses(text: str) -> list[frozenset[str]]:
    """Per clause of ``text`` that holds a negation, the content words after it."""
    out = []
    for clause in _CLAUSE.split(text.casefold()):
        words = [w.replace("'", "").replace("’", "") for w in _WORD.findall(clause)]
        for i, w in enumerate(words):
            if w in _BARE_NEGATIONS:
                out.append(content_words(" ".join(words[i + 1:])))
                break
    return out


def _same_polarity(claim: frozenset[str], claim_negated: bool, message: str, theirs: frozenset[str],
                   threshold: float) -> bool:
    """A negated claim needs a negated message; a plain claim must not be what one clause of the
    message negates ("use numpy" is not supported by "never use numpy")."""
    if claim_negated:
        return _negated(theirs)
    return not any(overlap(claim, negated) >= threshold for negated in _negated_clauses(message))


def overlap(claim: frozenset[str], message: frozenset[str]) -> float:
    """The share of ``claim``'s content words that ``message`` holds (0 for an empty claim)."""
    return len(claim & message) / len(claim) if claim else 0.0


def user_support(claim: str, messages: Sequence[str], threshold: float = USER_OVERLAP) -> bool:
    """Whether one of the user's ``messages`` supports ``claim`` (a goal or constraint attributed
    to the user): its normalised text is a substring of the message, or ``threshold`` of its
    content words are in it; a negated claim needs a negated message."""
    said = normalise(claim)
    words = content_words(claim)
    if not said or not words:
        return False
    negated = _negated(words)
    for message in messages:
        theirs = content_words(message)
        if not _same_polarity(words, negated, message, theirs, threshold):
            continue
        if said in normalise(message) or overlap(words, theirs) >= threshold:
            return True
    return False


MentionKind = Literal["file", "command", "cell", "error"]


@dataclass(frozen=True, slots=True)
class Mention:
    """Something an item names that the history either shows or does not: ``text`` as searched
    (casefolded), ``kind`` what it is."""

    kind: MentionKind
    text: str


_EXTENSIONS = ("py|ipynb|md|rst|txt|json|jsonl|csv|tsv|toml|yaml|yml|cfg|ini|js|jsx|ts|tsx|html|css|sh|sql|rs|go|"
               "c|h|cc|cpp|hpp|java|kt|rb|php|r|xml|lock|parquet|pkl|log|env")
#: a file by name or path: relative, ``./``, ``~/`` or absolute; trailing prose punctuation is not part of it
_FILE = re.compile(rf"(?<![\w/.~-])((?:~?/)?(?:[\w.-]+/)*[\w-][\w.-]*\.(?:{_EXTENSIONS}))(?![\w/-])", re.IGNORECASE)
_BACKTICKED = re.compile(r"`([^`\n]{2,200})`")
_EXECUTABLES = ("python3", "python", "pytest", "pip3", "pip", "uv", "git", "npm", "npx", "node", "make", "ruff",
                "mypy", "jupyter", "bash", "sh", "cargo", "go", "conda", "poetry", "tox", "nox", "docker", "curl")
_COMMAND = re.compile(rf"(?<![\w/.-])((?:{'|'.join(_EXECUTABLES)})(?![\w.-])(?:\s+[^\s,;]+)*)", re.IGNORECASE)
#: where a command written in prose ends: the next clause
_COMMAND_END = re.compile(r"\s+(?:and|then|to|so|until|again|before|after|because|which|that|if|when)\b.*$",
                          re.IGNORECASE)
_CELL = re.compile(r"\bcell\s*(?:#|no\.?|number|index|id)?\s*\[?(\d+)\]?|\bIn\s*\[(\d+)\]", re.IGNORECASE)
_ERROR = re.compile(r"\b([A-Z]\w*(?:Error|Exception|Warning))\b")


_GLOB = re.compile(r"[*?\[]")
#: what a shell word can match in the history's text: not whitespace, a quote or a JSON escape
_GLOB_CHAR = r"[^\s\"'`\\]"
_LINE_SUFFIX = re.compile(r"(?<=\w):\d+(?::\d+)?$")


def _shell_words(command: str) -> list[str]:
    """``command`` split into words as a shell does: quotes removed, a quoted phrase one word
    (``rg 'def parse' src/`` is ``rg``, ``def parse``, ``src/``). Prose no shell could parse (an
    apostrophe, a quote left open by the sentence) is split at whitespace, its quotes stripped."""
    try:
        return shlex.split(command)
    except ValueError:
        return [p.strip("'\"`") for p in command.split()]


def _bare(word: str) -> str:
    """A shell word without what the prose around it added: an opening bracket or quote, closing
    punctuation (``tests/``, ``./run.sh`` and ``*.py`` keep their own), a ``:line`` after a path."""
    return _LINE_SUFFIX.sub("", word.lstrip("('\"`").rstrip(".,;:!?)'\"`"))


def _significant(command: str) -> tuple[str, ...]:
    """The words of a command the history must show, unquoted (:func:`_shell_words`): the
    executable, flags, paths, patterns, dotted names, the module after ``-m``; plain prose words
    after it are not checked."""
    words = [_bare(w) for w in _shell_words(command)]
    keep = words[:1]
    for i, word in enumerate(words[1:], start=1):
        if words[i - 1] == "-m" or re.search(r"[-./_=:\d]", word):
            keep.append(word)
    return tuple(w for w in keep if w)


def mentions(text: str) -> tuple[Mention, ...]:
    """The files, commands, cells and error names ``text`` names, in order, without repeats."""
    found: dict[Mention, None] = {}
    spans = [m.group(1) for m in _BACKTICKED.finditer(text)]
    prose = _BACKTICKED.sub(" ", text)
    for span in spans:
        if _FILE.fullmatch(_bare(span.strip())):
            found[Mention("file", _bare(span.strip()).casefold())] = None
        else:
            for part in _significant(span.strip()):
                found[Mention("command", part.casefold())] = None
    for m in _FILE.finditer(prose):
        found[Mention("file", m.group(1).casefold())] = None
    for m in _COMMAND.finditer(prose):
        for part in _significant(_COMMAND_END.sub("", m.group(1))):
            if Mention("file", part.casefold()) not in found:
                found[Mention("command", part.casefold())] = None
    for m in _CELL.finditer(text):
        found[Mention("cell", m.group(1) or m.group(2))] = None
    for m in _ERROR.finditer(text):
        found[Mention("error", m.group(1).casefold())] = None
    return tuple(found)


def haystack(texts: Iterable[str]) -> str:
    """The history's texts as one casefolded string that :func:`unsupported_mentions` searches."""
    return "\n".join(texts).casefold()


def _cell_shown(number: str, history: str) -> bool:
    spaced = " ".join(_WORD.findall(history)) if "cell" in history or "in [" in history else ""
    return re.search(rf"\b(?:cell(?: (?:index|id|number|no))?|in|execution count) {number}\b", spaced) is not None


def _as_pattern(glob: str) -> re.Pattern[str]:
    """A shell glob as a pattern over the history's text: ``*`` and ``?`` stay inside one word, a
    ``[…]`` set is a set (a malformed one is read literally)."""
    out, i = [], 0
    while i < len(glob):
        ch, close = glob[i], glob.find("]", i + 2) if glob[i] == "[" else -1
        body = "".join(c if c == "-" else re.escape(c) for c in glob[i + 1:close]) if close != -1 else ""
        if ch == "*":
            out.append(f"{_GLOB_CHAR}*")
        elif ch == "?":
            out.append(_GLOB_CHAR)
        elif body.lstrip("!\\^"):  # escaped: ``!`` stays ``!``, ``^`` is ``\^``
            negated = body.startswith(("!", "\\^"))
            out.append("[^" + body.removeprefix("!").removeprefix("\\^") + "]" if negated else "[" + body + "]")
            i = close
        else:
            out.append(re.escape(ch))
        i += 1
    try:
        return re.compile("".join(out))
    except re.error:  # a set no regular expression accepts (``[z-a]``): the glob as written
        return re.compile(re.escape(glob))


def _word_shown(word: str, history: str) -> bool:
    """Whether the history shows a command's ``word``: as written (or with its backslashes doubled,
    as a tool call's JSON arguments hold them); as the path it names (without
    ``./`` or a trailing ``/``, or ``~/`` as any home: ``/.config/x``), standing alone; or, for a
    glob or pattern (``test_*``, ``*.py``, ``foo.*bar``), something the history holds matches it."""
    if word in history or ("\\" in word and word.replace("\\", "\\\\") in history):  # as JSON escapes it
        return True
    path = word.removeprefix("./").rstrip("/")
    if path.startswith("~/"):
        path = path[1:]
    if path and path != word and re.search(rf"(?<![\w.-]){re.escape(path)}(?![\w-])", history):
        return True
    return _GLOB.search(word) is not None and _as_pattern(word).search(history) is not None


def unsupported_mentions(text: str, history: str) -> tuple[Mention, ...]:
    """The things ``text`` names that ``history`` (:func:`haystack`) never shows: a file by its
    path or, failing that, its name; a command word as the shell reads it (:func:`_word_shown`); an
    error name as written; a cell by number."""
    missing = []
    for m in mentions(text):
        if m.kind == "cell":
            shown = _cell_shown(m.text, history)
        elif m.kind == "file":
            shown = m.text in history or m.text.rsplit("/", 1)[-1] in history
        elif m.kind == "command":
            shown = _word_shown(m.text, history)
        else:
            shown = m.text in history
        if not shown:
            missing.append(m)
    return tuple(missing)


def is_echo(item: str, instructions: Sequence[str]) -> bool:
    """Whether ``item`` repeats one of the summary prompt's ``instructions`` instead of saying
    something about the work: its normalised text is a substring of one (at two words or more),
    or :data:`ECHO_OVERLAP` of its content words (at least two) are in one."""
    said, words = normalise(item), content_words(item)
    for line in instructions:
        if len(said.split()) >= 2 and said in normalise(line):
            return True
        if len(words) >= 2 and overlap(words, content_words(line)) >= ECHO_OVERLAP:
            return True
    return False


def junk_reason(item: str, instructions: Sequence[str]) -> str | None:
    """Why ``item`` (a decision, blocker or next step) says nothing about the work, or ``None``:
    ``empty``, ``one word``, ``prompt echo``. (Template text is :func:`~.grounding.is_placeholder`'s.)"""
    words = normalise(item).split()
    if not words:
        return "empty"
    if len(words) == 1:
        return "one word"
    if is_echo(item, instructions):
        return "prompt echo"
    return None
