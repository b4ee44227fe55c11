"""Cost in money (soba_notebook/pricing.py): requests priced from the provider's reported usage.

The usage comes through the real wires (a loopback server speaking each provider's shape, cache
tokens included), then is priced at the hosted provider's address. The expected dollars are
computed by hand from the rates genai-prices 0.2.5 bundles, quoted in each test, so a test fails
if SOBA maps a token kind to the wrong rate (or double counts cached tokens).
"""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from pathlib import Path

import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook import views
from soba_notebook.pricing import (
    Cost,
    CostLedger,
    format_usd,
    is_local_server,
    price_usage,
    spend_text,
    summary_cost_text,
)
from soba_notebook.providers import AnthropicProvider, OpenAIChatProvider
from soba_notebook.providers.base import ModelRequest
from soba_notebook.session import SessionStore, Usage, assistant_message, user_message

REQUEST = ModelRequest("m", "sys", ({"role": "user", "content": "hi"},))


def _reply_usage(provider: OpenAIChatProvider | AnthropicProvider) -> Usage:
    async def go() -> Usage:
        try:
            response = await provider.complete(REQUEST)
        finally:
            await provider.aclose()
        assert response.usage is not None
        return response.usage

    return asyncio.run(go())


def test_openai_usage_with_cached_tokens_is_priced_by_hand(fake_server: FakeServer) -> None:
    # OpenAI's shape: cached tokens are inside prompt_tokens (prompt_tokens_details.cached_tokens).
    fake_server.openai.enqueue(text="ok", usage={"prompt_tokens": 12_000, "cached_tokens": 8_000,
                                                 "completion_tokens": 500})
    usage = _reply_usage(OpenAIChatProvider("gpt-4o-mini", base_url=fake_server.openai_base_url, api_key="k"))
    assert (usage.input, usage.cache_read, usage.output) == (4_000, 8_000, 500)
    # genai-prices, openai gpt-4o-mini: $0.15/MTok input, $0.075/MTok cached input, $0.60/MTok output
    #   4,000 uncached × 0.15/1e6 = 0.0006; 8,000 cached × 0.075/1e6 = 0.0006; 500 out × 0.6/1e6 = 0.0003
    cost = price_usage("openai", "gpt-4o-mini", "https://api.openai.com/v1", usage)
    assert cost == Cost("priced", Decimal("0.0015"), known_usd=Decimal("0.0015"))
    assert cost.text() == "$0.0015"


def test_anthropic_usage_with_cache_read_and_write_is_priced_by_hand(fake_server: FakeServer) -> None:
    # Anthropic's shape: input_tokens excludes the cache; cache_read_input_tokens and
    # cache_creation_input_tokens beside it.
    fake_server.anthropic.enqueue(text="ok", usage={"input_tokens": 2_000, "cache_read_input_tokens": 10_000,
                                                    "cache_creation_input_tokens": 3_000, "output_tokens": 1_000})
    usage = _reply_usage(AnthropicProvider("claude-3-5-haiku-latest", base_url=fake_server.anthropic_base_url,
                                           api_key="k"))
    assert (usage.input, usage.cache_read, usage.cache_write, usage.output) == (2_000, 10_000, 3_000, 1_000)
    # genai-prices, anthropic claude-3-5-haiku-latest: $0.80/MTok input, $0.08/MTok cache read,
    # $1/MTok cache write (5 min), $4/MTok output:
    #   2,000 × 0.8/1e6 = 0.0016; 10,000 × 0.08/1e6 = 0.0008; 3,000 × 1/1e6 = 0.003; 1,000 × 4/1e6 = 0.004
    cost = price_usage("anthropic", "claude-3-5-haiku-latest", "https://api.anthropic.com", usage)
    assert cost.usd == Decimal("0.0094")
    assert cost.status == "priced"
    # an old message without a recorded server: Anthropic's wire is priced at Anthropic's rates
    assert price_usage("anthropic", "claude-3-5-haiku-latest", None, usage).usd == Decimal("0.0094")


def test_a_model_without_a_price_is_unknown_never_a_guess() -> None:
    usage = Usage(input=1_000, output=100)
    cost = price_usage("openai", "my-finetune-xyz", "https://api.openai.com/v1", usage)
    assert cost.status == "unknown" and cost.usd is None
    assert cost.text() == "cost unknown (no price for model my-finetune-xyz)"
    # a hosted server the table does not know: unknown too, never priced as OpenAI
    assert price_usage("openai", "gpt-4o-mini", "https://proxy.example.com/v1", usage).status == "unknown"
    # an OpenAI-compatible message with no server recorded could have gone anywhere
    assert price_usage("openai", "gpt-4o-mini", None, usage).status == "unknown"


@pytest.mark.parametrize("url", ["http://127.0.0.1:11434/v1", "http://localhost:8000/v1", "http://[::1]:8080/v1",
                                 "http://192.168.1.20:1234/v1", "http://10.0.0.5/v1", "http://gpu.local:8000/v1"])
def test_a_local_server_costs_zero_and_says_local(url: str) -> None:
    assert is_local_server(url)
    cost = price_usage("openai", "gpt-4o-mini", url, Usage(input=50_000, output=5_000))
    assert (cost.status, cost.usd, cost.text()) == ("local", Decimal(0), "local: $0")


def test_the_scripted_model_is_local_and_a_public_host_is_not() -> None:
    assert price_usage("scripted", "scripted-demo", None, Usage(input=9, counted=True)).status == "local"
    assert not is_local_server("https://api.openai.com/v1")
    assert not is_local_server("http://8.8.8.8/v1")


def test_dollars_have_separators_and_sensible_precision() -> None:
    assert format_usd(Decimal("1234.5")) == "$1,234.50"
    assert format_usd(Decimal("0.0123")) == "$0.0123"
    assert format_usd(Decimal("0.00018")) == "$0.00018"
    assert format_usd(Decimal("0.000004321")) == "$0.0000043"
    assert format_usd(Decimal(0)) == "$0"


def test_a_sum_is_unknown_when_any_part_is_and_keeps_what_is_known() -> None:
    ledger = CostLedger()
    assert spend_text(ledger.to_event()) == "no model requests yet"
    ledger.add_request(Cost("priced", Decimal("0.01"), known_usd=Decimal("0.01")))
    ledger.start_turn()
    ledger.add_request(Cost("priced", Decimal("0.0031"), known_usd=Decimal("0.0031")))
    assert spend_text(ledger.to_event()) == "$0.0131 this session, $0.0031 last turn"
    ledger.add_summary(Cost("priced", Decimal("0.0004"), known_usd=Decimal("0.0004")))
    taken = ledger.take_summary()
    assert taken is not None and summary_cost_text(taken.to_json()) == "summary cost $0.0004"
    assert ledger.take_summary() is None
    ledger.add_request(Cost("unknown", None, "no price for model X"))
    assert spend_text(ledger.to_event()) == "cost unknown (no price for model X)"
    assert ledger.session.known_usd == Decimal("0.0135")


def test_the_price_table_is_the_bundled_one_even_if_an_updater_swapped_the_global(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from genai_prices import data_snapshot

    monkeypatch.setattr(data_snapshot, "_custom_snapshot", data_snapshot.DataSnapshot([], from_auto_update=True))
    usage = Usage(input=4_000, output=500, cache_read=8_000)
    assert price_usage("openai", "gpt-4o-mini", "https://api.openai.com/v1", usage).usd == Decimal("0.0015")


def test_views_transcript_prices_each_assistant_message_from_its_recorded_usage(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path / ".soba" / "sessions")
    store.append(user_message("hi"))
    store.append(assistant_message("a", usage=Usage(input=4_000, output=500, cache_read=8_000), model="gpt-4o-mini",
                                   provider="openai", server="https://api.openai.com"))
    store.append(assistant_message("b", usage=Usage(input=10), model="llama3", provider="openai",
                                   server="http://127.0.0.1:11434"))
    store.append(assistant_message("c", usage=Usage(input=10), model="my-finetune-xyz", provider="openai",
                                   server="https://api.openai.com"))
    store.append(assistant_message("partial, no usage", model="gpt-4o-mini", provider="openai", partial=True))
    frame = views.transcript(store.file)
    rows = frame[frame.role == "assistant"]
    assert list(rows.cost_status.iloc[:3]) == ["priced", "local", "unknown"]
    assert rows.cost_status.isna().iloc[3]
    assert rows.cost_usd.iloc[0] == pytest.approx(0.0015)
    assert rows.cost_usd.iloc[1] == 0
    assert rows.cost_usd.iloc[2:].isna().all()
    assert frame[frame.role == "user"].cost_usd.isna().all()
    # the message keeps the server's address only, never a path or credentials
    lines = [json.loads(line) for line in store.file.read_text().splitlines()]
    servers = [line["message"].get("server") for line in lines if line.get("type") == "message"]
    assert servers == [None, "https://api.openai.com", "http://127.0.0.1:11434", "https://api.openai.com", None]
