"""The compaction simulator's front end: replay a session under any window and thresholds.

:func:`simulate` runs :func:`soba_notebook.compaction.simulate.replay` (the real preflight
barrier, deterministic capsules, no model) and returns its inferences as a DataFrame and its
capsules as :class:`CapsuleView` values; :func:`compare` replays several configurations of one
session side by side.
"""

from __future__ import annotations

import difflib
import html
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import pandas as pd

from ..compaction.capsule import Capsule, Decision, Verification
from ..compaction.simulate import SimulationResult, replay
from ..config import CompactionConfig, ModelConfig, SobaConfig
from ..errors import ConfigError
from ..session.entries import Entry
from ..tokens import TokenCounter
from ._common import (
    OUTCOME_CATEGORIES,
    QUALITY_CATEGORIES,
    SOURCE_CATEGORIES,
    TRIGGER_CATEGORIES,
    SessionLike,
    Snapshot,
    categorical,
    counter_for,
    int64,
    run_blocking,
    snapshot,
)
from .progress import progress

__all__ = ["COMPARE_COLUMNS", "INFERENCE_COLUMNS", "CapsuleView", "SimulationView", "compare", "replay_snapshot",
           "run_simulation", "simulate", "simulation_config", "summary_row"]

INFERENCE_COLUMNS = ("index", "entry_id", "turn", "effective_tokens", "source", "hard_limit", "soft_limit",
                     "trigger", "outcome", "reason", "tokens_after", "reclaimed_tokens", "checkpoint_id", "quality",
                     "oversized", "pairs_intact", "blocked")

#: Triggers a replay can fire (user and context_overflow need a person or a provider).
_REPLAY_TRIGGERS = ("hard_limit", "milestone", "plan_pivot", "turn_complete", "auto_threshold")

COMPARE_COLUMNS = ("context_window", "max_output_tokens", "hard_limit", "soft_limit", "keep_recent_tokens",
                   "inferences", "compactions", *(f"compactions_{t}" for t in _REPLAY_TRIGGERS), "skipped",
                   "failed", "max_effective_tokens", "max_sent_tokens", "any_oversized", "blocked",
                   "tokens_reclaimed", "degraded", "pairs_intact")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


_COMPACTION_KEYS = {_camel(f.name): f.name for f in fields(CompactionConfig)}
_MODEL_KEYS = {_camel(f.name): f.name for f in fields(ModelConfig)}


def _file_key(key: str, known: Mapping[str, str]) -> str | None:
    if key in known:
        return key
    for camel, snake in known.items():
        if key == snake:
            return camel
    return None


def simulation_config(settings: Mapping[str, Any], base: SobaConfig | None = None) -> SobaConfig:
    """A config from flat settings in camelCase or snake_case (``keepRecentTokens=8000``,
    ``context_window=128000``) or in the file's shape (``{"model": {...}, "compaction": {...}}``).

    Starts from ``base`` (default: the built-in defaults, not any config file, so a simulation
    means the same on every machine). Unknown keys raise :class:`ConfigError` naming the nearest
    known key; invalid values raise it with the config's own message.
    """
    layer: dict[str, dict[str, Any]] = {"model": {}, "compaction": {}}
    for key, value in settings.items():
        if key in ("model", "compaction") and isinstance(value, Mapping):
            for inner, inner_value in value.items():
                known = _MODEL_KEYS if key == "model" else _COMPACTION_KEYS
                name = _file_key(str(inner), known)
                if name is None:
                    raise _unknown(f"{key}.{inner}", known)
                layer[key][name] = inner_value
            continue
        name = _file_key(key, _COMPACTION_KEYS)
        if name is not None:
            layer["compaction"][name] = value
            continue
        name = _file_key(key, _MODEL_KEYS)
        if name is not None:
            layer["model"][name] = value
            continue
        raise _unknown(key, {**_COMPACTION_KEYS, **_MODEL_KEYS})
    return (base or SobaConfig()).with_overrides({k: v for k, v in layer.items() if v})


def _unknown(key: str, known: Mapping[str, str]) -> ConfigError:
    candidates = [*known, *known.values()]
    near = difflib.get_close_matches(key.rsplit(".", 1)[-1], candidates, n=1, cutoff=0.5)
    hint = f"; did you mean {near[0]!r}?" if near else f"; known keys: {', '.join(sorted(known))}"
    return ConfigError(f"unknown simulation setting {key!r}{hint}", source="arguments", key=key)


# -- capsules as read-only views with list fields -------------------------------------------------
@dataclass(frozen=True, slots=True)
class CapsuleView:
    """One capsule the simulation built: its entry's figures plus the capsule, with list fields.

    ``files_read``, ``files_modified``, ``verification`` (of
    :class:`~soba_notebook.compaction.capsule.Verification`) and the other capsule fields are
    returned as lists; ``capsule`` is the underlying frozen :class:`Capsule`.
    """

    capsule: Capsule
    checkpoint_id: str | None = None
    trigger: str | None = None
    quality: str | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    first_kept_entry_id: str | None = None
    summarized_entries: int | None = None

    @classmethod
    def of(cls, capsule: Capsule, entry: Entry | None = None) -> CapsuleView:
        d = entry.data if entry is not None else {}
        return cls(capsule, d.get("checkpointId"), d.get("trigger"), d.get("quality"), d.get("tokensBefore"),
                   d.get("tokensAfter"), d.get("firstKeptEntryId"), d.get("summarizedEntries"))

    @property
    def goal(self) -> str:
        return self.capsule.goal

    @property
    def files_read(self) -> list[str]:
        return list(self.capsule.files_read)

    @property
    def files_modified(self) -> list[str]:
        return list(self.capsule.files_modified)

    @property
    def verification(self) -> list[Verification]:
        return list(self.capsule.verification)

    @property
    def decisions(self) -> list[Decision]:
        return list(self.capsule.decisions)

    @property
    def done(self) -> list[str]:
        return list(self.capsule.done)

    @property
    def pending(self) -> list[str]:
        return list(self.capsule.pending)

    @property
    def next_steps(self) -> list[str]:
        return list(self.capsule.next_steps)

    @property
    def active_skills(self) -> list[str]:
        return list(self.capsule.active_skills)

    def to_json(self) -> dict[str, Any]:
        return self.capsule.to_json()


@dataclass(frozen=True, slots=True, eq=False)
class SimulationView:
    """What :func:`simulate` returns.

    ``inferences`` has one row per inference (columns: see :func:`simulate`); ``capsules`` the
    capsules built, in order; ``config`` the configuration replayed; ``result`` the raw
    :class:`~soba_notebook.compaction.simulate.SimulationResult`.
    """

    inferences: pd.DataFrame
    capsules: tuple[CapsuleView, ...]
    config: SobaConfig
    result: SimulationResult

    def budget_frame(self) -> pd.DataFrame:
        """The inferences in :func:`~.budget_view.budget_history`'s shape, for ``plot_budget``."""
        df = self.inferences
        return pd.DataFrame({
            "inference": df["index"], "effective_tokens": df["effective_tokens"], "tokens_after": df["tokens_after"],
            "hard_limit": df["hard_limit"], "soft_limit": df["soft_limit"], "source": df["source"],
            "compaction_trigger": df["trigger"], "compaction_outcome": df["outcome"],
            "checkpoint_id": df["checkpoint_id"]})

    def plot(self, ax: Any = None, *, title: str | None = None) -> Any:
        """``plot_budget`` of the simulated inferences; returns the Axes."""
        from .budget_view import plot_budget

        window = self.config.model.context_window
        return plot_budget(self.budget_frame(), ax, title=title or f"simulated, window {window:,}")

    def summary(self) -> pd.Series:
        """The :func:`compare` row of this simulation."""
        return pd.Series(summary_row(self.result, self.config))

    # A cell that ends in ``views.simulate(...)`` shows these, not the dataclass's field-by-field
    # repr (every inference row, capsule and config value: 28,734 characters for one pi session).
    def _figures(self) -> list[tuple[str, str]]:
        row = self.summary()
        by_trigger = ", ".join(f"{t} {int(row[f'compactions_{t}']):,}" for t in _REPLAY_TRIGGERS
                               if row[f"compactions_{t}"])
        return [
            ("config", f"window {int(row['context_window']):,} · hard limit {int(row['hard_limit']):,} · "
                       f"soft limit {int(row['soft_limit']):,} · keep recent {int(row['keep_recent_tokens']):,}"),
            ("inferences", f"{int(row['inferences']):,}"),
            ("compactions", f"{int(row['compactions']):,}" + (f" ({by_trigger})" if by_trigger else "")
             + f" · skipped {int(row['skipped']):,} · failed {int(row['failed']):,}"),
            ("tokens", f"largest request sent {int(row['max_sent_tokens']):,} · largest measured "
                       f"{int(row['max_effective_tokens']):,} · reclaimed {int(row['tokens_reclaimed']):,}"),
            ("checks", f"over the hard limit: {'yes' if row['any_oversized'] else 'no'} · blocked "
                       f"{int(row['blocked']):,} · tool calls kept with their results: "
                       f"{'yes' if row['pairs_intact'] else 'NO'}"),
        ]

    _HINT: ClassVar[str] = ".inferences (DataFrame, one row per inference) · .capsules · .summary() · .plot()"

    def __repr__(self) -> str:
        lines = ["SimulationView (views.simulate)"]
        lines += [f"  {name:<12}{value}" for name, value in self._figures()]
        return "\n".join([*lines, f"  {'more':<12}{self._HINT}"])

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><th style='text-align:left'>{html.escape(name)}</th>"
                       f"<td style='text-align:left'>{html.escape(value)}</td></tr>"
                       for name, value in self._figures())
        hint = html.escape(self._HINT)
        return (f"<div><b>SimulationView</b><table>{rows}</table>"
                f"<small>more: <code>{hint}</code></small></div>")


def _inferences_frame(result: SimulationResult) -> pd.DataFrame:
    recs = result.inferences
    return pd.DataFrame({
        "index": int64(r.index for r in recs),
        "entry_id": pd.Series([r.entry_id for r in recs], dtype="string"),
        "turn": int64(r.turn for r in recs),
        "effective_tokens": int64(r.effective_tokens for r in recs),
        "source": categorical((r.source for r in recs), SOURCE_CATEGORIES),
        "hard_limit": int64(r.hard_limit for r in recs),
        "soft_limit": int64(r.soft_limit for r in recs),
        "trigger": categorical((r.trigger for r in recs), TRIGGER_CATEGORIES),
        "outcome": categorical((r.outcome for r in recs), OUTCOME_CATEGORIES),
        "reason": pd.Series([r.reason for r in recs], dtype="string"),
        "tokens_after": int64(r.tokens_after for r in recs),
        "reclaimed_tokens": int64(r.reclaimed_tokens for r in recs),
        "checkpoint_id": pd.Series([r.checkpoint_id for r in recs], dtype="string"),
        "quality": categorical((r.quality for r in recs), QUALITY_CATEGORIES),
        "oversized": pd.Series([r.oversized for r in recs], dtype=bool),
        "pairs_intact": pd.Series([r.pairs_intact for r in recs], dtype=bool),
        "blocked": pd.Series([r.blocked for r in recs], dtype=bool),
    }, columns=list(INFERENCE_COLUMNS))


def replay_snapshot(snap: Snapshot, config: SobaConfig, base_tokens: int) -> SimulationResult:
    """One replay of ``snap`` under ``config``: what every simulation view runs."""
    counter = counter_for(snap.model(), snap.id)  # shared for its per-entry counts, a pure function of the entry
    if counter.calibration.samples(counter.model):
        # no provider answers a replay, so it never calibrates; a ratio learned elsewhere in this
        # process must not move its figures (a fresh worker would not have it)
        counter = TokenCounter(snap.model())
    source = list(snap.path)
    return run_blocking(lambda: replay(source, config, counter=counter, base_tokens=base_tokens))


def run_simulation(snap: Snapshot, config: SobaConfig, base_tokens: int) -> SimulationView:
    """One replay of ``snap`` under ``config`` as a :class:`SimulationView` (what simulate and compare show)."""
    result = replay_snapshot(snap, config, base_tokens)
    views = tuple(CapsuleView.of(c, e) for c, e in zip(result.capsules, result.capsule_entries, strict=False))
    return SimulationView(_inferences_frame(result), views, config, result)


def simulate(session: SessionLike, context_window: int | None = None, max_output_tokens: int | None = None, *,
             base_tokens: int = 0, config: SobaConfig | None = None, **compaction_overrides: Any) -> SimulationView:
    """Replay ``session`` through the compaction policy with this window and these thresholds.

    ``compaction_overrides`` are the config's compaction keys in camelCase or snake_case
    (``keepRecentTokens=8000`` or ``keep_recent_tokens=8000``); everything not given keeps the
    seed's default (or ``config``'s value). ``base_tokens`` stands for the system prompt and tool
    schemas every request carries. Tokens are counted with the encoding of the session's model
    (its latest reply's ``model``). Each replayed capsule is the deterministic one (no model
    runs), so every completed compaction has ``quality == "degraded"``. Works inside a running
    event loop (a Jupyter cell): the replay then runs on a worker thread.

    ``.inferences`` columns: ``index``, ``turn``, ``effective_tokens``, ``hard_limit``,
    ``soft_limit``, ``tokens_after``, ``reclaimed_tokens`` (Int64); ``entry_id``, ``reason``,
    ``checkpoint_id`` (string); ``source``, ``trigger``, ``outcome``, ``quality`` (category);
    ``oversized`` (a request over the hard limit would have been sent), ``pairs_intact`` (no tool
    call separated from its result), ``blocked`` (the barrier refused to send) (bool).
    """
    settings: dict[str, Any] = dict(compaction_overrides)
    if context_window is not None:
        settings["contextWindow"] = context_window
    if max_output_tokens is not None:
        settings["maxOutputTokens"] = max_output_tokens
    cfg = simulation_config(settings, config)
    return run_simulation(snapshot(session), cfg, base_tokens)


def summary_row(result: SimulationResult, config: SobaConfig) -> dict[str, Any]:
    """The :func:`compare` row of one replay, from its records: no DataFrame is built, so a fleet
    of thousands of sessions (which needs only these rows) does not pay for one per replay."""
    recs = result.inferences
    completed = [r for r in recs if r.outcome == "completed"]
    row: dict[str, Any] = {
        "context_window": config.model.context_window, "max_output_tokens": config.model.max_output_tokens,
        "hard_limit": config.hard_limit, "soft_limit": config.soft_limit,
        "keep_recent_tokens": config.compaction.keep_recent_tokens, "inferences": len(recs),
        "compactions": len(completed)}
    for trig in _REPLAY_TRIGGERS:
        row[f"compactions_{trig}"] = sum(1 for r in completed if r.trigger == trig)
    row.update({
        "skipped": sum(1 for r in recs if r.outcome == "skipped"),
        "failed": sum(1 for r in recs if r.outcome == "failed"),
        "max_effective_tokens": max((r.effective_tokens for r in recs), default=0),
        "max_sent_tokens": max((r.tokens_after for r in recs), default=0),
        "any_oversized": any(r.oversized for r in recs), "blocked": sum(1 for r in recs if r.blocked),
        "tokens_reclaimed": sum(r.reclaimed_tokens or 0 for r in recs),
        "degraded": sum(1 for r in completed if r.quality == "degraded"),
        "pairs_intact": all(r.pairs_intact for r in recs)})
    return row


def compare(session: SessionLike, configs: Mapping[str, Mapping[str, Any]], *, base_tokens: int = 0,
            config: SobaConfig | None = None) -> pd.DataFrame:
    """Simulate several configurations of one session side by side: one row per config name.

    Each value of ``configs`` holds settings as :func:`simulate` takes them (flat camelCase or
    snake_case keys, model keys such as ``contextWindow`` included, or the file's nested shape).

    Columns: ``context_window``, ``max_output_tokens``, ``hard_limit``, ``soft_limit``,
    ``keep_recent_tokens``, ``inferences``, ``compactions`` (completed), ``compactions_<trigger>``
    for ``hard_limit``, ``milestone``, ``plan_pivot``, ``turn_complete``, ``auto_threshold``,
    ``skipped``, ``failed``, ``max_effective_tokens`` (largest measurement at the barrier),
    ``max_sent_tokens`` (largest request after compaction), ``blocked``, ``tokens_reclaimed``,
    ``degraded`` (Int64); ``any_oversized``, ``pairs_intact`` (bool). The index is the config name.
    """
    if not isinstance(configs, Mapping) or not configs:
        raise ValueError("compare needs a non-empty mapping of name -> settings, e.g. "
                         "{'65k': {'contextWindow': 65000}, '128k': {'contextWindow': 128000}}")
    resolved = {}
    for name, settings in configs.items():
        if not isinstance(settings, Mapping):
            raise TypeError(f"compare: settings of {name!r} must be a mapping of config keys, "
                            f"got {type(settings).__name__}")
        resolved[str(name)] = simulation_config(settings, config)  # validate all before any replay
    snap = snapshot(session)
    rows = {name: run_simulation(snap, cfg, base_tokens).summary()
            for name, cfg in progress(resolved.items(), total=len(resolved), desc="simulating", unit="config")}
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.index.name = "config"
    out: dict[str, pd.Series] = {}
    for col in COMPARE_COLUMNS:
        if col in ("any_oversized", "pairs_intact"):
            out[col] = frame[col].astype(bool)
        else:
            out[col] = frame[col].astype("Int64")
    return pd.DataFrame(out, index=frame.index, columns=list(COMPARE_COLUMNS))
