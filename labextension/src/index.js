/*
 * soba-notebook: the live notebook channel of soba_notebook (the JupyterLab front end).
 *
 * The agent runs in the kernel and asks, over a comm it opens to the target "soba.live_notebook"
 * (soba_notebook/notebook/live_channel.py), for the notebook open here at a path: "read" answers
 * with the open document as nbformat JSON (unsaved edits included), "apply" changes one cell of
 * the open model through its shared model, so JupyterLab never sees the file change under it (no
 * "File Changed" dialog, the user's unsaved edits stay) and its own undo takes the change back:
 * an insert or delete is one notebook transaction (Z / Edit > Undo in command mode), a replace
 * one transaction of the cell (Ctrl+Z in its editor). Changed and new cells carry the class
 * "soba-agent-changed" (style/index.css) until the user clicks or types in them. "outputs" shows a
 * cell the agent's notebook_run runs in the kernel: "running" shows [*] and its outputs so far
 * (none when it starts), "done" sets its execution count and nbformat outputs, as JupyterLab does after its own run
 * (unsaved; the outputs trusted, as the kernel made them). The kernel runs the cell, not this front
 * end: during a foreground %soba the kernel is busy with that cell, and a Run sent from here would
 * wait behind the turn that waits for it.
 *
 * Plain JavaScript on purpose: the only build dependency is @jupyterlab/builder, and
 * @jupyterlab/notebook is the running JupyterLab's shared singleton, never bundled.
 */
import { INotebookTracker } from '@jupyterlab/notebook';

const TARGET = 'soba.live_notebook';
const MARK = 'soba-agent-changed';

/** Kernel connections that already have our comm target. */
const registered = new WeakSet();

/** The absolute path JupyterLab knows a notebook panel by: server root + its path. */
function fullPath(panel, home) {
  let root = '';
  const script = document.getElementById('jupyter-config-data');
  try {
    root = JSON.parse(script ? script.textContent : '{}').serverRoot || '';
  } catch (e) {
    root = '';
  }
  if (root.startsWith('~') && home) {
    root = home + root.slice(1);
  }
  let local = panel.context.path;
  const drive = local.indexOf(':');
  const slash = local.indexOf('/');
  if (drive >= 0 && (slash < 0 || drive < slash)) {
    local = local.slice(drive + 1); // "RTC:dir/x.ipynb" and other drives
  }
  return root ? root.replace(/\/+$/, '') + '/' + local.replace(/^\/+/, '') : local;
}

function findPanel(tracker, path, home) {
  const open = [];
  let found = null;
  tracker.forEach(panel => {
    if (!panel.context || !panel.content || !panel.content.model) {
      return;
    }
    const full = fullPath(panel, home);
    open.push(full);
    if (full === path && found === null) {
      found = panel;
    }
  });
  return { panel: found, open };
}

/** The open document as nbformat JSON, every cell with the id the model gives it. */
function documentJSON(model) {
  const json = model.toJSON();
  json.cells = model.sharedModel.cells.map(cell => ({ ...cell.toJSON(), id: cell.id }));
  json.nbformat_minor = Math.max(5, json.nbformat_minor || 0); // ids need nbformat 4.5
  return json;
}

function indexOf(shared, id) {
  return shared.cells.findIndex(cell => cell.id === id);
}

/** Mark the cell with `id` until the user clicks or types in it, or its source changes otherwise. */
function mark(panel, id, kind) {
  const widget = panel.content.widgets.find(w => w.model.id === id);
  if (!widget) {
    return;
  }
  widget.addClass(MARK);
  widget.node.dataset.sobaChange = kind;
  const node = widget.node;
  const clear = () => {
    widget.removeClass(MARK);
    delete node.dataset.sobaChange;
    node.removeEventListener('pointerdown', clear, true);
    node.removeEventListener('keydown', clear, true);
    widget.model.contentChanged.disconnect(clear);
  };
  node.addEventListener('pointerdown', clear, true);
  node.addEventListener('keydown', clear, true);
  // connected after the agent's own change, so only a later change clears the mark
  widget.model.contentChanged.connect(clear);
}

function newCell(cell) {
  const made = {
    id: cell.id,
    cell_type: cell.cell_type,
    source: cell.source,
    metadata: cell.metadata || {}
  };
  if (cell.cell_type === 'code') {
    made.outputs = [];
    made.execution_count = null;
  }
  return made;
}

/** Apply one cell operation (soba_notebook/notebook/live_notebook.py, `_operation`). */
function applyEdit(panel, edit) {
  const shared = panel.content.model.sharedModel;
  if (edit.action === 'insert') {
    const at = edit.after_id === null ? 0 : indexOf(shared, edit.after_id) + 1;
    if (edit.after_id !== null && at === 0) {
      return { ok: false, error: `no cell ${edit.after_id} in the open notebook` };
    }
    shared.transact(() => shared.insertCell(at, newCell(edit.cell)));
    mark(panel, edit.cell.id, 'new');
    return { ok: true, index: at };
  }
  const at = indexOf(shared, edit.cell_id);
  if (at < 0) {
    return { ok: false, error: `no cell ${edit.cell_id} in the open notebook` };
  }
  const cell = shared.cells[at];
  if (cell.getSource() !== edit.expect) {
    return { ok: false, error: `cell ${edit.cell_id} changed in the notebook since it was read` };
  }
  if (edit.action === 'delete') {
    shared.transact(() => shared.deleteCell(at));
    return { ok: true, index: at };
  }
  if (cell.cell_type !== edit.cell.cell_type) {
    // a new type is a new cell with the same id, as JupyterLab's own "change cell type" does it
    shared.transact(() => {
      shared.deleteCell(at);
      shared.insertCell(at, newCell(edit.cell));
    });
  } else {
    cell.transact(() => {
      cell.setSource(edit.cell.source);
      if (cell.cell_type === 'code') {
        cell.setOutputs([]);
        cell.execution_count = null;
      }
    });
  }
  mark(panel, edit.cell.id, 'changed');
  return { ok: true, index: at };
}

/**
 * Show one cell's run by the agent (soba_notebook/notebook/live_notebook.py, `show_run`). The old
 * outputs go in a transaction of their own before the new ones come: replaced in one, a stream that
 * grew between two updates left the cell's output area empty.
 */
function showRun(panel, request) {
  const shared = panel.content.model.sharedModel;
  const at = indexOf(shared, request.cell_id);
  if (at < 0) {
    return { ok: false, error: `no cell ${request.cell_id} in the open notebook` };
  }
  const cell = shared.cells[at];
  if (cell.cell_type !== 'code') {
    return { ok: false, error: `cell ${request.cell_id} of the open notebook is not a code cell` };
  }
  const running = request.state === 'running';
  if (cell.outputs.length > 0) {
    cell.transact(() => cell.setOutputs([]));
  }
  cell.transact(() => {
    cell.setOutputs(request.outputs || []);
    cell.execution_count = running ? null : request.execution_count;
  });
  if ('executionState' in cell) {
    cell.executionState = running ? 'running' : 'idle'; // the prompt shows [*], then [N]
  }
  const model = panel.content.model.cells.get(at);
  if (!running && model && 'trusted' in model) {
    model.trusted = true; // the kernel made these outputs, as after the user's own run
  }
  return { ok: true, index: at };
}

function answer(request, tracker) {
  const { panel, open } = findPanel(tracker, request.path, request.home);
  if (panel === null) {
    return { found: false, open };
  }
  if (request.op === 'read') {
    return { found: true, notebook: documentJSON(panel.content.model), dirty: panel.content.model.dirty };
  }
  if (request.op === 'apply') {
    return { found: true, ...applyEdit(panel, request.edit) };
  }
  if (request.op === 'outputs') {
    return { found: true, ...showRun(panel, request) };
  }
  return { found: true, ok: false, error: `unknown request ${request.op}` };
}

function register(kernel, tracker) {
  if (!kernel || registered.has(kernel)) {
    return;
  }
  registered.add(kernel);
  kernel.registerCommTarget(TARGET, (comm, msg) => {
    const request = msg.content.data || {};
    let reply;
    try {
      reply = answer(request, tracker);
    } catch (error) {
      reply = { found: true, ok: false, error: String((error && error.message) || error) };
    }
    comm.send({ reply: request.id, ...reply });
  });
}

const plugin = {
  id: 'soba-notebook:live-notebook',
  description: "Lets soba_notebook's agent read and edit the notebook open here, in place",
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app, tracker) => {
    tracker.widgetAdded.connect((_, panel) => {
      const context = panel.sessionContext;
      register(context.session && context.session.kernel, tracker);
      context.kernelChanged.connect((_ctx, change) => register(change.newValue, tracker));
    });
    tracker.forEach(panel => register(panel.sessionContext.session && panel.sessionContext.session.kernel, tracker));
  }
};

export default plugin;
