"""Analysis: pandas views over sessions and flight records, the simulator front end, the
estimator report and a demo session. Re-exported by :mod:`soba_notebook.views`.

This package (like ``views.py`` and ``notebook/``) may import pandas and matplotlib; nothing
below it does.
"""

from ._common import SessionLike, open_session
from .budget_view import BUDGET_COLUMNS, budget_history, plot_budget
from .demo import DemoSession, demo_session, newest_session, synthetic_session
from .estimator import ESTIMATOR_COLUMNS, estimator_report, estimator_summary
from .fleet import FLEET_COLUMNS, simulate_many
from .frames import CAPSULE_COLUMNS, TRANSCRIPT_COLUMNS, capsules, flight_records, transcript
from .simulation import (
    COMPARE_COLUMNS,
    INFERENCE_COLUMNS,
    CapsuleView,
    SimulationView,
    compare,
    simulate,
    simulation_config,
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
