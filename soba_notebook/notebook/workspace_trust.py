"""Workspace trust in the notebook: the one line that says what a project's config may not set yet,
``%soba trust`` (and ``--revoke``), and ``%soba status``'s "project config" line.

The rule and the record are the core's (:mod:`soba_notebook.trust`, :func:`~soba_notebook.config.project_trust`);
this module only says them. The one line comes from :class:`~soba_notebook.config.UntrustedConfigWarning`,
caught here and printed plainly (a Python warning would show a source line and file position that
mean nothing to the user) once per kernel for each distinct content of the line.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, MutableSet
from pathlib import Path

from ..config import RESTART_KEYS, SobaConfig, TrustReport, UntrustedConfigWarning, project_trust
from ..errors import ConfigError
from ..trust import record_trust, revoke_trust

__all__ = ["WarningRegistry", "config_saying_trust", "trust_command", "trust_status"]

#: Python's record of the warnings already shown (``warnings.warn_explicit``'s ``registry``).
WarningRegistry = dict[str | tuple[str, type[Warning], int], int]


def config_saying_trust(load: Callable[[], SobaConfig], said: MutableSet[str],
                        registry: WarningRegistry) -> SobaConfig:
    """``load()``, with its untrusted-settings line printed once (``said`` remembers it) and every
    other warning passed on as it was, shown once per ``registry`` as Python would."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = load()
    for warning in caught:
        if issubclass(warning.category, UntrustedConfigWarning):
            line = str(warning.message)
            if line not in said:
                said.add(line)
                print(line)
        else:
            warnings.warn_explicit(str(warning.message), warning.category, warning.filename, warning.lineno,
                                   registry=registry)
    return config


def _report(project_dir: Path) -> TrustReport | None:
    return project_trust(project_dir)  # the user's home, as load_config reads it


def trust_status(project_dir: Path) -> str:
    """``%soba status``'s line on the project's config: absent, nothing to trust, trusted, or which keys it ignores."""
    try:
        report = _report(project_dir)
    except ConfigError as exc:
        return str(exc)
    if report is None:
        return "none (.soba/config.json absent)"
    keys = ", ".join(key for key, _ in report.settings)
    problem = f" ({report.trust.problem})" if report.trust.problem else ""
    if not report.settings:
        return "nothing in it needs trust" + problem
    if report.trust.trusted:
        return f"trusted: {keys} honoured (%soba trust --revoke to undo)"
    why = "changed since you trusted it" if report.trust.state == "changed" else "not trusted"
    return f"{why}: {keys} ignored (review the file, then %soba trust){problem}"


def _when(keys: list[str], session_open: bool) -> str:
    """When trusted (or revoked) settings take effect in this kernel."""
    if not session_open:
        return "from the first turn"
    later = [key for key in keys if key in RESTART_KEYS]
    now = [key for key in keys if key not in RESTART_KEYS]
    parts = ([f"from the next turn: {', '.join(now)}"] if now else []) + \
        ([f"from the next session (%soba --new): {', '.join(later)}"] if later else [])
    return "; ".join(parts)


def trust_command(project_dir: Path, session_open: bool, revoke: bool) -> None:
    """``%soba trust [--revoke]``: trust the project config's current content (showing what that
    honours and when), or forget the trust."""
    try:
        report = _report(project_dir)
    except ConfigError as exc:
        print(f"not trusted: {exc}")
        return
    if report is None:
        print(f"no project config to trust: {project_dir / '.soba' / 'config.json'} does not exist "
              f"(~/.soba/config.json is your own and always trusted)")
        return
    keys = [key for key, _ in report.settings]
    if revoke:
        if not revoke_trust(report.trust.file, Path.home()):
            print(f"{report.file} was not trusted; nothing to revoke")
            return
        print(f"no longer trusted: {report.file}" + (
            f"; its {', '.join(keys)} are ignored {_when(keys, session_open)}" if keys else ""))
        return
    record_trust(report.trust, Path.home())
    print(f"trusted {report.file} (this content, sha256 {report.trust.sha256[:12]}…; a change to the file "
          f"makes it untrusted again; undo with %soba trust --revoke)")
    if not keys:
        print("it sets nothing that needs trust")
        return
    print("honoured now that you trust it:")
    for key, value in report.settings:
        print(f"  {key} = {json.dumps(value)}")
    print(f"they apply {_when(keys, session_open)}")
