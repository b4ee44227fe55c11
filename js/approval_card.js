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
//   data-state      "pending" | the verdict (once, session, deny, timeout, cancelled)
// Buttons: [data-answer="once"], [data-answer="session"], [data-answer="deny"]; the reason
// field: .soba-approval__reason; the outcome line: .soba-approval__decision.

function h(tag, className, parent, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

function diffBlock(parent, diff) {
  const pre = h("pre", "soba-approval__code soba-approval__diff", parent);
  for (const line of diff.replace(/\n$/, "").split("\n")) {
    let kind = "";
    if (line.startsWith("+++") || line.startsWith("---")) kind = "file";
    else if (line.startsWith("+")) kind = "add";
    else if (line.startsWith("-")) kind = "del";
    else if (line.startsWith("@@")) kind = "hunk";
    h("span", kind ? `soba-approval__line soba-approval__line--${kind}` : "soba-approval__line", pre, line + "\n");
  }
}

function render({ model, el }) {
  const box = h("div", "soba-approval", el);
  const draw = () => {
    const r = model.get("request") || {};
    const d = model.get("decision") || {};
    box.replaceChildren();
    box.dataset.tool = r.tool || "";
    box.dataset.state = d.verdict || "pending";
    const head = h("div", "soba-approval__head", box);
    h("span", "soba-approval__title", head, d.verdict ? "SOBA asked to run" : "SOBA asks to run");
    h("code", "soba-approval__tool", head, r.tool || "");
    const isEdit = !!r.diff;
    const label = r.tool === "shell" ? "command" : r.tool === "python" ? "code" : "file";
    h("div", "soba-approval__label", box, label);
    h("pre", "soba-approval__code soba-approval__body", box, r.body || "");
    if (isEdit) {
      h("div", "soba-approval__label", box, "change");
      diffBlock(box, r.diff);
    }
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
    model.off("change:decision", draw);
    model.off("change:request", draw);
    box.remove();
  };
}

export default { render };
