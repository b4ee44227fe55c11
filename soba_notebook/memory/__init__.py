"""Portable Capsules and Project Memory: capsules that outlive the session that made them.

* :mod:`.portable` — the ``.capsule.md`` file format (``load(export(pc)) == pc``);
* :mod:`.redact` — no environment secret or token-shaped string reaches a capsule file;
* :mod:`.project` — Project Memory under ``.soba/memory`` and the rule for what may enter it;
* :mod:`.handoff` — the headless operations behind ``%capsule create|export|load|list|show``.

Headless like the rest of the core: nothing here imports IPython, widgets or pandas.
"""

from .handoff import (
    LOAD_TRIGGER,
    CheckpointNotFoundError,
    capsules_dir,
    create_portable,
    export_checkpoint,
    find_checkpoint,
    list_capsules,
    load_into_new_session,
    new_checkpoint_id,
    project_root_of,
    resolve,
    show_text,
    write_created,
)
from .portable import (
    CapsuleExistsError,
    CapsuleFileError,
    PortableCapsule,
    content_hash,
    export,
    export_text,
    load,
    load_text,
    new_capsule_id,
)
from .project import (
    SESSION_LOCAL_TRIGGERS,
    MemoryNotFoundError,
    MemoryRecord,
    MirrorDecision,
    ProjectMemory,
    memory_dir,
    mirror_decision,
)
from .redact import redact_capsule, redact_json, redact_portable, redact_text, secret_variables

__all__ = [
    "LOAD_TRIGGER",
    "SESSION_LOCAL_TRIGGERS",
    "CapsuleExistsError",
    "CapsuleFileError",
    "CheckpointNotFoundError",
    "MemoryNotFoundError",
    "MemoryRecord",
    "MirrorDecision",
    "PortableCapsule",
    "ProjectMemory",
    "capsules_dir",
    "content_hash",
    "create_portable",
    "export",
    "export_checkpoint",
    "export_text",
    "find_checkpoint",
    "list_capsules",
    "load",
    "load_into_new_session",
    "load_text",
    "memory_dir",
    "mirror_decision",
    "new_capsule_id",
    "new_checkpoint_id",
    "project_root_of",
    "redact_capsule",
    "redact_json",
    "redact_portable",
    "redact_text",
    "resolve",
    "secret_variables",
    "show_text",
    "write_created",
]
