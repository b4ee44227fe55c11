"""Where ``%budget --side`` puts the live widget: JupyterLab's right sidebar, never a split of the
notebook's area; and nowhere (the caller shows it inline) when no Jupyter server shows the notebook."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sidecar  # the [notebook] and [test] extras install it

from soba_notebook.notebook import sidepanel


@pytest.fixture
def panels() -> Iterator[dict[str, object]]:
    yield sidepanel._panels
    for key in list(sidepanel._panels):
        sidepanel._panels.pop(key).close()


def _widget() -> object:
    import ipywidgets

    return ipywidgets.HTML("budget")


def test_side_panel_docks_in_the_right_sidebar_not_a_split_of_the_main_area(
        panels: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JPY_SESSION_NAME", "work/notebook.ipynb")
    assert sidepanel.open_side_panel(_widget(), "20261201-000000-abcd1234") is True
    panel = panels["20261201-000000-abcd1234"]
    assert isinstance(panel, sidecar.Sidecar)
    # sidecar's front end adds anchor "right" to the shell's right area (the sidebar); every
    # "split-*" and "tab-*" anchor is a dock position in the main area beside the notebook
    assert panel.anchor == "right"
    assert panel.title == "SOBA budget · 20261201-000000-abcd1234"


def test_side_panel_is_opened_once_per_session_and_reused(panels: dict[str, object],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JPY_SESSION_NAME", "notebook.ipynb")
    assert sidepanel.open_side_panel(_widget(), "one") and sidepanel.open_side_panel(_widget(), "one")
    first = panels["one"]
    assert sidepanel.open_side_panel(_widget(), "two")
    assert list(panels) == ["one", "two"] and panels["one"] is first


def test_headless_kernel_gets_no_side_panel_and_the_widget_stays_inline(
        panels: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    """nbclient, nbconvert and papermill start kernels without a Jupyter server: no Lab shell exists,
    so a side panel (and a hint pointing at it) would be invisible; the caller displays inline."""
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert sidepanel.open_side_panel(_widget(), "headless") is False
    assert panels == {}
