"""A real kernel and a slow loopback model server: the running cell says it is waiting before the
model's first byte, counts in place, and the reply takes the waiting line's place (issue 20, item 9)."""

from __future__ import annotations

import json
import os
import queue
import time
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from jupyter_client import KernelManager

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.kernel


def _cell_messages(kc: Any, code: str, timeout: float = 120) -> list[dict[str, Any]]:
    """Every iopub message of one cell, in order, until the kernel is idle again."""
    msg_id = kc.execute(code)
    messages: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        messages.append(msg)
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return messages
    raise TimeoutError(f"cell did not finish: {code[:60]}")


def test_the_cell_shows_the_waiting_line_before_a_slow_first_byte_and_the_reply_takes_its_place(
        tmp_path: Path, fake_server: FakeServer) -> None:
    project = tmp_path / "project"
    (project / ".soba").mkdir(parents=True)
    (project / ".soba" / "config.json").write_text(json.dumps({"model": {
        "provider": "openai", "model": "gpt-4o-mini", "baseUrl": fake_server.openai_base_url,
        "apiKeyEnv": "SOBA_TEST_KEY", "contextWindow": 128000, "maxOutputTokens": 4000}}))
    fake_server.openai.enqueue(text="the answer is 42", headers_delay=3.0)  # nothing for 3 s
    km = KernelManager(kernel_name="python3")
    env = {**os.environ, "SOBA_TEST_KEY": "k" * 16, "HOME": str(tmp_path / "home"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    km.start_kernel(cwd=str(project), env=env)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        loaded = _cell_messages(kc, "%load_ext soba_notebook")
        assert not [m for m in loaded if m["msg_type"] == "error"]
        messages = _cell_messages(kc, "%soba what is the answer?")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
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
