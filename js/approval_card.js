// soba_notebook approval card: an anywidget ES module (no imports, no network).
//
// Renders the synced `request` trait (soba_notebook.notebook.approvals.ApprovalCard): the tool,
// the full command or code in a scrollable block (never cut), a diff for writes, and three
// answers. A click sends {answer: "once" | "session" | "deny", reason} to Python; the `decision`
// trait, once set, replaces the buttons with the outcome (the card is then static). Each render
// reports {shown: true}: a person can see the card (the kernel denies a question no front end
// showed within a short bound, which is how it tells a headless run, e.g. nbclient).
//
// Stable hooks for tests, on the root element (.soba-approval):
//   data-tool       the tool asked about
//   data-call       the tool call's id
//   data-state      "pending" | the verdict (once, session, deny, timeout, cancelled)
// Buttons: [data-answer="once"], [data-answer="session"], [data-answer="deny"]; the reason
// field: .soba-approval__reason; the outcome line: .soba-approval__decision; under a block that
// scrolls: .soba-approval__more; why no session rule is offered: .soba-approval__no-rule; why a
// call asks although the mode lets its kind run: .soba-approval__why; the
// warning that the text holds control characters (shown escaped): .soba-approval__warning.

function h(tag, className, parent, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

function diffBlock(parent, diff) {
  const pre = h("pre", "soba-approval__code soba-approval__diff", parent);
  pre.dataset.lines = String(diff.replace(/\n$/, "").split("\n").length);
  for (const line of diff.replace(/\n$/, "").split("\n")) {
    let kind = "";
    if (line.startsWith("+++") || line.startsWith("---")) kind = "file";
    else if (line.startsWith("+")) kind = "add";
    else if (line.startsWith("-")) kind = "del";
    else if (line.startsWith("@@")) kind = "hunk";
    h("span", kind ? `soba-approval__line soba-approval__line--${kind}` : "soba-approval__line", pre, line + "\n");
  }
  return pre;
}

// A block taller than its box scrolls; say so under it (scrollbars may be hidden until hovered),
// so a long command is never taken for a cut one.
function scrollNote(pre, observers) {
  const note = document.createElement("div");
  note.className = "soba-approval__more";
  note.hidden = true;
  pre.after(note);
  const check = () => {
    const more = pre.scrollHeight > pre.clientHeight + 1;
    note.hidden = !more;
    const lines = Number(pre.dataset.lines || 0);
    note.textContent = more ? `${new Intl.NumberFormat("en-US").format(lines)} lines: scroll the block to read all of it` : "";
  };
  if (typeof ResizeObserver !== "undefined") {
    const observer = new ResizeObserver(check);
    observer.observe(pre);
    observers.push(observer);
  }
  check();
}

function render({ model, el }) {
  const box = h("div", "soba-approval", el);
  const observers = [];
  const draw = () => {
    for (const observer of observers.splice(0)) observer.disconnect();
    const r = model.get("request") || {};
    const d = model.get("decision") || {};
    box.replaceChildren();
    box.dataset.tool = r.tool || "";
    box.dataset.call = r.call_id || "";
    box.dataset.state = d.verdict || "pending";
    const head = h("div", "soba-approval__head", box);
    // A question about running the call names its tool; another one (keep the files a sandboxed
    // command left?) says what it asks in its own words.
    const run = !r.asks || r.asks === "run";
    h("span", "soba-approval__title", head, `${d.verdict ? "SOBA asked to" : "SOBA asks to"} ${run ? "run" : r.asks}`);
    if (run) h("code", "soba-approval__tool", head, r.tool || "");
    if (r.why) h("div", "soba-approval__warning soba-approval__why", box, r.why);
    const isEdit = !!r.diff;
    const label = !run ? "what it left" : r.tool === "shell" ? "command" : r.tool === "python" ? "code" : "file";
    h("div", "soba-approval__label", box, label);
    const body = h("pre", "soba-approval__code soba-approval__body", box, r.body || "");
    body.dataset.lines = String((r.body || "").split("\n").length);
    scrollNote(body, observers);
    if (isEdit) {
      h("div", "soba-approval__label", box, "change");
      scrollNote(diffBlock(box, r.diff), observers);
    }
    // The kernel made control characters visible (\x1b, \r, \u202e); this line says the text holds some.
    if (r.controls) h("div", "soba-approval__warning", box, r.controls);
    if (d.verdict) {
      const line = h("div", `soba-approval__decision soba-approval__decision--${d.verdict}`, box, d.text || d.verdict);
      line.setAttribute("role", "status");
      return;
    }
    const row = h("div", "soba-approval__actions", box);
    const once = h("button", "soba-approval__button soba-approval__button--allow", row, "Allow once");
    once.dataset.answer = "once";
    if (r.rule) {
      const session = h("button", "soba-approval__button", row, `Allow for this session: ${r.rule}`);
      session.dataset.answer = "session";
      session.title = `adds the rule “${r.rule}” for the rest of this session`;
    }
    const reason = h("input", "soba-approval__reason", row);
    reason.type = "text";
    reason.placeholder = "reason (optional, the agent reads it)";
    const deny = h("button", "soba-approval__button soba-approval__button--deny", row, "Deny");
    deny.dataset.answer = "deny";
    if (!r.rule && r.no_rule) h("div", "soba-approval__note soba-approval__no-rule", box, r.no_rule);
    const seconds = Math.round(r.timeout_s || 0);
    if (seconds) h("div", "soba-approval__note", box,
      `Denied on its own after ${new Intl.NumberFormat("en-US").format(seconds)} s without an answer.`);
    for (const button of row.querySelectorAll("button")) {
      button.addEventListener("click", () => {
        for (const b of row.querySelectorAll("button")) b.disabled = true;
        model.send({ answer: button.dataset.answer, reason: reason.value || "" });
      });
    }
    reason.addEventListener("keydown", (event) => {
      if (event.key === "Enter") deny.click();
      event.stopPropagation(); // typing here never reaches the notebook's shortcuts
    });
  };
  model.on("change:decision", draw);
  model.on("change:request", draw);
  draw();
  model.send({ shown: true });
  return () => {
    for (const observer of observers.splice(0)) observer.disconnect();
    model.off("change:decision", draw);
    model.off("change:request", draw);
    box.remove();
  };
}

export default { render };
