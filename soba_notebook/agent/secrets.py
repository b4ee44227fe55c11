"""Keep secrets from the environment out of everything the agent writes.

API keys live only in environment variables. A tool can still echo one (``python -c 'import
os; print(os.environ)'``); before any text reaches the transcript, a spill file or the screen it
passes through the one scrubber, :class:`soba_notebook.scrub.Scrubber` (secret variables'
values and well-known token shapes). :func:`current_scrubber` builds it from the environment as
it is *now*: the agent calls it at the start of every turn, so a secret set after start
(``%env MY_TOKEN=...``) is scrubbed from the next turn on; after every ``python`` or ``shell``
run it is rebuilt again (keeping the turn's secrets), before that run's result is written.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..scrub import Scrubber

__all__ = ["Scrubber", "current_scrubber"]


def current_scrubber(environ: Mapping[str, str] | None = None, extra_names: tuple[str, ...] = ()) -> Scrubber:
    """The scrubber for the environment as it is now, plus the named variables (the model's key)."""
    return Scrubber.from_environ(environ, extra_names=extra_names)
