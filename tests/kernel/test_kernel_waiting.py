"""A real kernel and a slow loopback model server: the running cell says it is waiting before the
model's first byte, counts in place, and the reply takes the waiting line's place (issue 20, item 9)."""

from __future__ import annotations

import json
from pathlib import Path

from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from kernel_support import Kernel, run_cell

REPO = Path(__file__).resolve().parents[2]


def test_the_cell_shows_the_waiting_line_before_a_slow_first_byte_and_the_reply_takes_its_place(
        tmp_path: Path, fake_server: FakeServer) -> None:
    project = tmp_path / "project"
    (project / ".soba").mkdir(parents=True)
    (project / ".soba" / "config.json").write_text(json.dumps({"model": {
        "provider": "openai", "model": "gpt-4o-mini", "baseUrl": fake_server.openai_base_url,
        "apiKeyEnv": "SOBA_TEST_KEY", "contextWindow": 128000, "maxOutputTokens": 4000}}))
    fake_server.openai.enqueue(text="the answer is 42", headers_delay=3.0)  # nothing for 3 s
    kernel = Kernel(project, tmp_path / "home", env={"SOBA_TEST_KEY": "k" * 16})
    try:
        _, messages = run_cell(kernel.kc, "%soba what is the answer?")
    finally:
        kernel.close()
    shown = [(m["msg_type"], m["content"].get("transient", {}).get("display_id"), m["content"]["data"])
             for m in messages if m["msg_type"] in ("display_data", "update_display_data")]
    assert not [m for m in messages if m["msg_type"] == "error"]
    waiting = [s for s in shown if "waiting for gpt-4o-mini" in s[2].get("text/plain", "")]
    reply = [s for s in shown if "the answer is 42" in s[2].get("text/markdown", "")]
    assert waiting and reply, shown
    first_wait, first_reply = shown.index(waiting[0]), shown.index(reply[0])
    assert first_wait < first_reply, "the waiting line came before any model text"
    assert waiting[0][0] == "display_data" and waiting[0][2]["text/plain"] == "waiting for gpt-4o-mini · 0 s"
    assert "soba-activity" in waiting[0][2]["text/html"]
    line_id = waiting[0][1]
    assert line_id and all(did == line_id for kind, did, _ in waiting[1:] if kind == "update_display_data")
    assert len({data["text/plain"] for _, _, data in waiting}) >= 2, "the seconds counted up in place"
    assert reply[0][0] == "update_display_data" and reply[0][1] == line_id, "the reply took the line's place"
    # the line never stays: whatever the cell shows last in that place is the reply
    last_in_place = [data for kind, did, data in shown if did == line_id][-1]
    assert "the answer is 42" in last_in_place.get("text/markdown", "")
