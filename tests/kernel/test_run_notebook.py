"""scripts/run_notebook.py, the quickstart's headless runner: a real kernel, and a clean terminal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
from conftest import REPO, repo_python_env


def test_headless_run_prints_only_its_own_line_and_no_kernel_transport_warning(tmp_path: Path) -> None:
    source = tmp_path / "tiny.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import os\nprint(6 * 7, os.getcwd())")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, source)
    target = tmp_path / "build" / "tiny.executed.ipynb"

    done = subprocess.run([sys.executable, str(REPO / "scripts" / "run_notebook.py"), str(source), str(target)],
                          env=repo_python_env(), capture_output=True, text=True, timeout=300)

    assert done.returncode == 0, done.stderr
    # ipykernel warns "Kernel is running over TCP without encryption" at every start: the runner keeps
    # the kernel's log to errors, so the terminal shows the runner's own line and nothing else
    assert "TCP" not in done.stderr + done.stdout and "encryption" not in done.stderr
    assert done.stderr == ""
    assert done.stdout == f"executed {source} -> {target} (1 cells)\n"
    (output,) = nbformat.read(target, as_version=4).cells[0].outputs
    assert output["text"] == f"42 {target.parent}\n"  # ran, in the target's folder


_FLAKY_KERNEL = """import os, sys
starts = os.environ["SOBA_TEST_KERNEL_STARTS"]
with open(starts, "a") as f:
    f.write("start\\n")
if os.environ.get("SOBA_TEST_KERNEL_DIES_FIRST") and open(starts).read().count("start") == 1:
    sys.exit("Address already in use (a stand-in: the kernel dies before it runs anything)")
os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *sys.argv[1:]])
"""


def _run_with_kernel(tmp_path: Path, kernel: str, kernel_source: str, code: str,
                     **env: str) -> subprocess.CompletedProcess[str]:
    """The runner on a one-cell notebook (``code``) in a kernel of the test's own: ``kernel_source``
    runs as the kernel's program, ``env`` beside the usual environment; the output goes to out.ipynb."""
    spec = tmp_path / "jupyter" / "kernels" / kernel
    spec.mkdir(parents=True)
    (spec / "kernel.py").write_text(kernel_source)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, str(spec / "kernel.py"), "-f", "{connection_file}"], "display_name": kernel,
        "language": "python"}))
    source = tmp_path / "one.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)]), source)
    script = f"import sys; sys.argv = ['run_notebook.py']; " \
             f"sys.path.insert(0, {str(REPO / 'scripts')!r}); import run_notebook; " \
             f"sys.exit(run_notebook.main({str(source)!r}, {str(tmp_path / 'out.ipynb')!r}, 120, {kernel!r}))"
    return subprocess.run([sys.executable, "-c", script], env=dict(repo_python_env(), JUPYTER_PATH=str(
        tmp_path / "jupyter"), **env), capture_output=True, text=True, timeout=300)


def _flaky_kernel_run(tmp_path: Path, code: str, *, dies_first: bool) -> tuple[subprocess.CompletedProcess[str], int]:
    """The runner on a one-cell notebook whose kernel counts its starts (and dies on the first)."""
    starts = tmp_path / "starts.txt"
    done = _run_with_kernel(tmp_path, "flaky", _FLAKY_KERNEL, code, SOBA_TEST_KERNEL_STARTS=str(starts),
                            **({"SOBA_TEST_KERNEL_DIES_FIRST": "1"} if dies_first else {}))
    return done, starts.read_text().count("start") if starts.exists() else 0


def test_a_kernel_that_dies_before_running_any_cell_is_started_again_and_the_notebook_runs(tmp_path: Path) -> None:
    done, starts = _flaky_kernel_run(tmp_path, "print(6 * 7)", dies_first=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert starts == 2
    assert "the kernel stopped before running any cell" in done.stderr and "attempt 2 of 3" in done.stderr
    (output,) = nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[0].outputs
    assert output["text"] == "42\n"


def test_a_notebook_whose_cell_fails_is_never_run_again(tmp_path: Path) -> None:
    done, starts = _flaky_kernel_run(tmp_path, "raise ValueError('the cell fails')", dies_first=False)
    assert done.returncode != 0 and "the cell fails" in done.stderr, done.stderr[-3000:]
    assert starts == 1, "a cell ran: starting again would run it twice"
    assert "starting a fresh one" not in done.stderr


# A kernel as a loaded machine makes it: each cell's reply goes out at once, its idle status 6 s
# later (dispatch_shell publishes "idle" only after the handler returns).
_LATE_IDLE_KERNEL = """import time
from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelapp import IPKernelApp

class LateIdleKernel(IPythonKernel):
    async def execute_request(self, stream, ident, parent):
        await super().execute_request(stream, ident, parent)
        time.sleep(6)

IPKernelApp.launch_instance(kernel_class=LateIdleKernel)
"""


def test_output_that_comes_after_the_cells_reply_is_kept_and_the_terminal_stays_quiet(tmp_path: Path) -> None:
    # printed 5 s after the cell started: after its reply, before its idle status (nbclient's own
    # default stops listening 4 s after the reply and drops it with a warning)
    done = _run_with_kernel(tmp_path, "lateidle", _LATE_IDLE_KERNEL,
                            "import threading\nthreading.Timer(5, lambda: print('late output', flush=True)).start()")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == ""
    (output,) = nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[0].outputs
    assert output["text"] == "late output\n"
