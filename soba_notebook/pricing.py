"""What a model request cost in money, priced from the provider's reported usage.

Owns :class:`Cost` (dollars, or why there are none), :func:`price_usage` (one request),
:func:`entry_cost` (a recorded assistant message), :class:`CostLedger` (a session's running totals),
:func:`is_local_server` and :func:`format_usd`.

Prices come from ``genai-prices``, a price table its maintainers keep per provider and model, with
each model's input, output, cache-read and cache-write rates (and dated price changes, so a
recorded request is priced at the rate of its own day). SOBA reads only the table bundled with the
installed package: it never starts the package's background updater and builds its own
:class:`~genai_prices.data_snapshot.DataSnapshot` from the bundled data, so no price is fetched over
the network and a process that did start the updater does not change SOBA's figures.

Costs are computed from what the transcript records (usage, model, provider, the server's address),
never stored beside it: one source of truth, so sessions recorded before this module existed are
priced too. A model the table does not know is ``unknown``, never a guess; a server on this machine
or a private network (and the offline scripted model) is ``local`` and costs 0.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import cache
from typing import Any, Literal
from urllib.parse import urlsplit

from .session.entries import Usage

__all__ = ["Cost", "CostLedger", "CostStatus", "entry_cost", "format_usd", "is_local_server", "price_usage",
           "server_address", "spend_text", "stamp_time", "summary_cost_text"]

CostStatus = Literal["priced", "unknown", "local"]

_ZERO = Decimal(0)


@dataclass(frozen=True, slots=True)
class Cost:
    """Dollars spent (``usd``), or ``None`` with ``reason`` when there is no price.

    ``status``: ``priced`` (the table's rates), ``local`` (a local server: 0), ``unknown`` (no price
    for the model or server; ``reason`` says which). A sum is unknown when any part is; the
    dollars of its priced parts are kept in ``known_usd`` so a reader can say what is known.
    """

    status: CostStatus
    usd: Decimal | None
    reason: str | None = None
    known_usd: Decimal = _ZERO

    @staticmethod
    def none() -> Cost:
        """Nothing spent yet (the sum's start: a local zero)."""
        return Cost("local", _ZERO)

    def __add__(self, other: Cost) -> Cost:
        known = self.known_usd + other.known_usd
        if self.status == "unknown" or other.status == "unknown":
            reason = self.reason if self.status == "unknown" else other.reason
            return Cost("unknown", None, reason, known)
        if self.status == "local" and other.status == "local":
            return Cost("local", _ZERO)
        return Cost("priced", (self.usd or _ZERO) + (other.usd or _ZERO), known_usd=known)

    def text(self) -> str:
        """``$0.0123``, ``local: $0`` or ``cost unknown (no price for model X)``."""
        if self.status == "local":
            return "local: $0"
        if self.usd is None:
            return f"cost unknown ({self.reason})" if self.reason else "cost unknown"
        return format_usd(self.usd)

    def to_record(self, prefix: str) -> dict[str, Any]:
        """Flat fields for a flight record: ``<prefix>_usd`` (a number; ``None`` when unknown),
        ``<prefix>_status`` and ``<prefix>_reason``."""
        return {f"{prefix}_usd": None if self.usd is None else float(self.usd), f"{prefix}_status": self.status,
                f"{prefix}_reason": self.reason}

    def to_json(self) -> dict[str, Any]:
        """For events and flight records: dollars as a decimal string (exact), status, reason."""
        return {"usd": None if self.usd is None else str(self.usd), "status": self.status, "reason": self.reason,
                "text": self.text()}


def format_usd(usd: Decimal) -> str:
    """Dollars with thousands separators: cents from $1, four places from a cent, else two
    significant digits (``$1,234.50``, ``$0.0123``, ``$0.00018``, ``$0``)."""
    if usd == 0:
        return "$0"
    if usd >= 1:
        return f"${usd:,.2f}"
    if usd >= Decimal("0.01"):
        return f"${usd:.4f}"
    text = f"{usd:.2g}" if usd >= Decimal("1e-4") else f"{float(usd):.2g}"
    return f"${Decimal(text):f}"


def server_address(base_url: str | None) -> str | None:
    """``scheme://host[:port]`` of a base URL: what a recorded message keeps of where it was sent
    (no path, no user or password)."""
    if not base_url:
        return None
    parts = urlsplit(base_url)
    if not parts.scheme or not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


def is_local_server(base_url: str | None) -> bool:
    """A base URL on this machine or a private network (loopback, private, link-local addresses,
    ``localhost``, ``*.localhost``, ``*.local``)."""
    host = (urlsplit(base_url).hostname or "").lower() if base_url else ""
    if not host:
        return False
    if host == "localhost" or host.endswith((".localhost", ".local")):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private or ip.is_link_local


@cache
def _snapshot() -> Any:
    """The price table bundled with genai-prices (never the network-updated one)."""
    from genai_prices.data import providers
    from genai_prices.data_snapshot import DataSnapshot

    return DataSnapshot(providers=providers, from_auto_update=False)


def price_usage(provider: str | None, model: str | None, base_url: str | None, usage: Usage, *,
                when: datetime | None = None) -> Cost:
    """What one request cost: ``usage`` as SOBA records it (``input`` excludes cached tokens) at the
    rates of ``model`` on the server ``base_url`` (its provider found from the address; without an
    address, an ``anthropic`` request is priced at Anthropic's rates and any other is unknown).
    ``when``: the request's time, for a table with dated prices (``None``: now)."""
    if provider == "scripted" or is_local_server(base_url):
        return Cost("local", _ZERO)
    if not model:
        return Cost("unknown", None, "no model recorded")
    if usage.counted:
        return Cost("unknown", None, "no usage reported by the provider")
    provider_id = "anthropic" if base_url is None and provider == "anthropic" else None
    if base_url is None and provider_id is None:
        return Cost("unknown", None, f"no server address recorded for model {model}")
    from genai_prices import Usage as PriceUsage

    priced = PriceUsage(input_tokens=usage.prompt_tokens, output_tokens=usage.output,
                        cache_read_tokens=usage.cache_read, cache_write_tokens=usage.cache_write)
    try:
        result = _snapshot().calc(priced, model, provider_id, None if provider_id else base_url, when, None)
    except LookupError:
        return Cost("unknown", None, f"no price for model {model}")
    usd = Decimal(result.total_price)
    return Cost("priced", usd, known_usd=usd)


def entry_cost(message: Mapping[str, Any], when: datetime | None = None) -> Cost | None:
    """The cost of a recorded assistant message (``data["message"]``), or ``None`` when it is no
    priced request (not an assistant message, or no usage recorded: a cut-off reply)."""
    if message.get("role") != "assistant":
        return None
    raw = message.get("usage")
    if not isinstance(raw, Mapping):
        return None
    usage = Usage.from_json(raw)
    if usage is None:
        return None
    return price_usage(_str(message.get("provider")), _str(message.get("model")), _str(message.get("server")),
                       usage, when=when)


def stamp_time(ts: object) -> datetime | None:
    """An entry's ``ts`` as a time, for the table's dated rates (``None`` when absent or unreadable)."""
    if not isinstance(ts, str) or not ts:
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class CostLedger:
    """A session's running cost: the whole session, the current (or last) turn, and the summary
    requests of the compaction in progress. Fed on the agent's thread; :meth:`to_event` is the
    ``cost`` event's payload (immutable values, so another thread may read the last one)."""

    def __init__(self, session: Cost | None = None) -> None:
        self.session = session or Cost.none()
        self.turn = Cost.none()
        #: priced requests so far (0: nothing to say yet, not "local")
        self.requests = 0
        self._summary: Cost | None = None

    @classmethod
    def from_messages(cls, messages: Iterable[tuple[Mapping[str, Any], datetime | None]]) -> CostLedger:
        """The ledger of a reopened session: every recorded request priced (``(message, when)`` pairs)."""
        ledger = cls()
        for message, when in messages:
            cost = entry_cost(message, when)
            if cost is not None:
                ledger.session, ledger.requests = ledger.session + cost, ledger.requests + 1
        return ledger

    def start_turn(self) -> None:
        self.turn = Cost.none()

    def add_request(self, cost: Cost) -> None:
        """A turn's model request."""
        self.session, self.turn = self.session + cost, self.turn + cost
        self.requests += 1

    def add_summary(self, cost: Cost) -> None:
        """A compaction's summary request (part of the turn it ran in, if any)."""
        self.add_request(cost)
        self._summary = cost if self._summary is None else self._summary + cost

    def take_summary(self) -> Cost | None:
        """What the summary requests since the last call cost (``None``: no summary was requested)."""
        taken, self._summary = self._summary, None
        return taken

    def to_event(self) -> dict[str, Any]:
        return {"session": self.session.to_json(), "last_turn": self.turn.to_json(), "requests": self.requests}


def _fields_text(fields: Any) -> str:
    return str(fields.get("text") or "cost unknown") if isinstance(fields, Mapping) else "cost unknown"


def spend_text(event: Mapping[str, Any] | None) -> str:
    """A ``cost`` event in words: ``$0.0123 this session, $0.0031 last turn``; ``local: $0``;
    ``cost unknown (no price for model X)``; ``no model requests yet`` before the first."""
    if not event or not event.get("requests"):
        return "no model requests yet"
    session, turn = event.get("session"), event.get("last_turn")
    status = session.get("status") if isinstance(session, Mapping) else None
    if status != "priced":
        return _fields_text(session)
    return f"{_fields_text(session)} this session, {_fields_text(turn)} last turn"


def summary_cost_text(fields: Mapping[str, Any] | None) -> str | None:
    """A compaction's summary cost for its completion line (``summary cost $0.0004``), or ``None``
    when no summary was requested."""
    if not fields:
        return None
    status = fields.get("status")
    if status == "local":
        return "summary cost $0 (local)"
    if status == "priced":
        return f"summary cost {fields.get('text')}"
    return f"summary {_fields_text(fields)}"
