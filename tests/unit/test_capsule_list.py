"""``%capsule list`` in a real InteractiveShell: a header over aligned columns, readable numbers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from IPython.core.interactiveshell import InteractiveShell

from soba_notebook.session import SessionStore
from unit.test_magics import _use_fake_server, shell  # noqa: F401  (the magics' one shell fixture)


def test_capsule_list_has_a_header_over_aligned_columns_and_explains_the_mark(
        shell: InteractiveShell, tmp_path: Path, fake_server: FakeServer,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 12)
    _use_fake_server(tmp_path, fake_server, keepRecentTokens=200)
    for i in range(6):  # enough history that a capsule replaces more than it costs
        fake_server.openai.enqueue(text=f"answer {i} " + "words " * 400)
        shell.run_line_magic("soba", f"question {i}")
    fake_server.handler = lambda path, body: {"text": '{"goal": "answer questions", "done": ["answered 6"]}'}
    shell.run_line_magic("compact", "")
    ck = next(e.data["checkpointId"] for e in _store(shell).entries() if e.type == "capsule")
    capsys.readouterr()

    shell.run_line_magic("capsule", "list")
    header, row, legend = capsys.readouterr().out.splitlines()

    assert header.split() == ["kind", "ref", "trigger", "quality", "tokens", "date", "(UTC)"]
    assert row.startswith("* checkpoint") and ck in row and " user " in row
    # every column starts where its header does; tokens are right-aligned under theirs
    for name, value in (("ref", ck), ("trigger", "user"), ("quality", "ok")):
        assert row.index(value) == header.index(name), (header, row)
    tokens = re.search(r"\d{1,3}(,\d{3})+", row)
    assert tokens is not None, row  # thousands separators
    assert tokens.end() == header.index("tokens") + len("tokens")
    assert re.search(r"  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d$", row), row  # no T, no milliseconds
    assert legend.startswith("* the capsule in force")


def test_capsule_list_with_nothing_yet_says_how_to_make_one(shell: InteractiveShell,  # noqa: F811
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    shell.run_line_magic("capsule", "list")
    assert capsys.readouterr().out.splitlines()[-1] == "no capsules yet: %compact or %capsule create make one"


def _store(shell: InteractiveShell) -> SessionStore:  # noqa: F811
    from soba_notebook.notebook import _LOADED

    handle = _LOADED[id(shell)].session.handle
    assert handle is not None
    return handle.store
