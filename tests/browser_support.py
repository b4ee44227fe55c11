"""Real-browser test harness: JupyterLab on loopback, driven by Debian's Chromium via Playwright.

Owns everything a browser test needs besides its assertions:

* :func:`browser_problems` / :func:`require_browser` — is Chromium at ``/usr/bin/chromium`` and is
  Playwright's Python API importable? A missing piece is an error naming
  ``scripts/install-browser.sh``, never a silent skip.
* :func:`jupyter_lab` — a private JupyterLab server: 127.0.0.1, a free port, a random token, no
  browser, its own root, config, runtime, settings and workspace directories, no news or update
  checks (the machine has no internet), and ``PYTHONPATH`` pointing at this checkout so kernels
  import the working tree.
* :func:`chromium_context` — Playwright on the system Chromium (``executable_path``; never
  ``playwright install``) with the flags this machine needs and a fresh user-data-dir.
* :class:`LabNotebook`, :func:`open_notebook_in_lab`, :func:`run_notebook_in_lab` — copy a
  notebook into the server root, open it, wait for the kernel, "Run > Run All Cells", wait for a
  selector, inspect, screenshot. The notebook is a parameter, so the quickstart notebook can
  replace the demo one without touching this file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kernel_support import trust_project_config

if TYPE_CHECKING:  # playwright is imported lazily so a missing install gives a clear message
    from playwright.sync_api import BrowserContext, ConsoleMessage, Page

__all__ = [
    "ARTIFACTS",
    "CHROMIUM",
    "CHROMIUM_FLAGS",
    "INSTALL_HINT",
    "REPO",
    "BrowserUnavailable",
    "LabNotebook",
    "LabRun",
    "LabServer",
    "browser_problems",
    "chromium_context",
    "jupyter_lab",
    "open_notebook_in_lab",
    "require_browser",
    "run_notebook_in_lab",
]

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = Path(os.environ.get("SOBA_CHROMIUM", "/usr/bin/chromium"))
#: Without the background-networking flags Chromium keeps dialling Google on this closed network.
CHROMIUM_FLAGS: tuple[str, ...] = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
INSTALL_HINT = (
    "run scripts/install-browser.sh (as root: installs Debian's chromium with apt-get when "
    "/usr/bin/chromium is missing, then `pip install playwright jupyterlab`; it never runs "
    "`playwright install`, which downloads browsers and fails here)"
)


class BrowserUnavailable(RuntimeError):
    """Chromium, Playwright or JupyterLab is missing; the message says how to install them."""


def browser_problems() -> list[str]:
    """What is missing for a browser test (empty when everything is in place)."""
    problems = []
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        problems.append(f"Chromium not found at {CHROMIUM}")
    for module, package in (("playwright.sync_api", "playwright"), ("jupyterlab", "jupyterlab"),
                            ("anywidget", "anywidget")):
        try:
            __import__(module)
        except ImportError as exc:
            problems.append(f"Python package {package!r} is not importable ({exc})")
    return problems


def require_browser() -> None:
    """Raise :class:`BrowserUnavailable` naming every missing piece and the install script."""
    problems = browser_problems()
    if problems:
        raise BrowserUnavailable("browser test cannot run: " + "; ".join(problems) + f". To fix: {INSTALL_HINT}.")


# -- JupyterLab server ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LabServer:
    """A running private JupyterLab."""

    port: int
    token: str
    root_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        """``path`` (e.g. ``lab/tree/demo.ipynb``) on this server, with the token."""
        return f"{self.base_url}/{path.lstrip('/')}?token={self.token}"

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _lab_settings(settings_dir: Path, theme: str | None) -> None:
    """User settings that keep Lab quiet and offline (no news, no update checks), and a theme."""
    apputils = settings_dir / "@jupyterlab" / "apputils-extension"
    apputils.mkdir(parents=True, exist_ok=True)
    (apputils / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    if theme is not None:
        (apputils / "themes.jupyterlab-settings").write_text(json.dumps({"theme": theme}))


def _lab_env(state_dir: Path, extra: dict[str, str] | None, theme: str | None) -> dict[str, str]:
    env = dict(os.environ)
    dirs = {
        "JUPYTER_CONFIG_DIR": state_dir / "config",
        "JUPYTER_DATA_DIR": state_dir / "data",
        "JUPYTER_RUNTIME_DIR": state_dir / "runtime",
        "JUPYTERLAB_SETTINGS_DIR": state_dir / "lab-settings",
        "JUPYTERLAB_WORKSPACES_DIR": state_dir / "lab-workspaces",
        "IPYTHONDIR": state_dir / "ipython",
    }
    for name, path in dirs.items():
        path.mkdir(parents=True, exist_ok=True)
        env[name] = str(path)
    _lab_settings(dirs["JUPYTERLAB_SETTINGS_DIR"], theme)
    # A home of the run's own whose ~/.soba/config.json only turns approvals off: these tests are
    # about other things and no one answers a card (a project config that sets tools.approval, as
    # test_browser_approvals.py's does, wins over it). Matplotlib keeps the real home's font cache.
    home = state_dir / "home"
    (home / ".soba").mkdir(parents=True, exist_ok=True)
    (home / ".soba" / "config.json").write_text('{"tools": {"approval": "never"}}')
    env.setdefault("MPLCONFIGDIR", str(Path.home() / ".config" / "matplotlib"))
    env["HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["JUPYTER_PLATFORM_DIRS"] = "1"
    env.pop("ANYWIDGET_HMR", None)
    env.update(extra or {})
    return env


def _wait_ready(server: LabServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    status_url = server.url("api/status")
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with code {server.process.returncode}:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(status_url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.25)
    raise TimeoutError(f"JupyterLab did not answer {server.base_url} within {timeout:.0f}s:\n{server.log_tail()}")


@contextlib.contextmanager
def jupyter_lab(root_dir: Path, *, state_dir: Path | None = None, env: dict[str, str] | None = None,
                theme: str | None = None, timeout: float = 90.0,
                extra_args: Sequence[str] = ()) -> Iterator[LabServer]:
    """Start JupyterLab serving ``root_dir``; stop it (and its kernels) on exit.

    ``theme`` is a JupyterLab theme name (``"JupyterLab Light"``, ``"JupyterLab Dark"``).
    """
    root_dir = root_dir.resolve()
    state_dir = (state_dir or root_dir.parent / f"{root_dir.name}-lab-state").resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    log_path = state_dir / "jupyterlab.log"
    token = secrets.token_hex(24)
    port = _free_port()
    command = [
        sys.executable, "-m", "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root_dir}",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
        *(["--allow-root"] if os.geteuid() == 0 else []),  # CI containers run as root
        *extra_args,
    ]
    lab_env = _lab_env(state_dir, env, theme)
    # the root's .soba/config.json (a loopback model server) is trusted, as its user would trust it
    trust_project_config(root_dir, Path(lab_env["HOME"]))
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, cwd=root_dir, env=lab_env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    server = LabServer(port=port, token=token, root_dir=root_dir, log_path=log_path, process=process)
    try:
        _wait_ready(server, timeout)
        yield server
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the server we started (by its process group, so its kernels go too)."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, 15)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 9)
        process.wait(timeout=5)


# -- Chromium ------------------------------------------------------------------------------------


@contextlib.contextmanager
def chromium_context(profile_dir: Path, *, viewport: tuple[int, int] = (1280, 900)) -> Iterator[BrowserContext]:
    """Headless Debian Chromium through Playwright, with a fresh user-data-dir at ``profile_dir``."""
    require_browser()
    from playwright.sync_api import sync_playwright

    if profile_dir.exists():
        shutil.rmtree(profile_dir)
    profile_dir.mkdir(parents=True)
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            user_data_dir=str(profile_dir),
            executable_path=str(CHROMIUM),
            headless=True,
            args=list(CHROMIUM_FLAGS),
            viewport={"width": viewport[0], "height": viewport[1]},
        )
        try:
            yield context
        finally:
            context.close()


# -- a notebook in JupyterLab --------------------------------------------------------------------


_KERNEL_IDLE_JS = """
() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return false;
  const name = panel.querySelector('.jp-Toolbar-kernelName, .jp-KernelName');
  const indicator = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  const status = document.querySelector('#jp-main-statusbar');
  return Boolean(name && !/No Kernel/i.test(name.textContent)
    && indicator && indicator.dataset.status === 'idle'
    && status && /\\| Idle\\b/.test(status.innerText));
}
"""


@dataclass
class LabNotebook:
    """An open notebook in JupyterLab, with what the page logged."""

    page: Page
    server: LabServer
    name: str
    console: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    #: every comm message on the page's kernel websockets, both ways, in order (:func:`comm_frame`)
    comm_log: list[dict[str, Any]] = field(default_factory=list)

    def wait_kernel_idle(self, timeout: float = 90.0) -> None:
        """Wait until the notebook's kernel has started and is idle."""
        # The execution indicator says "idle" before any kernel exists, so also require a kernel
        # name in the toolbar and "<kernel> | Idle" in the status bar.
        self.page.wait_for_function(_KERNEL_IDLE_JS, timeout=timeout * 1000)

    def wait_cells_shown(self, first_lines: Sequence[str], timeout: float = 90.0) -> None:
        """Wait until every code cell's editor shows its first line (``first_lines``, in order).

        JupyterLab 4 puts a cell in the page before its editor: the editor comes when the cell
        nears the viewport or the browser is idle, later on a loaded machine. A test that finds
        a cell by its text must wait for the texts, not for the first cell (the CI run of stop 32 read the
        cells while the ``%budget`` cell's editor was still empty).
        """
        self.page.wait_for_function(_CODE_CELLS_SHOWN_JS, arg=list(first_lines), timeout=timeout * 1000)

    def run_all_cells(self) -> None:
        """Run > Run All Cells, through the menu bar as a user would."""
        menubar = self.page.locator("#jp-MainMenu li[role='menuitem']")
        menubar.filter(has_text=re.compile(r"^\s*Run\s*$")).first.click()
        self.page.locator(".lm-Menu .lm-Menu-itemLabel").filter(
            has_text=re.compile(r"^\s*Run All Cells\s*$")).first.click()

    def screenshot(self, path: Path, selector: str | None = None) -> Path:
        """Save a PNG of the page (or of the first ``selector`` match) to ``path``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        if selector is None:
            self.page.screenshot(path=str(path))
        else:
            self.page.locator(selector).first.screenshot(path=str(path))
        return path

    def diagnostics(self) -> str:
        """Console output, page errors and the server log tail, for failure messages."""
        return ("\n--- page errors ---\n" + "\n".join(self.page_errors or ["(none)"])
                + "\n--- browser console (last 40) ---\n" + "\n".join(self.console[-40:] or ["(none)"])
                + "\n--- JupyterLab log (tail) ---\n" + self.server.log_tail())


def comm_frame(payload: str | bytes) -> dict[str, Any] | None:
    """A kernel websocket frame's comm message, summed up (``msg_type``, ``comm_id``, the header's
    ``subshell_id``, ``data``), or None for any other message. Reads both of Jupyter's websocket
    forms: JSON text, and the binary ``v1.kernel.websocket.jupyter.org`` frame (a count of offsets,
    the offsets, then channel, header, parent header, metadata, content)."""
    try:
        if isinstance(payload, str):
            msg = json.loads(payload)
            header, content, channel = msg.get("header") or {}, msg.get("content") or {}, msg.get("channel")
        else:
            count = int.from_bytes(payload[:8], "little")
            offsets = [int.from_bytes(payload[8 + 8 * i:16 + 8 * i], "little") for i in range(count)]
            parts = [payload[offsets[i]:offsets[i + 1] if i + 1 < count else len(payload)] for i in range(count)]
            channel = parts[0].decode()
            header, content = json.loads(parts[1]), json.loads(parts[4])
    except (ValueError, IndexError, UnicodeDecodeError, AttributeError):
        return None
    kind = header.get("msg_type", "")
    if not str(kind).startswith("comm_"):
        return None
    return {"channel": channel, "msg_type": kind, "comm_id": content.get("comm_id"),
            "subshell_id": header.get("subshell_id"), "data": content.get("data")}


def _log_comms(page: Page, log: list[dict[str, Any]]) -> None:
    """Keep every comm message the page sends to or receives from a kernel (a failing widget test
    can then say which side dropped a message)."""
    started = time.monotonic()

    def keep(direction: str, payload: str | bytes) -> None:
        frame = comm_frame(payload)
        if frame is not None:
            log.append({"t": round(time.monotonic() - started, 2), "dir": direction, **frame})

    def on_socket(ws: Any) -> None:
        if "/api/kernels/" in ws.url:
            ws.on("framesent", lambda payload: keep("sent", payload))
            ws.on("framereceived", lambda payload: keep("received", payload))

    page.on("websocket", on_socket)


# True once the open notebook's code cells show ``first_lines`` as their first lines, in order (the
# first line only: CodeMirror draws a long cell's lower lines when they near the viewport).
_CODE_CELLS_SHOWN_JS = """
(firstLines) => {
  const cells = [...document.querySelectorAll(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell.jp-CodeCell')];
  const shown = cells.map((el) => {
    const line = el.querySelector('.jp-InputArea-editor .cm-line');
    return line === null ? null : line.textContent;
  });
  return shown.length === firstLines.length && shown.every((text, i) => text === firstLines[i]);
}
"""


def _code_first_lines(notebook_path: Path) -> list[str]:
    """The first line of each code cell of the notebook file, as its editor shows it."""
    import nbformat  # a test dependency, imported here like playwright: the harness imports without it

    cells = nbformat.read(notebook_path, as_version=4).cells
    return [c.source.split("\n", 1)[0] for c in cells if c.cell_type == "code"]


@contextlib.contextmanager
def open_notebook_in_lab(notebook_path: Path, workdir: Path, *, env: dict[str, str] | None = None,
                         theme: str | None = None, extra_files: Sequence[Path] = (),
                         timeout: float = 120.0) -> Iterator[LabNotebook]:
    """Copy ``notebook_path`` (and ``extra_files``) into a fresh server root and open it in Lab.

    Yields once the notebook is shown and its kernel is idle; nothing has been run yet.
    """
    require_browser()
    root = workdir / "lab-root"
    root.mkdir(parents=True, exist_ok=True)
    for path in (notebook_path, *extra_files):
        shutil.copy2(path, root / path.name)
    with jupyter_lab(root, state_dir=workdir / "lab-state", env=env, theme=theme, timeout=timeout) as server, \
            chromium_context(workdir / "chromium-profile") as context:
        page = context.pages[0] if context.pages else context.new_page()
        page.set_default_timeout(timeout * 1000)
        notebook = LabNotebook(page=page, server=server, name=notebook_path.name)

        def on_console(message: ConsoleMessage) -> None:
            notebook.console.append(f"[{message.type}] {message.text}")

        page.on("console", on_console)
        page.on("pageerror", lambda error: notebook.page_errors.append(str(error)))
        _log_comms(page, notebook.comm_log)
        page.goto(server.url(f"lab/tree/{notebook_path.name}"))
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=timeout * 1000)
        notebook.wait_kernel_idle(timeout)
        notebook.wait_cells_shown(_code_first_lines(notebook_path), timeout)
        yield notebook


@dataclass(frozen=True)
class LabRun:
    """What :func:`run_notebook_in_lab` saw: the inspector's value and the page's logs."""

    value: Any
    console: tuple[str, ...]
    page_errors: tuple[str, ...]
    screenshot: Path | None


def run_notebook_in_lab(
    notebook_path: Path,
    wait_selector: str,
    workdir: Path,
    *,
    before_run: Callable[[LabNotebook], None] | None = None,
    after_run: Callable[[LabNotebook], None] | None = None,
    inspect: Callable[[LabNotebook], T] | None = None,
    screenshot: Path | None = None,
    screenshot_selector: str | None = None,
    timeout: float = 180.0,
    env: dict[str, str] | None = None,
    theme: str | None = None,
) -> LabRun:
    """Open ``notebook_path`` in JupyterLab, run all cells, wait for ``wait_selector``, inspect.

    ``before_run`` runs once the kernel is idle (e.g. to install a page-side recorder);
    ``after_run`` right after "Run All Cells" was clicked (e.g. to catch an intermediate state);
    ``inspect`` runs after ``wait_selector`` appeared and its return value is ``LabRun.value``;
    ``screenshot`` is saved last (of ``screenshot_selector`` if given, else the page). A timeout
    raises with the page's console, errors and the server log.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    with open_notebook_in_lab(notebook_path, workdir, env=env, theme=theme) as notebook:
        if before_run is not None:
            before_run(notebook)
        notebook.run_all_cells()
        try:
            if after_run is not None:
                after_run(notebook)
            notebook.page.wait_for_selector(wait_selector, state="attached", timeout=timeout * 1000)
        except PlaywrightTimeout as exc:
            with contextlib.suppress(Exception):
                notebook.screenshot(ARTIFACTS / f"{notebook_path.stem}-timeout.png")
            raise TimeoutError(f"timed out after Run All Cells (after_run, or waiting {timeout:.0f}s for "
                               f"{wait_selector!r}): {exc}{notebook.diagnostics()}") from exc
        value = inspect(notebook) if inspect is not None else None
        shot = notebook.screenshot(screenshot, screenshot_selector) if screenshot is not None else None
        return LabRun(value=value, console=tuple(notebook.console), page_errors=tuple(notebook.page_errors),
                      screenshot=shot)
