"""A comm pinned by ``notebook.busy_comms`` is answered while the kernel's main shell is busy.

The rule the approval cards and the live notebook channel rely on: a front end's message to a
SOBA comm reaches its handler while a foreground cell is still running (here: a cell that waits
for exactly that message), on SOBA's subshell thread, not after the cell ends.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kernel_support import Kernel

SETUP = r'''
import threading
from comm import create_comm
from soba_notebook.notebook.busy_comms import answer_while_busy, soba_subshell
heard = threading.Event()
handled_on = []
c = create_comm(target_name="soba.test", data={})
c.on_msg(lambda msg: (handled_on.append(threading.current_thread().name), heard.set()))
print("PINNED" if answer_while_busy(c) else "NOT-PINNED", c.comm_id)
'''


def _send_comm_msg(kernel: Kernel, comm_id: str, data: dict[str, Any]) -> None:
    kernel.kc.shell_channel.send(kernel.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": data}))


@pytest.fixture
def kernel(tmp_path: Path) -> Any:
    project = tmp_path / "project"
    project.mkdir()
    k = Kernel(project, tmp_path / "home")
    yield k
    k.close()


def test_pinned_comm_message_is_handled_while_a_foreground_cell_waits_for_it(kernel: Kernel) -> None:
    status, text = kernel.run(SETUP)
    assert status == "ok", text
    word, comm_id = text.split()
    assert word == "PINNED", text
    # the cell waits (bounded) for the message; without the pin the message would queue behind it
    busy = kernel.submit("print('HEARD' if heard.wait(120) else 'NOT HEARD', handled_on)")
    _send_comm_msg(kernel, comm_id, {"answer": "allow"})
    status, text = kernel.wait(busy)
    assert status == "ok", text
    assert text.startswith("HEARD"), text
    assert "subshell-" in text  # handled on SOBA's subshell thread, not the busy main thread


def test_an_unpinned_comm_message_waits_for_the_busy_cell(kernel: Kernel) -> None:
    """The control: the same message to a comm that is not pinned is not handled while the cell
    runs (so the first test proves the pin, not a kernel that answers comms anyway)."""
    status, text = kernel.run(SETUP.replace("answer_while_busy(c)", "True"))
    assert status == "ok", text
    comm_id = text.split()[1]
    busy = kernel.submit("import time; time.sleep(0.5); print('HEARD' if heard.wait(3) else 'NOT HEARD')")
    _send_comm_msg(kernel, comm_id, {"answer": "allow"})
    status, text = kernel.wait(busy)
    assert status == "ok", text
    assert text.startswith("NOT HEARD"), text
    deadline = time.monotonic() + 60
    while kernel.value("heard.is_set()") != "True":  # handled once the cell has ended
        assert time.monotonic() < deadline, "the message was never handled"


def test_one_subshell_serves_every_comm_of_the_kernel(kernel: Kernel) -> None:
    status, text = kernel.run(SETUP + "print(soba_subshell() == soba_subshell(), soba_subshell() is not None)")
    assert status == "ok", text
    assert text.split()[-2:] == ["True", "True"], text
