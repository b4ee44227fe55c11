"""``views.transcript``'s ``image_tokens`` column: a tool result's images counted by the provider's
rule of the session's model; 0 on every other row."""

from __future__ import annotations

from pathlib import Path

from soba_notebook import views
from soba_notebook.image_tokens import anthropic_image_tokens, openai_image_tokens
from soba_notebook.session import SessionStore, ToolCall, assistant_message, tool_result, user_message
from soba_notebook.session.attachments import ImageAttachment


def _session(tmp_path: Path, model: str) -> SessionStore:
    store = SessionStore.create(tmp_path / model / ".soba" / "sessions", session_id="s")
    figures = (ImageAttachment("image/png", "iVBORw0KGgo=", 1000, 1000, "c1", "figure 1000×1000"),
               ImageAttachment("image/png", "iVBORw0KGgo=", 640, 480, "c1", "figure 640×480"))
    store.append(user_message("plot it"))
    store.append(assistant_message("", [ToolCall("k1", "notebook_run", {"scope": "all"})], model=model))
    store.append(tool_result("k1", "notebook_run", "ran 1 cell", images=figures))
    store.append(assistant_message("done", model=model))
    return store


def test_image_tokens_are_the_providers_rule_on_the_tool_result_and_zero_elsewhere(tmp_path: Path) -> None:
    frame = views.transcript(_session(tmp_path, "gpt-4o"))
    assert str(frame["image_tokens"].dtype) == "Int64"
    expected = openai_image_tokens(1000, 1000) + openai_image_tokens(640, 480)
    assert frame["image_tokens"].tolist() == [0, 0, expected, 0]
    claude = views.transcript(_session(tmp_path, "claude-sonnet-4"))
    assert claude["image_tokens"].tolist()[2] == anthropic_image_tokens(1000, 1000) + anthropic_image_tokens(640, 480)
    assert expected != claude["image_tokens"].tolist()[2]  # the rule really differs per provider
