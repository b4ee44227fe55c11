"""Images the model sees: their size from header bytes, their tokens by each provider's rule, their
shape on both wires (loopback servers), and the budget rule that old images go before any text."""

from __future__ import annotations

import asyncio
import base64
import struct
import zlib
from pathlib import Path
from typing import Any

from compaction_support import make_engine, small_config, text_of
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook.agent.cell_outputs import outputs_for_model, table_summary
from soba_notebook.compaction.triggers import TurnState
from soba_notebook.image_tokens import (
    anthropic_image_tokens,
    image_pixel_size,
    openai_image_tokens,
    sent_image_rule,
)
from soba_notebook.providers import AnthropicProvider, ModelRequest
from soba_notebook.providers.openai import OpenAIChatProvider
from soba_notebook.session import SessionStore, ToolCall, assistant_message, tool_result, user_message
from soba_notebook.session.attachments import ImageAttachment, attachments_of
from soba_notebook.session.entries import Entry
from soba_notebook.tokens import TokenCounter


def png(width: int, height: int) -> bytes:
    """A real (tiny-bodied) PNG header: signature and IHDR chunk with its CRC."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return b"\x89PNG\r\n\x1a\n" + chunk


def jpeg(width: int, height: int) -> bytes:
    """SOI, an APP0 (JFIF) segment, then a baseline SOF0 frame header."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof


def attachment(width: int = 1000, height: int = 1000, cell: str = "c1") -> ImageAttachment:
    return ImageAttachment("image/png", base64.b64encode(png(width, height)).decode(), width, height, cell,
                           f"figure {width}×{height}")


def conversation(image: ImageAttachment) -> tuple[dict[str, Any], ...]:
    call = ToolCall("call_1", "notebook_read", {"cell_ids": ["c1"], "include_images": True})
    return (dict(user_message("plot it").message), dict(assistant_message("", [call]).message),
            dict(tool_result("call_1", "notebook_read", "cell c1: a plot", images=[image]).message))


# -- sizes and token rules -----------------------------------------------------------------------------
def test_png_and_jpeg_sizes_are_read_from_their_header_bytes() -> None:
    assert image_pixel_size(png(640, 480)) == (640, 480)
    assert image_pixel_size(jpeg(1920, 1080)) == (1920, 1080)
    assert image_pixel_size(b"GIF89a\x01\x00\x01\x00") is None  # neither: described, never guessed


def test_openai_tokens_follow_its_tile_rule() -> None:
    assert openai_image_tokens(4000, 3000, "low") == 85
    assert openai_image_tokens(1024, 1024) == 85 + 170 * 4    # 768×768: 2×2 tiles
    assert openai_image_tokens(2048, 4096) == 85 + 170 * 6    # 1024×2048 → 768×1536: 2×3 tiles
    assert openai_image_tokens(500, 300) == 85 + 170 * 1      # small: one tile, never scaled up


def test_anthropic_tokens_are_pixels_over_750_after_its_resize() -> None:
    assert anthropic_image_tokens(1000, 1000) == 1334          # ceil(1,000,000 / 750)
    assert anthropic_image_tokens(200, 150) == 40              # 30,000 / 750
    assert anthropic_image_tokens(3000, 2000) == 1589          # → 1337×891 (≤ 1.15 MP), ceil(1,191,267 / 750)
    assert anthropic_image_tokens(4000, 100) == 82             # long edge → 1568×39: ceil(61,152 / 750)


def test_vision_setting_overrides_what_the_provider_declares() -> None:
    assert sent_image_rule("auto", True, "anthropic") == "anthropic"
    assert sent_image_rule("auto", False, "openai") is None
    assert sent_image_rule("on", False, "openai") == "openai"
    assert sent_image_rule("off", True, "anthropic") is None


# -- the wires -----------------------------------------------------------------------------------------
def _send(provider: Any, messages: tuple[dict[str, Any], ...]) -> None:
    async def go() -> None:
        try:
            await provider.complete(ModelRequest("m", "be brief", messages))
        finally:
            await provider.aclose()
    asyncio.run(go())


def test_openai_request_sends_the_image_in_a_user_message_after_the_tool_result(fake_server: FakeServer) -> None:
    image = attachment()
    fake_server.openai.enqueue(text="a rising line")
    _send(OpenAIChatProvider("m", base_url=fake_server.openai_base_url, api_key="sk-test"), conversation(image))
    wire = fake_server.requests[0].body["messages"]
    roles = [m["role"] for m in wire]
    assert roles == ["system", "user", "assistant", "tool", "user"]
    assert wire[3] == {"role": "tool", "tool_call_id": "call_1", "content": "cell c1: a plot"}
    part = wire[4]["content"][1]
    assert part == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image.data}", "detail": "auto"}}


def test_anthropic_request_puts_the_image_block_inside_the_tool_result(fake_server: FakeServer) -> None:
    image = attachment()
    fake_server.anthropic.enqueue(text="a rising line")
    _send(AnthropicProvider("m", base_url=fake_server.anthropic_base_url, api_key="sk-ant-test"), conversation(image))
    result = fake_server.requests[0].body["messages"][2]["content"][0]
    assert result["type"] == "tool_result"
    assert result["content"] == [
        {"type": "text", "text": "cell c1: a plot"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": image.data}}]


def test_a_model_without_vision_gets_the_one_line_description(fake_server: FakeServer) -> None:
    counter = TokenCounter("gpt-4o")
    counter.set_images(sent_image_rule("off", True, "openai"), 8)
    messages = tuple(dict(m) for m in counter.model_messages(conversation(attachment())))
    fake_server.openai.enqueue(text="ok")
    _send(OpenAIChatProvider("m", base_url=fake_server.openai_base_url, api_key="sk-test"), messages)
    wire = fake_server.requests[0].body["messages"]
    assert [m["role"] for m in wire] == ["system", "user", "assistant", "tool"]
    assert wire[3]["content"] == "cell c1: a plot\n[image image/png 1000×1000 from cell c1: figure 1000×1000]"


# -- counting and the budget ---------------------------------------------------------------------------
def test_counted_image_tokens_equal_the_providers_rule() -> None:
    counter = TokenCounter("gpt-4o")
    messages = conversation(attachment(2048, 4096))
    counter.set_images("openai", 8)
    assert counter.image_surcharge(messages) == 1105
    counter.set_images("anthropic", 8)
    assert counter.image_surcharge(messages) == anthropic_image_tokens(2048, 4096)
    counter.set_images(None, 8)
    assert counter.image_surcharge(messages) == 0


def _forty_figures(store: SessionStore) -> None:
    store.append(user_message("plot the 40 runs, one by one"))
    for n in range(40):
        call = ToolCall(f"call_{n}", "notebook_read", {"cell_ids": [f"cell-{n}"], "include_images": True})
        store.append(assistant_message(f"run {n}", [call]))
        store.append(tool_result(call.id, "notebook_read", f"cell cell-{n}: " + text_of(40, n),
                                 images=[attachment(800, 600, f"cell-{n}")]))


def test_old_images_go_first_and_forty_figures_stay_under_the_hard_limit(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    store, engine, _ = make_engine(tmp_path, config)
    engine.counter = engine.tracker.counter = TokenCounter("gpt-4o")  # its own image policy, not the shared one
    engine.inputs._count = engine.counter.count_entry
    engine.counter.set_images("anthropic", 8)
    _forty_figures(store)
    whole = 40 * anthropic_image_tokens(800, 600)  # 640 each
    assert whole > config.hard_limit  # every figure sent would not fit

    check = asyncio.run(engine.preflight(TurnState()))
    assert check.effective <= config.hard_limit
    assert not [e for e in store.entries() if e.type == "capsule"]  # no text was summarised
    sent = engine.model_messages()
    shown = [a.cell_id for m in sent for a in attachments_of(m)]
    assert shown == [f"cell-{n}" for n in range(32, 40)]  # the newest eight
    oldest = next(m for m in sent if m.get("toolCallId") == "call_0")
    assert "notebook_read cell cell-0 include_images" in oldest["content"]
    assert check.effective >= 8 * anthropic_image_tokens(800, 600)  # the eight sent are counted


def test_a_transcript_without_attachments_reads_as_one_without_images() -> None:
    old = Entry.from_json({"type": "message", "id": "a", "parentId": None, "ts": "t",
                           "message": {"role": "tool", "toolCallId": "x", "content": "hi", "images": 2}})
    assert attachments_of(old.message) == ()
    damaged = {"role": "tool", "attachments": [{"mime": "image/png"}, attachment().to_json()]}
    assert [a.width for a in attachments_of(damaged)] == [1000]


# -- outputs -------------------------------------------------------------------------------------------
def test_outputs_give_text_clipped_a_table_summarised_and_images_attached() -> None:
    rows = "\n".join(f"{i:<5} {i * 2:>5} {i % 7:>5}" for i in range(10_000))
    frame_plain = "      a     b     c\n" + rows[:2_000] + "\n\n[10000 rows x 3 columns]"
    outputs = [
        {"output_type": "stream", "name": "stdout", "text": "x" * 80 + "\n" + "line\n" * 1_000_000},
        {"output_type": "execute_result", "execution_count": 1,
         "data": {"text/plain": frame_plain, "text/html": '<div><table border="1" class="dataframe">' + "<tr>" * 5000}},
        {"output_type": "display_data", "data": {"image/png": base64.b64encode(png(640, 480)).decode(),
                                                  "text/plain": "<Figure size 640x480 with 1 Axes>"}},
        {"output_type": "error", "ename": "ValueError", "evalue": "bad input", "traceback": ["frame"] * 50},
    ]
    text, images = outputs_for_model(outputs, cell_id="c9")
    assert len(text) < 6_000                        # 5 MB of stream output and a 10,000-row frame, clipped
    assert "lines omitted" in text
    assert "[table 10,000 rows × 3 columns]" in text and "<table" not in text
    assert "ValueError: bad input" in text
    assert [(i.width, i.height, i.cell_id) for i in images] == [(640, 480, "c9")]
    assert images[0].line in text


def test_a_table_without_pandas_html_is_not_summarised_as_one() -> None:
    assert table_summary({"text/plain": "[3 rows x 2 columns]"}) is None
