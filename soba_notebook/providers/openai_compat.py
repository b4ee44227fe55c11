"""What OpenAI-compatible servers accept, and how the provider learns it.

"OpenAI-compatible" covers servers that disagree on details visible in every request. This module
owns those differences so the wire module stays one straight translation:

=====================  =========================================================================
request detail         what the servers do (``docs/PROVIDERS.md`` has the full matrix)
=====================  =========================================================================
``tool_choice``        llama-cpp-python's function-calling chat formats ignore ``tools`` unless
                       ``tool_choice`` is set, so ``"auto"`` is sent with every tool list. vLLM
                       refuses ``"auto"`` (400) unless started with ``--enable-auto-tool-choice``:
                       the request is sent once more without it, and the provider remembers.
assistant ``content``  an assistant message that only calls tools sends ``""``. ``null`` is what
                       OpenAI documents, but llama-cpp-python's chat templates fail on it with
                       HTTP 500, which is retried and then poisons every later request of the
                       session (the message stays in history); every server tested accepts ``""``.
usage in streams       requested with ``stream_options.include_usage``. A server that streams no
                       usage anyway (llama-cpp-python) is asked without streaming from then on, so
                       every reply carries the exact prompt count (``stream_mode="auto"``),
                       decided from streamed replies only.
streams with tools     llama-cpp-python answers a streamed request with ``tool_choice: "auto"``
                       with HTTP 200, an empty stream and a closed connection ("Automatic
                       streaming tool choice is not supported" in its log). The request is asked
                       again unstreamed on a fresh connection, and such requests are sent
                       unstreamed from then on (``streams_tool_choice``).
``max_tokens``         sent; a server that wants ``max_completion_tokens`` (OpenAI reasoning
                       models) gets the request again with that name, remembered.
``response_format``    structured output for capsule summaries: OpenAI's ``json_schema`` form
                       first; a server that rejects it (llama-cpp-python: only ``json_object``)
                       gets ``{"type": "json_object", "schema": ...}``; one that rejects both gets
                       none (the prompt still asks for JSON).
=====================  =========================================================================

:class:`ServerQuirks` is the provider's mutable record of what it learned; :func:`adapt_request`
is the pure rule that turns one refused request into the corrected one (or ``None``).
:func:`probe_server` asks a server what it is, once, before the first request: how large its context
really is (llama.cpp's ``/props``, a ``/v1/models`` entry's ``max_model_len`` / ``n_ctx`` /
``context_length``) and whether it shows the model the tool definitions at all. llama.cpp's
``llama-server`` renders every request through the model's chat template; a template without tool
syntax (SmolLM2's own, for one) drops the ``tools`` list and answers 200 as if nothing happened.
``/props`` says so (``chat_template_caps.supports_tools: false``), and the server's own
``/apply-template`` shows the rendered prompt, which settles it (:class:`ServerFacts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx

__all__ = [
    "PROBE_TOOL_NAME",
    "ServerFacts",
    "ServerQuirks",
    "StreamMode",
    "adapt_request",
    "context_window_from_models",
    "context_window_from_props",
    "count_rendered_tokens",
    "count_text_tokens",
    "probe_context_window",
    "probe_server",
    "response_format_for",
    "server_root",
    "tools_support_from_props",
]

StreamMode = Literal["auto", "always", "never"]


@dataclass(slots=True)
class ServerQuirks:
    """What one server accepts, learned from its answers (starts from the OpenAI defaults)."""

    token_param: str = "max_tokens"
    stream_options: bool = True
    tool_choice: bool = True
    #: "json_schema" (OpenAI form) -> "json_object" (llama-cpp-python form) -> "none"
    response_format: str = "json_schema"
    #: None until a complete streamed reply showed whether the server streams usage
    streams_usage: bool | None = None
    #: False once a streamed request with automatic tool choice came back empty and the same
    #: request unstreamed did not (llama-cpp-python): such requests are sent unstreamed
    streams_tool_choice: bool | None = None
    #: the server's own context size, when a probe found it
    server_context: int | None = None
    #: whether the server shows the model the tool definitions (``None``: it does not say)
    renders_tools: bool | None = None
    #: a llama.cpp server (its ``/props`` has ``chat_template_caps``): it renders and tokenizes a
    #: prompt on request (``/apply-template``, ``/tokenize``) without generating anything
    renders_on_request: bool = False
    #: whether the server tokenizes a text on request (``None``: not asked yet; ``False`` after a miss)
    counts_text: bool | None = None
    probed: bool = False


def _mentions(text: str, *words: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in words)


def adapt_request(status: int, text: str, body: Mapping[str, Any],
                  quirks: ServerQuirks) -> dict[str, Any] | None:
    """The body to send instead of ``body``, which the server refused with ``status`` and error
    ``text``; ``None`` when no known adaptation applies. Updates ``quirks`` so later requests are
    built right the first time."""
    if status not in (400, 422, 500):  # llama-cpp-python answers validation errors with 500
        return None
    if _mentions(text, "max_completion_tokens") and "max_tokens" in body \
            and "max_completion_tokens" not in body:
        quirks.token_param = "max_completion_tokens"
        changed = {k: v for k, v in body.items() if k != "max_tokens"}
        changed["max_completion_tokens"] = body["max_tokens"]
        return changed
    if _mentions(text, "stream_options") and "stream_options" in body:
        quirks.stream_options = False
        return {k: v for k, v in body.items() if k != "stream_options"}
    if _mentions(text, "tool_choice", "auto tool choice", "enable-auto-tool-choice") and "tool_choice" in body:
        quirks.tool_choice = False
        return {k: v for k, v in body.items() if k != "tool_choice"}
    response_format = body.get("response_format")
    if isinstance(response_format, Mapping) and _mentions(text, "response_format", "json_schema", "json_object"):
        if response_format.get("type") == "json_schema":
            quirks.response_format = "json_object"
            schema = (response_format.get("json_schema") or {}).get("schema")
            return {**body, "response_format": {"type": "json_object", "schema": schema}}
        quirks.response_format = "none"
        return {k: v for k, v in body.items() if k != "response_format"}
    return None


def response_format_for(schema: Mapping[str, Any], quirks: ServerQuirks, *,
                        name: str = "context_capsule") -> dict[str, Any] | None:
    """The ``response_format`` value asking for ``schema`` (called ``name``) in the form this
    server accepts."""
    if quirks.response_format == "json_schema":
        return {"type": "json_schema",
                "json_schema": {"name": name, "schema": dict(schema), "strict": False}}
    if quirks.response_format == "json_object":
        return {"type": "json_object", "schema": dict(schema)}
    return None


def server_root(base_url: str) -> str:
    """``http://host:8080`` for ``http://host:8080/v1`` (llama.cpp serves ``/props`` at the root)."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if value > 0 else None


def context_window_from_props(props: Any) -> int | None:
    """llama.cpp ``llama-server``'s ``GET /props``: ``default_generation_settings.n_ctx`` (the
    context each slot has), else a top-level ``n_ctx``."""
    if not isinstance(props, Mapping):
        return None
    settings = props.get("default_generation_settings")
    if isinstance(settings, Mapping):
        n_ctx = _positive_int(settings.get("n_ctx"))
        if n_ctx:
            return n_ctx
    return _positive_int(props.get("n_ctx"))


def context_window_from_models(models: Any, model: str) -> int | None:
    """A ``GET /v1/models`` listing's context size for ``model`` (or its only entry): vLLM's
    ``max_model_len``, llama.cpp's ``meta.n_ctx`` / ``meta.n_ctx_train``, LM Studio and others'
    ``context_length`` / ``loaded_context_length``."""
    if not isinstance(models, Mapping) or not isinstance(models.get("data"), list):
        return None
    entries = [m for m in models["data"] if isinstance(m, Mapping)]
    chosen = [m for m in entries if m.get("id") == model] or (entries if len(entries) == 1 else [])
    for entry in chosen:
        meta = found if isinstance(found := entry.get("meta"), Mapping) else {}
        for value in (entry.get("max_model_len"), entry.get("loaded_context_length"), meta.get("n_ctx"),
                      entry.get("context_length"), entry.get("context_window"), meta.get("n_ctx_train")):
            found = _positive_int(value)
            if found:
                return found
    return None


def tools_support_from_props(props: Any) -> bool | None:
    """llama-server's ``GET /props``: ``chat_template_caps.supports_tools``, whether the chat template
    it renders requests with has tool syntax; ``None`` when the server does not say."""
    caps = props.get("chat_template_caps") if isinstance(props, Mapping) else None
    value = caps.get("supports_tools") if isinstance(caps, Mapping) else None
    return value if isinstance(value, bool) else None


#: The name of the one tool :func:`probe_server` asks the server to render: found in the rendered
#: prompt only if the template shows tools (no real tool is called this).
PROBE_TOOL_NAME = "soba_probe_tool_7f3a"

_PROBE_TEMPLATE_BODY: dict[str, Any] = {
    "messages": [{"role": "system", "content": "probe"}, {"role": "user", "content": "probe"}],
    "tools": [{"type": "function", "function": {
        "name": PROBE_TOOL_NAME, "description": "probe",
        "parameters": {"type": "object", "properties": {}, "required": []}}}],
}


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What a server said about itself before the first request."""

    #: its context size (``None``: it does not say)
    context: int | None = None
    #: whether the tool definitions reach the model's prompt (``None``: it does not say)
    renders_tools: bool | None = None
    #: how that was learned, for the user's note (``/props``, ``/apply-template``)
    tools_source: str = ""
    #: whether it renders and tokenizes prompts on request (llama.cpp's ``llama-server``)
    renders_on_request: bool = False


async def _get_json(client: httpx.AsyncClient, url: str, headers: Mapping[str, str]) -> Any:
    try:
        response = await client.get(url, headers=dict(headers), timeout=5.0)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        return response.json()
    except ValueError:
        return None


async def _rendered_prompt(client: httpx.AsyncClient, root: str, headers: Mapping[str, str]) -> str | None:
    """llama-server's ``POST /apply-template`` for a one-tool request: the prompt the model would
    see (no generation, no slot); ``None`` when the server has no such endpoint."""
    try:
        response = await client.post(f"{root}/apply-template", json=_PROBE_TEMPLATE_BODY,
                                     headers=dict(headers), timeout=5.0)
        prompt = response.json().get("prompt") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return prompt if isinstance(prompt, str) else None


async def probe_server(client: httpx.AsyncClient, base_url: str, model: str,
                       headers: Mapping[str, str]) -> ServerFacts:
    """What the server says about its context and its tool rendering. Never raises: a server
    without these endpoints (any hosted API) is simply not probed.

    ``/props`` saying the template has no tool syntax is checked against the prompt the server
    actually renders (``/apply-template``): a server version that falls back to describing tools
    in the system message would render them anyway, and then they are counted as they are sent."""
    root = server_root(base_url)
    props = await _get_json(client, f"{root}/props", headers)
    context = context_window_from_props(props) or context_window_from_models(
        await _get_json(client, f"{base_url.rstrip('/')}/models", headers), model)
    supports = tools_support_from_props(props)
    if supports is not False:
        return ServerFacts(context, supports, "/props" if supports else "", supports is not None)
    rendered = await _rendered_prompt(client, root, headers)
    if rendered is None:
        return ServerFacts(context, False, "/props")
    return ServerFacts(context, PROBE_TOOL_NAME in rendered, "/apply-template", True)


async def count_rendered_tokens(client: httpx.AsyncClient, base_url: str, body: Mapping[str, Any],
                                headers: Mapping[str, str]) -> int | None:
    """llama-server's exact count of the prompt it would build for a chat request ``body``
    (``messages``, ``tools``): its ``/apply-template`` renders the prompt, its ``/tokenize`` counts
    it, as the server counts ``usage.prompt_tokens``. ``None`` when either is unavailable."""
    root = server_root(base_url)
    try:
        rendered = await client.post(f"{root}/apply-template", json=dict(body), headers=dict(headers), timeout=10.0)
        prompt = rendered.json().get("prompt") if rendered.status_code == 200 else None
        if not isinstance(prompt, str):
            return None
        counted = await client.post(f"{root}/tokenize", json={"content": prompt, "add_special": True,
                                                              "parse_special": True},
                                    headers=dict(headers), timeout=10.0)
        tokens = counted.json().get("tokens") if counted.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return len(tokens) if isinstance(tokens, list) and tokens else None


async def count_text_tokens(client: httpx.AsyncClient, base_url: str, text: str, headers: Mapping[str, str],
                            *, llama_server: bool) -> int | None:
    """A llama.cpp server's own token count of ``text`` as it sits inside a prompt (no BOS).

    llama-server's ``/tokenize`` with ``add_special`` off; llama-cpp-python's
    ``/extras/tokenize/count``, which adds the model's BOS where it has one, so the count of an
    empty text is taken off. ``None`` when the server has no such endpoint or its answer is not a
    count; a connection that failed (``httpx.TransportError``, a timeout included) is raised: that
    says nothing of the endpoint."""
    root = server_root(base_url)
    try:
        if llama_server:
            counted = await client.post(f"{root}/tokenize", json={"content": text, "add_special": False},
                                        headers=dict(headers), timeout=10.0)
            tokens = counted.json().get("tokens") if counted.status_code == 200 else None
            return len(tokens) if isinstance(tokens, list) else None
        counts: list[int] = []
        for piece in (text, ""):
            counted = await client.post(f"{root}/extras/tokenize/count", json={"input": piece},
                                        headers=dict(headers), timeout=10.0)
            count = counted.json().get("count") if counted.status_code == 200 else None
            if not isinstance(count, int) or isinstance(count, bool):
                return None
            counts.append(count)
    except httpx.TransportError:
        raise
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return max(counts[0] - counts[1], 0)


async def probe_context_window(client: httpx.AsyncClient, base_url: str, model: str,
                               headers: Mapping[str, str]) -> int | None:
    """The server's context size if it tells (``/props``, then ``/models``); ``None`` otherwise."""
    return (await probe_server(client, base_url, model, headers)).context
