"""The offline demo model: a deterministic model that needs no network, no key and no server.

It sits beside the real providers (:mod:`soba_notebook.providers`) behind the same
:class:`~soba_notebook.providers.base.Provider` interface, and is what answers when no model
provider is configured (``model.provider: scripted``, the default), in tests and in the demos.
It is not a language model and always says so.

``scripted`` serves requests (streaming, usage, overflow, the test knobs); ``scenario`` decides
every next step of its fixed coding demo from the request's messages; ``scenario_tasks`` (with
the verbatim demo file texts in ``scenario_files/``) is the demo project as data; ``summary``
answers summarize requests with the real extractor (:mod:`soba_notebook.compaction.extract`) over
the entries the request carries. It imports the provider interface and the compaction extractor;
the real providers import nothing of it except the factory, which builds it by name.
"""

from __future__ import annotations

from .scenario_tasks import DEMO_PROMPTS
from .scripted import LABEL, MARKER, ScriptedModel

__all__ = ["DEMO_PROMPTS", "LABEL", "MARKER", "ScriptedModel"]
