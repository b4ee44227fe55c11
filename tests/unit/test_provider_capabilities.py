"""Every provider capability is declared once with a default (providers/capabilities.py): a provider
written against the short protocol gets the defaults for what it lacks and keeps what it has."""

from __future__ import annotations

import asyncio
from typing import Any

from soba_notebook.agent.spend import provider_base_url
from soba_notebook.demo import ScriptedModel
from soba_notebook.providers.base import ModelRequest, Provider
from soba_notebook.providers.capabilities import ProviderCapabilities, capable
from soba_notebook.providers.factory import make_provider


class _Short:
    name, label, offline = "short", "a five-member provider", False

    async def complete(self, request: ModelRequest, *, on_event: Any = None) -> Any:
        raise AssertionError("not asked")

    async def aclose(self) -> None:
        pass


class _KnowsItsWindow(_Short):
    effective_context_window = 4096
    sent = "kept"


def test_a_short_protocol_provider_gets_every_default_and_stays_a_provider() -> None:
    short = _Short()
    assert isinstance(short, Provider)
    full = capable(short)
    assert (full.renders_tools, full.rendering_hint, full.escapes_text, full.effective_context_window) == (
        True, None, False, None)
    assert (full.count_request_tokens, full.count_text_tokens, full.message_form, tuple(full.warnings)) == (
        None, None, None, ())
    assert full.sent_system("sys", ()) == "sys" and asyncio.run(full.prepare()) is None
    assert (full.name, full.label, full.offline) == ("short", "a five-member provider", False)


def test_a_capability_the_provider_has_is_used_and_other_attributes_pass_through() -> None:
    full = capable(_KnowsItsWindow())
    assert full.effective_context_window == 4096 and full.renders_tools is True
    assert full.sent == "kept"  # type: ignore[attr-defined]


def test_a_provider_built_on_the_capabilities_is_held_as_it_is() -> None:
    model = ScriptedModel()
    assert isinstance(model, ProviderCapabilities) and capable(model) is model


def test_where_a_provider_sends_requests_is_a_declared_capability_read_without_probing() -> None:
    class _Proxied(_Short):
        base_url = "http://proxy.test/v1"

    assert provider_base_url(capable(_Short())) is None
    assert provider_base_url(capable(_Proxied())) == "http://proxy.test/v1"
    assert provider_base_url(capable(ScriptedModel())) is None
    remote = make_provider({"provider": "ollama", "model": "m"})
    assert provider_base_url(capable(remote)) == "http://127.0.0.1:11434/v1"
