"""Real-model tier of bench/continuity.py: one transcript replayed with SmolLM2 summarizing on each
local server (llama-cpp-python and llama.cpp's llama-server); no capsule rated ``ok`` may hold a
user constraint (or goal) that no user message of the history it replaced supports."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, TRANSCRIPTS
from realmodel_support import IDLE_WAIT_LIMIT, MODEL_ALIAS, project_config, running_llama_server, running_server

from soba_notebook.compaction.summarize import ModelSummarizer, SummaryCall, capsule_schema
from soba_notebook.providers.base import ModelRequest
from soba_notebook.providers.factory import make_provider
from soba_notebook.tokens import TokenCounter

sys.path.insert(0, str(REPO / "bench"))

import continuity  # bench/ is not a package: imported from its folder

SERVERS: dict[str, Callable[[Path], AbstractContextManager[Any]]] = {
    "llama-cpp-python": lambda log: running_server(log),
    "llama-server": lambda log: running_llama_server(log),
}
SMALL = TRANSCRIPTS / "swe-agent" / "trajectories" / "demonstrations" / "function_calling_simple.traj"


@pytest.fixture(params=sorted(SERVERS))
def summarizer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ModelSummarizer]:
    with SERVERS[request.param](tmp_path / "server.log") as server:
        provider = make_provider(project_config(server)["model"])  # type: ignore[arg-type]

        async def complete(call: SummaryCall) -> str:
            reply = await provider.complete(ModelRequest(
                model=MODEL_ALIAS, system=call.system, messages=({"role": "user", "content": call.prompt},),
                max_output_tokens=call.max_output_tokens, purpose="summarize", temperature=0,
                response_schema=capsule_schema(call.max_output_tokens)))
            return reply.text

        model = ModelSummarizer(complete, TokenCounter("gpt-4o"), context_window=server.context)
        model.fit(server.context)
        yield model


def test_no_capsule_rated_ok_holds_a_user_constraint_no_user_message_supports(
        summarizer: ModelSummarizer, request: pytest.FixtureRequest) -> None:
    # hard limit 10,000 - 800 - 8,192 (the seed's reserve) = 1,008, under the transcript's ~1,600 tokens
    # of context, and 100 tokens kept verbatim: it compacts (twice with the offline engine)
    # the tier's wait, not the 15 s default: past it the model's capsule is abandoned for the local one
    # and nothing here would check what the model wrote
    server = request.node.callspec.params["summarizer"]
    row = continuity.run_one(SMALL, (10000, 800, 100), summarizer, f"SmolLM2-135M on {server}",
                             timeout_ms=round(IDLE_WAIT_LIMIT * 1000))
    print(f"\n{continuity.table([row])}")  # the bench's row for docs/BENCHMARKS.md (pytest -s shows it)
    assert row.capsules, "the replay compacted nothing: the window is too large for the transcript"
    assert any(c.quality != "degraded" for c in row.capsules), "no capsule the model wrote was kept to check"
    for capsule in row.capsules:
        if capsule.quality == "ok":
            assert "constraints" not in capsule.held and "goal" not in capsule.held, capsule.held
