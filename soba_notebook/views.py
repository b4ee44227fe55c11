"""pandas views of SOBA sessions: transcript, capsules, flight records, budget, simulation.

Every view takes a session file path, a :class:`~soba_notebook.session.SessionStore`, or a
transcript recorded by another agent (pi, Claude Code, mini-swe-agent, SWE-agent, OpenAI message
lists; imported once into a temporary sessions directory), and is read-only: nothing is ever
appended, and a session another thread or process is still appending to can be viewed at any
time. Columns and dtypes are stable and documented in each function's docstring.

>>> from soba_notebook import views
>>> views.transcript(".soba/sessions/<id>.jsonl")            # doctest: +SKIP
>>> views.plot_budget(views.budget_history(path))             # doctest: +SKIP
>>> views.compare(path, {"65k": {"contextWindow": 65000},     # doctest: +SKIP
...                      "keep 8k": {"keepRecentTokens": 8000}})
>>> views.simulate_many("trajectories/", {"65k": {"contextWindow": 65000}})  # doctest: +SKIP

The implementation lives in :mod:`soba_notebook.analysis`; this module is its public face.
"""

from __future__ import annotations

from .analysis import (
    BUDGET_COLUMNS,
    CAPSULE_COLUMNS,
    COMPARE_COLUMNS,
    ESTIMATOR_COLUMNS,
    FLEET_COLUMNS,
    INFERENCE_COLUMNS,
    TRANSCRIPT_COLUMNS,
    CapsuleView,
    DemoSession,
    SessionLike,
    SimulationView,
    budget_history,
    capsules,
    compare,
    demo_session,
    estimator_report,
    estimator_summary,
    flight_records,
    newest_session,
    open_session,
    plot_budget,
    simulate,
    simulate_many,
    simulation_config,
    synthetic_session,
    transcript,
)

__all__ = [
    "BUDGET_COLUMNS",
    "CAPSULE_COLUMNS",
    "COMPARE_COLUMNS",
    "ESTIMATOR_COLUMNS",
    "FLEET_COLUMNS",
    "INFERENCE_COLUMNS",
    "TRANSCRIPT_COLUMNS",
    "CapsuleView",
    "DemoSession",
    "SessionLike",
    "SimulationView",
    "budget_history",
    "capsules",
    "compare",
    "demo_session",
    "estimator_report",
    "estimator_summary",
    "flight_records",
    "newest_session",
    "open_session",
    "plot_budget",
    "simulate",
    "simulate_many",
    "simulation_config",
    "synthetic_session",
    "transcript",
]
