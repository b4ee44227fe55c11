"""Offline token counts equal tiktoken's published ids; calibration; per-entry cache."""

from __future__ import annotations

import socket

import pytest

from soba_notebook.session import ToolCall, assistant_message, user_message
from soba_notebook.session.entries import Entry
from soba_notebook.tokens import (
    MESSAGE_OVERHEAD,
    Calibration,
    TokenCounter,
    encoding_name_for_model,
    html_escaped,
    load_encoding,
    template_escapes,
)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("token counting tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)


def test_cl100k_hello_world_is_the_published_ids_offline(no_network: None) -> None:
    load_encoding.cache_clear()
    assert load_encoding("cl100k_base").encode("hello world") == [15339, 1917]


def test_o200k_hello_world_is_the_published_ids_offline(no_network: None) -> None:
    load_encoding.cache_clear()
    assert load_encoding("o200k_base").encode("hello world") == [24912, 2375]


def test_offline_encoding_refuses_a_file_whose_hash_differs() -> None:
    from soba_notebook.tokens import _offline_bpe

    with pytest.raises(LookupError, match="sha256"):
        _offline_bpe("https://x/cl100k_base.tiktoken", expected_hash="0" * 64)


def test_encoding_is_picked_by_model_name() -> None:
    assert encoding_name_for_model("gpt-4o-mini") == "o200k_base"
    assert encoding_name_for_model("openai/gpt-4-turbo") == "cl100k_base"
    assert encoding_name_for_model("gpt-3.5-turbo") == "cl100k_base"


def test_message_count_includes_tool_call_name_arguments_and_overhead() -> None:
    counter = TokenCounter("gpt-4o")
    bare = counter.count_entry(assistant_message("ok"))
    with_call = counter.count_entry(assistant_message("ok", [ToolCall("c1", "read_file", {"path": "src/parser.py"})]))
    assert bare == MESSAGE_OVERHEAD + counter.count_text("ok")
    assert with_call > bare + counter.count_text('{"path":"src/parser.py"}')


def test_a_call_whose_arguments_were_not_json_is_counted_as_the_text_the_wire_sends() -> None:
    # Found in a fresh-clone CI run: the 135M model wrote 600 characters of prose as a grep call's
    # arguments; the wire sends that text back (``rawArguments``), the count charged ``{}``, and
    # the next request was 7% over SOBA's figure.
    counter = TokenCounter("gpt-4o")
    raw = '{"pattern": "The file has been written.&#34;}\nfunctions.shell:\n' + "some prose the model wrote " * 20
    call = ToolCall("c1", "grep", {}, raw_arguments=raw)
    with_raw = counter.count_entry(assistant_message("", [call]))
    empty = counter.count_entry(assistant_message("", [ToolCall("c2", "grep", {})]))
    assert with_raw - empty == counter.count_text(raw) - counter.count_text("{}")


def test_on_an_escaping_server_every_character_its_template_turns_into_an_entity_costs_extra() -> None:
    # A 135M model copies the ``&#34;`` it saw into its next call; llama-cpp-python then renders
    # that ``&`` as ``&amp;`` (fresh-clone CI run 6: a request 4.8% over the estimate).
    counter = TokenCounter("gpt-4o")
    counter.set_rendering(tool_results_rendered=True, quote_tokens=2.0)
    raw = '{ "path": "calc.py&#34;, <x> \'y\' }'
    with_raw = counter.count_entry(assistant_message("", [ToolCall("c1", "read_file", {}, raw_arguments=raw)]))
    plain = TokenCounter("gpt-4o").count_entry(
        assistant_message("", [ToolCall("c1", "read_file", {}, raw_arguments=raw)]))
    # 3 quotes, 1 ampersand, 2 angle brackets, 2 apostrophes
    assert with_raw - plain == round(2.0 * 8)


def test_images_are_charged_a_fixed_estimate() -> None:
    counter = TokenCounter("gpt-4o")
    plain = Entry("message", {"message": {"role": "user", "content": "look"}}, id="a")
    image = Entry("message", {"message": {"role": "user", "content": "look", "images": 2}}, id="b")
    assert counter.count_entry(image) - counter.count_entry(plain) == 2000


def test_entry_count_is_cached_by_id() -> None:
    counter = TokenCounter("gpt-4o")
    e = user_message("some text").with_ids("e1", None, "t")
    first = counter.count_entry(e)
    counter._encoding = None  # type: ignore[assignment]  # a second count would crash
    assert counter.count_entry(e) == first


def test_calibration_moves_the_estimate_toward_reported_usage() -> None:
    cal = Calibration()
    assert cal.apply("claude", 1000) == 1000
    for _ in range(10):
        cal.observe("claude", estimated=1000, reported=1200)
    assert 1150 < cal.apply("claude", 1000) <= 1200
    assert cal.apply("other-model", 1000) == 1000


def test_calibration_ignores_absurd_samples() -> None:
    cal = Calibration()
    cal.observe("m", estimated=10, reported=10_000)
    assert cal.ratio("m") == 1.0


def test_fallback_estimate_is_labelled_when_no_encoding_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    import soba_notebook.tokens as tokens

    def broken(name: str) -> None:
        raise LookupError("simulated: no offline file")

    monkeypatch.setattr(tokens, "load_encoding", broken)
    with pytest.warns(RuntimeWarning, match="estimate"):
        counter = TokenCounter("gpt-4o")
    assert not counter.exact and "estimate" in counter.encoding_name
    assert counter.count_text("abcdefgh") == 2


def test_html_escaped_is_what_jinjas_autoescape_renders_of_a_capsule() -> None:
    # llama-cpp-python's chatml-function-calling template renders every text through Jinja's
    # autoescape: markupsafe is the reference for what the server puts in the prompt
    import markupsafe

    text = '<context_capsule checkpoint="ck_1">\n## Goal\nadd(2, 3) == 5 & it\'s <b>done</b> &#34;</context_capsule>'
    assert html_escaped(text) == str(markupsafe.escape(text))
    assert template_escapes(text) == html_escaped(text).count("&")
