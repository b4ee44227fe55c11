"""What an agent's model requests have cost in money, as they happen.

Owns :class:`SpendMeter`: it prices every recorded reply from the entry the transcript holds
(:func:`soba_notebook.pricing.entry_cost`, the same function the views use, so the widget and
``views.transcript`` never disagree) and every compaction summary request from its usage, keeps the
session's :class:`~soba_notebook.pricing.CostLedger` and emits the ``cost`` event after each.
A reopened session starts from the price of what it already recorded.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, cast

from ..events import EventBus
from ..pricing import Cost, CostLedger, entry_cost, price_usage, stamp_time
from ..providers.capabilities import CapableProvider
from ..session.entries import Entry, Usage
from ..session.payloads import CostPayload
from ..session.store import SessionStore

__all__ = ["SpendMeter", "provider_base_url"]


def provider_base_url(provider: CapableProvider) -> str | None:
    """Where a provider sends requests: a remote wire's declared ``base_url``; the scripted model has none."""
    return provider.base_url or None


def _assistant_messages(store: SessionStore) -> Iterator[tuple[Mapping[str, Any], datetime | None]]:
    for entry in store.entries_of_type("message"):
        message = entry.data.get("message")
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            yield message, stamp_time(entry.ts)


class SpendMeter:
    """The running cost of one agent's session (agent thread only; :attr:`ledger` read elsewhere
    only through the last ``cost`` event)."""

    def __init__(self, store: SessionStore, bus: EventBus) -> None:
        self.bus = bus
        self.ledger = CostLedger.from_messages(_assistant_messages(store))

    def start_turn(self) -> None:
        self.ledger.start_turn()

    def reply(self, entry: Entry) -> None:
        """A recorded assistant reply: priced from what was written."""
        message = entry.data.get("message")
        cost = entry_cost(message, stamp_time(entry.ts)) if isinstance(message, Mapping) else None
        if cost is not None:
            self.ledger.add_request(cost)
            self._emit()

    def summary(self, provider: CapableProvider, model: str, usage: Usage | None) -> None:
        """A compaction's summary request (``usage``: what the provider reported, if anything)."""
        if usage is None:
            cost = Cost.none() if provider.offline else Cost("unknown", None, "the provider reported no usage")
        else:
            cost = price_usage(provider.name, model, provider_base_url(provider), usage)
        self.ledger.add_summary(cost)
        self._emit()

    def _emit(self) -> None:
        self.bus.emit("cost", **cast(CostPayload, self.ledger.to_event()))
