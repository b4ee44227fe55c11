"""How good is SOBA's token estimate? Measured against a provider's real usage.

In a session with real provider usage (pi's sessions carry it) every assistant reply reports the
prompt size of the request that produced it: ``prompt = input + cacheRead + cacheWrite``. Between
two consecutive replies *n* and *n+1* the request grew by exactly the entries appended in
between: reply *n* itself and everything after it up to request *n+1*. So

    real growth   = prompt(n+1) - prompt(n)
    SOBA estimate = token count of those entries

is a per-span ground truth for the estimator. The report gives each span's error before
calibration and after it, where the :class:`~soba_notebook.tokens.Calibration` ratio applied to a
span was learned only from the spans before it (no peeking at the span being measured), fed the way
the live budget check feeds it (:meth:`~soba_notebook.budget.BudgetTracker.observe_usage`: one
span per reply). It also gives the error of what the live check would have said about the whole
request, ``prompt(n) + calibrated estimate of the span``: span error and whole-request error are
reported separately, since a 15 % error on a 300-token span is a 0.05 % error on a 90k request.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from ..session.entries import Entry
from ..tokens import Calibration
from ._common import SessionLike, categorical, counter_for, int64, snapshot, utc_times

__all__ = ["ESTIMATOR_COLUMNS", "estimator_report", "estimator_summary"]

ESTIMATOR_COLUMNS = ("span", "from_entry_id", "to_entry_id", "model", "entries", "ts", "prompt_before", "prompt_after",
                     "real_tokens", "estimated_tokens", "error_tokens", "abs_error_tokens", "rel_error",
                     "abs_rel_error", "ratio_applied", "calibrated_tokens", "calibrated_error_tokens",
                     "calibrated_abs_error_tokens", "calibrated_rel_error", "calibrated_abs_rel_error",
                     "request_estimate", "request_error_tokens", "request_abs_rel_error", "valid", "note")

#: Entries that change the request other than by appending (a compaction, a summary of a branch).
_RESETS = frozenset({"capsule", "imported_compaction", "compaction", "branch_summary", "leaf"})
#: Replies that ended in an error or an abort: what the next request keeps of them is up to the agent.
_FAILED_REPLIES = frozenset({"error", "aborted"})


def _prompt(entry: Entry) -> int:
    usage = entry.usage
    return usage.prompt_tokens if usage is not None else 0


def _model(entry: Entry) -> str:
    model = entry.message.get("model")
    return model if isinstance(model, str) else ""


def _invalid_reason(span: Sequence[Entry], first: Entry, last: Entry, real: int) -> str | None:
    if any(e.type in _RESETS for e in span):
        return "the request was compacted or rewound in between"
    failed = [e for e in span if e.role == "assistant" and e.message.get("stopReason") in _FAILED_REPLIES]
    if failed:
        return (f"an {failed[0].message.get('stopReason')} reply in between (providers leave it out of the next "
                f"request)")
    if _model(first) != _model(last):
        return f"model changed ({_model(first) or '?'} -> {_model(last) or '?'})"
    if real <= 0:
        return "the prompt did not grow (the provider dropped or cached out part of the input)"
    return None


def estimator_report(session: SessionLike) -> pd.DataFrame:
    """One row per span between consecutive assistant replies that report provider usage.

    A reply "reports usage" when ``input + cacheRead + cacheWrite > 0`` (aborted replies report
    zero and are not span ends; their tokens count inside the span they fall in). A span is
    ``valid`` unless something other than appending changed the request (a compaction, a rewind),
    the model changed, or the prompt did not grow; ``note`` says which. Calibration learns only
    from valid spans, per model, in order.

    Columns:

    =========================== ======== ===================================================
    span                        Int64    0, 1, 2…
    from_entry_id, to_entry_id  string   reply n and reply n+1
    model                       category model of reply n+1
    entries                     Int64    entries in the span (reply n up to request n+1)
    ts                          datetime reply n+1's timestamp (UTC)
    prompt_before, prompt_after Int64    prompt(n), prompt(n+1)
    real_tokens                 Int64    prompt(n+1) - prompt(n)
    estimated_tokens            Int64    SOBA's count of the span's entries
    error_tokens                Int64    estimated - real
    abs_error_tokens            Int64    abs(error_tokens)
    rel_error, abs_rel_error    float64  error / real and its absolute value (NaN if real <= 0)
    ratio_applied               float64  calibration ratio learned from earlier spans (1.0 first)
    calibrated_tokens           Int64    round(estimated * ratio_applied)
    calibrated_*                         the same errors for the calibrated estimate
    request_estimate            Int64    the live check's whole request: prompt_before + calibrated_tokens
    request_error_tokens        Int64    request_estimate - prompt_after
    request_abs_rel_error       float64  its absolute value / prompt_after
    valid                       bool     the span is a clean ground truth
    note                        string   why it is not
    =========================== ======== ===================================================
    """
    snap = snapshot(session)
    path = snap.path
    ends = [i for i, e in enumerate(path) if e.type == "message" and e.role == "assistant" and _prompt(e) > 0]
    calibration = Calibration()
    cols: dict[str, list[Any]] = {name: [] for name in ESTIMATOR_COLUMNS}
    for span_no, (a, b) in enumerate(itertools.pairwise(ends)):
        first, last = path[a], path[b]
        span = path[a:b]
        model = _model(last)
        counter = counter_for(model or snap.model(), snap.id)
        estimated = sum(counter.count_entry(e) for e in span)
        before, after = _prompt(first), _prompt(last)
        real = after - before
        note = _invalid_reason(span, first, last, real)
        ratio = calibration.ratio(model)
        calibrated = round(estimated * ratio)
        if note is None:
            calibration.observe(model, estimated, real)  # after measuring: later spans learn from it
        err, cal_err = estimated - real, calibrated - real
        rel = err / real if real > 0 else math.nan
        cal_rel = cal_err / real if real > 0 else math.nan
        request = before + calibrated
        for name, value in (("span", span_no), ("from_entry_id", first.id), ("to_entry_id", last.id),
                            ("model", model or None), ("entries", len(span)), ("ts", last.ts),
                            ("prompt_before", before), ("prompt_after", after), ("real_tokens", real),
                            ("estimated_tokens", estimated), ("error_tokens", err), ("abs_error_tokens", abs(err)),
                            ("rel_error", rel), ("abs_rel_error", abs(rel)), ("ratio_applied", ratio),
                            ("calibrated_tokens", calibrated), ("calibrated_error_tokens", cal_err),
                            ("calibrated_abs_error_tokens", abs(cal_err)), ("calibrated_rel_error", cal_rel),
                            ("calibrated_abs_rel_error", abs(cal_rel)), ("request_estimate", request),
                            ("request_error_tokens", request - after),
                            ("request_abs_rel_error", abs(request - after) / after if after > 0 else math.nan),
                            ("valid", note is None), ("note", note)):
            cols[name].append(value)
    ints = ("span", "entries", "prompt_before", "prompt_after", "real_tokens", "estimated_tokens", "error_tokens",
            "abs_error_tokens", "calibrated_tokens", "calibrated_error_tokens", "calibrated_abs_error_tokens",
            "request_estimate", "request_error_tokens")
    floats = ("rel_error", "abs_rel_error", "ratio_applied", "calibrated_rel_error", "calibrated_abs_rel_error",
              "request_abs_rel_error")
    data: dict[str, pd.Series] = {name: int64(cols[name]) for name in ints}
    data.update({name: pd.Series(cols[name], dtype="float64") for name in floats})
    data.update({
        "from_entry_id": pd.Series(cols["from_entry_id"], dtype="string"),
        "to_entry_id": pd.Series(cols["to_entry_id"], dtype="string"),
        "model": categorical(cols["model"]),
        "ts": utc_times(t if isinstance(t, str) else None for t in cols["ts"]),
        "valid": pd.Series(cols["valid"], dtype=bool),
        "note": pd.Series(cols["note"], dtype="string"),
    })
    return pd.DataFrame(data, columns=list(ESTIMATOR_COLUMNS))


def estimator_summary(report: pd.DataFrame | SessionLike) -> pd.DataFrame:
    """The error distribution over the valid spans: before and after calibration, and whole requests.

    ``report`` is an :func:`estimator_report` frame or a session to compute one for. Index
    ``before`` / ``after`` (span errors, named ``calibration``) and ``request`` (the live check's
    error on the whole request, relative to the reported prompt); columns ``spans`` (Int64), ``median_abs_rel_error``,
    ``mean_abs_rel_error``, ``p90_abs_rel_error`` (fractions, 0.1 = 10 %), ``median_abs_error_tokens``,
    ``mean_abs_error_tokens`` (float64), ``real_tokens`` and ``estimated_tokens`` (Int64, totals).
    """
    df = report if isinstance(report, pd.DataFrame) else estimator_report(report)
    valid = df[df["valid"]] if len(df) else df
    rows = {}
    for label, prefix in (("before", ""), ("after", "calibrated_"), ("request", "request_")):
        rel = valid[f"{prefix}abs_rel_error"].astype("float64")
        if label == "request":
            err = valid["request_error_tokens"].astype("float64").abs()
            est, real_total = valid["request_estimate"], valid["prompt_after"]
        else:
            err = valid[f"{prefix}abs_error_tokens"].astype("float64")
            est = valid["calibrated_tokens" if prefix else "estimated_tokens"]
            real_total = valid["real_tokens"]
        rows[label] = {
            "spans": len(valid),
            "median_abs_rel_error": float(rel.median()) if len(rel) else math.nan,
            "mean_abs_rel_error": float(rel.mean()) if len(rel) else math.nan,
            "p90_abs_rel_error": float(rel.quantile(0.9)) if len(rel) else math.nan,
            "median_abs_error_tokens": float(err.median()) if len(err) else math.nan,
            "mean_abs_error_tokens": float(err.mean()) if len(err) else math.nan,
            "real_tokens": int(real_total.sum()) if len(valid) else 0,
            "estimated_tokens": int(est.sum()) if len(valid) else 0,
        }
    out = pd.DataFrame.from_dict(rows, orient="index")
    out.index.name = "calibration"
    for col in ("spans", "real_tokens", "estimated_tokens"):
        out[col] = out[col].astype("Int64")
    return out
