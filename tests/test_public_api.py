"""The public surface: names that say what they are, and exactly what docs/API.md lists."""

from __future__ import annotations

import importlib
import importlib.util
import types

import pytest


def test_the_session_subpackage_is_not_shadowed_by_a_function() -> None:
    import soba_notebook
    import soba_notebook.session as session_package

    assert isinstance(session_package, types.ModuleType) and session_package.SessionStore is soba_notebook.SessionStore
    assert isinstance(soba_notebook.session, types.ModuleType)
    assert "current_store" in soba_notebook.__all__


def test_opening_an_agent_on_a_project_lives_in_agent_project_not_a_third_thing_called_session() -> None:
    from soba_notebook.agent import open_agent

    assert open_agent.__module__ == "soba_notebook.agent.project"
    assert importlib.util.find_spec("soba_notebook.agent.session") is None


def test_current_store_says_how_to_load_the_extension_outside_a_kernel() -> None:
    import soba_notebook

    with pytest.raises(RuntimeError, match="%load_ext soba_notebook"):
        soba_notebook.current_store()
