// soba_notebook budget widget: an anywidget ES module (no imports, no network).
//
// Renders the synced `state` trait (soba_notebook.notebook.display.BudgetState.snapshot), whose
// figures carry the engine's BudgetSnapshot names (effective, hard_limit, soft_limit, context_window):
// effective tokens against the hard limit with the soft threshold marked, the measurement
// source, live compaction progress, the persistent last-compaction line and a sparkline of
// effective tokens per inference. All words come from Python (progress_text, last_compaction.text)
// so the terminal and the browser say the same thing; this file only lays them out.
//
// Stable hooks for tests, on the root element (.soba-budget, [data-soba-budget]):
//   data-effective, data-hard, data-soft, data-window   integers ("" when unknown)
//   data-source        provider_usage | estimated | ""
//   data-request       sent | next | "": which request the figure measures (the words: request_words)
//   data-zone          ok | soft | over | unknown
//   data-phase         idle | compacting | completed | skipped | failed | cancelled | stale
//   data-progress      integer percent of the running / last compaction
//   data-outcome       outcome of the last compaction ("" before the first)
//   data-status        outcome, or the quality ("partial" | "degraded") of a completed compact whose capsule is not ok
//   data-checkpoint    checkpoint id of the last compaction ("" when none)
//   data-reclaimed     reclaimed tokens of the last compaction (integer)
//   data-reclaimed-percent   reclaimed percent, one decimal
//   data-quality       ok | partial | degraded | ""
//   data-version       state version (increments per applied event)
//   data-turn          "1" while an agent turn is running
//   data-notice        "1" while a transient note (a retried request) is shown
//   data-fresh         "1" for a few seconds after a compaction completed (the line is highlighted)
//   data-compactions   how many completed compactions the history strip shows
//   data-cost          priced | local | unknown: the session's cost status ("" before the first request)
// The history strip (.soba-budget__strip) holds one chip per recent completed compaction
// (.soba-budget__chip, trigger and reclaimed %); a skipped compaction is one dim line
// (.soba-budget__skip) and never replaces the last compaction. A retried request is a transient
// note (.soba-budget__notice, data-notice="1"), never the red error line (.soba-budget__error),
// which shows only a final error and is gone when the next turn starts. The cost line
// (.soba-budget__cost) is Python's words (pricing.spend_text): the session's and the last turn's cost.

const FRESH_MS = 4000;

const NUMBER = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
const SVG_NS = "http://www.w3.org/2000/svg";
const SPARK_W = 160;
const SPARK_H = 28;

function isNum(v) {
  return typeof v === "number" && Number.isFinite(v);
}

function fmt(v) {
  return isNum(v) ? NUMBER.format(Math.round(v)) : "—";
}

function attr(v) {
  return v === null || v === undefined ? "" : String(v);
}

function h(tag, className, parent, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

function svg(tag, attrs, parent) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (parent) parent.appendChild(node);
  return node;
}

function clampPct(v) {
  return Math.max(0, Math.min(100, v));
}

const SOURCE_LABEL = {
  provider_usage: "provider usage",
  estimated: "estimated",
};

function build(root) {
  const box = h("div", "soba-budget", root);
  box.setAttribute("data-soba-budget", "");

  const head = h("div", "soba-budget__head", box);
  h("span", "soba-budget__title", head, "Context budget");
  const session = h("span", "soba-budget__session", head);
  const source = h("span", "soba-budget__source", head);

  const numbers = h("div", "soba-budget__numbers", box);
  const effective = h("span", "soba-budget__effective", numbers);
  h("span", "soba-budget__sep", numbers, " / ");
  const hard = h("span", "soba-budget__hard", numbers);
  h("span", "soba-budget__unit", numbers, " tokens");
  const usage = h("span", "soba-budget__usage", numbers);
  const request = h("span", "soba-budget__request", numbers);
  const limits = h("span", "soba-budget__limits", numbers);

  const bar = h("div", "soba-budget__bar", box);
  bar.setAttribute("role", "meter");
  bar.setAttribute("aria-label", "effective tokens against the hard limit");
  const fill = h("div", "soba-budget__fill", bar);
  const softMark = h("div", "soba-budget__soft-mark", bar);

  const progress = h("div", "soba-budget__progress", box);
  const progressText = h("div", "soba-budget__progress-text", progress);
  const progressBar = h("div", "soba-budget__progress-bar", progress);
  progressBar.setAttribute("role", "progressbar");
  progressBar.setAttribute("aria-valuemin", "0");
  progressBar.setAttribute("aria-valuemax", "100");
  const progressFill = h("div", "soba-budget__progress-fill", progressBar);

  const last = h("div", "soba-budget__last", box);
  h("span", "soba-budget__last-label", last, "Last compaction ");
  const lastText = h("span", "soba-budget__last-text", last);

  const skip = h("div", "soba-budget__skip", box);
  const strip = h("div", "soba-budget__strip", box);
  strip.setAttribute("aria-label", "recent compactions");

  const footer = h("div", "soba-budget__footer", box);
  const spark = svg("svg", {
    class: "soba-budget__spark",
    width: SPARK_W,
    height: SPARK_H,
    viewBox: `0 0 ${SPARK_W} ${SPARK_H}`,
    role: "img",
    "aria-label": "effective tokens per inference",
  }, footer);
  const sparkHard = svg("line", { class: "soba-budget__spark-hard" }, spark);
  const sparkSoft = svg("line", { class: "soba-budget__spark-soft" }, spark);
  const sparkLine = svg("polyline", { class: "soba-budget__spark-line", fill: "none" }, spark);
  const sparkDot = svg("circle", { class: "soba-budget__spark-dot", r: 2 }, spark);
  const sparkLabel = h("span", "soba-budget__spark-label", footer);

  const cost = h("span", "soba-budget__cost", footer);
  cost.setAttribute("aria-label", "cost in money");

  const notice = h("div", "soba-budget__notice", box);
  const error = h("div", "soba-budget__error", box);

  return {
    box, session, source, effective, hard, usage, request, limits, bar, fill, softMark, progress,
    progressText, progressBar, progressFill, last, lastText, skip, strip, footer, spark, sparkHard, sparkSoft,
    sparkLine, sparkDot, sparkLabel, cost, notice, error,
  };
}

function drawSpark(ui, s) {
  const points = Array.isArray(s.history) ? s.history.filter((p) => isNum(p.effective)) : [];
  const top = Math.max(1, isNum(s.hard_limit) ? s.hard_limit : 0, ...points.map((p) => p.effective));
  const y = (v) => SPARK_H - 1 - (clampPct((100 * v) / top) / 100) * (SPARK_H - 2);
  const level = (line, v) => {
    if (!isNum(v)) {
      line.setAttribute("visibility", "hidden");
      return;
    }
    line.setAttribute("visibility", "visible");
    for (const [k, val] of [["x1", 0], ["x2", SPARK_W], ["y1", y(v)], ["y2", y(v)]]) {
      line.setAttribute(k, val.toFixed(1));
    }
  };
  level(ui.sparkHard, s.hard_limit);
  level(ui.sparkSoft, s.soft_limit);
  ui.footer.hidden = points.length === 0;
  if (points.length === 0) {
    ui.sparkLine.setAttribute("points", "");
    ui.sparkDot.setAttribute("visibility", "hidden");
    ui.sparkLabel.textContent = "";
    return;
  }
  const step = points.length > 1 ? (SPARK_W - 4) / (points.length - 1) : 0;
  const coords = points.map((p, i) => [2 + i * step, y(p.effective)]);
  ui.sparkLine.setAttribute("points", coords.map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join(" "));
  const [lx, ly] = coords[coords.length - 1];
  ui.sparkDot.setAttribute("cx", lx.toFixed(1));
  ui.sparkDot.setAttribute("cy", ly.toFixed(1));
  ui.sparkDot.setAttribute("visibility", "visible");
  ui.sparkLabel.textContent = `${points.length} inference${points.length === 1 ? "" : "s"}`;
}

function drawStrip(ui, s) {
  const items = Array.isArray(s.compactions) ? s.compactions : [];
  ui.strip.hidden = items.length === 0;
  ui.strip.replaceChildren();
  if (items.length === 0) return;
  h("span", "soba-budget__strip-label", ui.strip, "Compactions ");
  items.forEach((c, i) => {
    const chip = h("span", "soba-budget__chip", ui.strip, c.chip || "");
    chip.dataset.status = attr(c.status);
    chip.title = c.text || "";
    if (i === items.length - 1) chip.classList.add("soba-budget__chip--latest");
  });
}

function markFresh(ui, lc) {
  // A compaction can complete in milliseconds: keep its line highlighted long enough to be seen.
  const id = lc && lc.outcome === "completed" ? attr(lc.checkpoint_id || lc.operation_id) : "";
  if (!id || id === ui.freshId) return;
  const first = ui.freshId === undefined;
  ui.freshId = id;
  if (first) return; // the state a view opens with is not news
  ui.box.dataset.fresh = "1";
  clearTimeout(ui.freshTimer);
  ui.freshTimer = setTimeout(() => { ui.box.dataset.fresh = ""; }, FRESH_MS);
}

function update(ui, s) {
  s = s || {};
  const lc = s.last_compaction || null;
  const phase = s.phase || "idle";
  const progress = isNum(s.progress) ? Math.floor(clampPct(s.progress)) : 0;
  const d = ui.box.dataset;
  d.effective = attr(s.effective);
  d.hard = attr(s.hard_limit);
  d.soft = attr(s.soft_limit);
  d.window = attr(s.context_window);
  d.source = attr(s.source);
  d.request = attr(s.request);
  d.zone = attr(s.zone || "unknown");
  d.phase = phase;
  d.progress = String(progress);
  d.outcome = attr(lc && lc.outcome);
  d.status = attr(lc && lc.status);
  d.checkpoint = attr(lc && lc.checkpoint_id);
  d.reclaimed = attr(lc && lc.reclaimed_tokens);
  d.reclaimedPercent = lc && isNum(lc.reclaimed_percent) ? lc.reclaimed_percent.toFixed(1) : "";
  d.quality = attr(lc && lc.quality);
  d.version = attr(s.version);
  d.turn = s.turn_active ? "1" : "";

  ui.session.textContent = s.session_id ? s.session_id : "";
  ui.source.textContent = s.source ? SOURCE_LABEL[s.source] || s.source : "not measured";
  ui.source.title = s.source === "estimated"
    ? "estimated with a local tokenizer"
    : s.source === "provider_usage" ? "provider-reported usage plus an estimate of what was appended" : "";

  ui.effective.textContent = fmt(s.effective);
  ui.hard.textContent = fmt(s.hard_limit);
  ui.usage.textContent = isNum(s.usage_percent) ? ` (${s.usage_percent.toFixed(1)}%)` : "";
  ui.request.textContent = s.request_words ? ` · ${s.request_words}` : "";
  const limitParts = [`soft ${fmt(s.soft_limit)}`];
  if (isNum(s.context_window)) limitParts.push(`window ${fmt(s.context_window)}`);
  ui.limits.textContent = ` · ${limitParts.join(" · ")}`;

  const usedPct = isNum(s.effective) && isNum(s.hard_limit) && s.hard_limit > 0
    ? (100 * s.effective) / s.hard_limit
    : 0;
  ui.fill.style.width = `${clampPct(usedPct).toFixed(2)}%`;
  ui.bar.setAttribute("aria-valuenow", attr(s.effective));
  ui.bar.setAttribute("aria-valuemax", attr(s.hard_limit));
  if (isNum(s.soft_limit) && isNum(s.hard_limit) && s.hard_limit > 0) {
    ui.softMark.style.display = "";
    ui.softMark.style.left = `${clampPct((100 * s.soft_limit) / s.hard_limit).toFixed(2)}%`;
    ui.softMark.title = `soft limit ${fmt(s.soft_limit)}`;
  } else {
    ui.softMark.style.display = "none";
  }

  const compacting = phase === "compacting";
  ui.progress.hidden = !compacting;
  ui.progress.title = compacting && s.step ? `step: ${s.step}` : "";
  ui.progressText.textContent = compacting ? s.progress_text || `Compacting context · ${progress}%` : "";
  ui.progressFill.style.width = `${progress}%`;
  ui.progressBar.setAttribute("aria-valuenow", String(progress));

  ui.last.hidden = !lc;
  ui.lastText.textContent = lc ? lc.text || "" : "";
  ui.skip.hidden = !s.skip_note;
  ui.skip.textContent = s.skip_note || "";
  d.compactions = String(Array.isArray(s.compactions) ? s.compactions.length : 0);
  drawStrip(ui, s);
  markFresh(ui, lc);

  ui.cost.hidden = !s.cost_text;
  ui.cost.textContent = s.cost_text ? `Cost: ${s.cost_text}` : "";
  d.cost = s.cost && s.cost.session && s.cost.requests ? s.cost.session.status || "" : "";

  ui.notice.hidden = !s.notice;
  ui.notice.textContent = s.notice || "";
  d.notice = s.notice ? "1" : "";
  ui.error.hidden = !s.last_error;
  ui.error.textContent = s.last_error ? `Error: ${s.last_error}` : "";

  drawSpark(ui, s);
}

function render({ model, el }) {
  const ui = build(el);
  const onChange = () => update(ui, model.get("state"));
  model.on("change:state", onChange);
  onChange();
  // Lets Python know a view exists (BudgetWidget.wait_rendered).
  model.send({ type: "soba:rendered" });
  return () => {
    clearTimeout(ui.freshTimer);
    model.off("change:state", onChange);
    ui.box.remove();
  };
}

export default { render };
