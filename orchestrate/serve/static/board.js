// The board page of `orchestrate serve`: plain JavaScript, no build step.
// Everything the agent wrote is put on the page with textContent, never as HTML.
"use strict";

const CSRF = { "x-orchestrate-csrf": "1" }; // the server wants it on every change made by cookie
const COLUMN = {
  queued: "queued", running: "running", waiting_approval: "approval", done: "done",
  failed: "failed", lost: "failed", blocked: "failed", cancelled: "failed",
};
const tasks = new Map(); // id -> task, as the board stream says
let selected = null; // the task shown, with its stream and entries

// --- small helpers ---------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c != null) node.append(c);
  return node;
}

class ApiError extends Error {
  constructor(status, error) {
    super((error && error.message) || `HTTP ${status}`);
    this.status = status;
    this.code = error && error.code;
    this.error = error;
  }
}

async function api(method, path, body) {
  const headers = { ...CSRF };
  if (body !== undefined) headers["content-type"] = "application/json";
  const r = await fetch(path, {
    method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (r.status === 401) { location.reload(); throw new ApiError(401, null); } // signed out: sign in again
  let data = null;
  if (r.status !== 204) { try { data = await r.json(); } catch (e) { data = null; } }
  if (!r.ok) throw new ApiError(r.status, data && data.error);
  return data;
}

// An EventSource that comes back by itself: the browser retries a dropped connection (sending
// Last-Event-ID); one the server closed for good (an error status) is reopened here after a pause.
function liveStream(url, handlers, onState) {
  let source = null, lastId = null, closed = false;
  function open() {
    const sep = url.includes("?") ? "&" : "?";
    source = new EventSource(lastId === null ? url : `${url}${sep}after=${encodeURIComponent(lastId)}`);
    source.onopen = () => onState("live");
    source.onerror = () => {
      onState("reconnecting");
      if (source.readyState === EventSource.CLOSED && !closed) setTimeout(open, 2000);
    };
    for (const [kind, fn] of Object.entries(handlers)) {
      source.addEventListener(kind, (ev) => { lastId = ev.lastEventId || lastId; fn(JSON.parse(ev.data)); });
    }
  }
  open();
  return { close() { closed = true; source.close(); } };
}

function setConn(state) {
  const c = document.getElementById("conn");
  c.dataset.state = state;
  c.textContent = state === "live" ? "live" : state === "reconnecting" ? "reconnecting…" : "connecting…";
}

// --- the board -------------------------------------------------------------------------------

function card(task) {
  const first = (task.prompt.trim().split("\n")[0] || "").slice(0, 120);
  const node = el("li", { class: "card", "data-task": String(task.id), tabindex: "0",
                          onclick: () => select(task.id) },
    el("span", { class: "id", text: `#${task.id} ${task.executor}` }), " ",
    el("span", { class: "badge", text: task.status }),
    el("p", { text: first, title: task.prompt.slice(0, 500) }));
  if (selected && selected.id === task.id) node.classList.add("selected");
  return node;
}

function placeCard(task) {
  const old = document.querySelector(`#board [data-task="${task.id}"]`);
  if (old) old.remove();
  const list = document.querySelector(`#board [data-column="${COLUMN[task.status] || "failed"}"] ol`);
  const node = card(task);
  const after = [...list.children].find((c) => Number(c.dataset.task) < task.id); // newest on top
  list.insertBefore(node, after || null);
  for (const col of document.querySelectorAll("#board .column")) {
    col.querySelector(".count").textContent = String(col.querySelectorAll("li").length);
  }
}

function onTask(task) {
  tasks.set(task.id, task);
  placeCard(task);
  if (selected && selected.id === task.id) showHead(task);
}

// --- one task --------------------------------------------------------------------------------

function select(id) {
  if (selected) selected.stream.close();
  history.replaceState(null, "", `#task=${id}`);
  for (const c of document.querySelectorAll(".card.selected")) c.classList.remove("selected");
  const c = document.querySelector(`#board [data-task="${id}"]`);
  if (c) c.classList.add("selected");
  document.getElementById("task").hidden = false;
  document.getElementById("t-entries").replaceChildren();
  document.getElementById("t-approvals").replaceChildren();
  document.getElementById("t-diff").replaceChildren();
  document.getElementById("t-checkpoints").replaceChildren();
  document.getElementById("ws-body").hidden = true;
  document.getElementById("ws-none").textContent = "";
  document.getElementById("ws-scope").value = "all";
  wsSay("");
  selected = { id, runs: new Map(), stream: null };
  selected.stream = liveStream(`/api/tasks/${id}/stream`, {
    patch: (m) => onPatch(m), state: (m) => onState(m), notice: (m) => onNotice(m),
  }, setConn);
  refreshTask(); // and then its workspace
  loadApprovals();
}

async function refreshTask() {
  if (!selected) return;
  const id = selected.id;
  try {
    const detail = await api("GET", `/api/tasks/${id}`);
    if (selected && selected.id === id) { onTask(detail.task); loadWorkspace(detail.task); }
  } catch (e) { /* the stream tells the rest */ }
}

function showHead(task) {
  document.getElementById("t-title").textContent = `Task #${task.id} · ${task.executor}`;
  const s = document.getElementById("t-status");
  s.textContent = task.status + (task.cancel_requested ? " (cancelling)" : "");
  s.dataset.status = task.status;
  document.getElementById("t-prompt").textContent = task.prompt;
  document.getElementById("t-reason").textContent = task.error || task.reason || task.notice || "";
  const cost = task.cost_usd == null ? "" : `, $${task.cost_usd.toFixed(4)}`;
  document.getElementById("t-usage").textContent =
    `tokens: ${task.input_tokens} in, ${task.output_tokens} out, ${task.cache_read_tokens} cache read${cost}` +
    ` · attempts ${task.attempts}`;
  const ended = ["done", "failed", "lost", "blocked", "cancelled"].includes(task.status);
  document.getElementById("t-cancel").disabled = ended;
  document.getElementById("t-retry").disabled = !ended || task.status === "done";
}

function runBox(runId) {
  let run = selected.runs.get(runId);
  if (!run) {
    const box = el("div", { class: "run", "data-run": String(runId) },
      el("div", { class: "run-head", text: `run ${runId}` }));
    document.getElementById("t-entries").append(box);
    run = { box, entries: new Map() };
    selected.runs.set(runId, run);
  }
  return run;
}

function onPatch(m) {
  const patch = m.data;
  const run = runBox(m.runId);
  const node = renderEntry(patch.entry);
  const old = run.entries.get(patch.index);
  if (old) old.replaceWith(node);
  else {
    const later = [...run.entries.entries()].filter(([i]) => i > patch.index).sort((a, b) => a[0] - b[0])[0];
    run.box.insertBefore(node, later ? later[1] : null);
  }
  run.entries.set(patch.index, node);
}

function onState(m) {
  const status = m.data.status;
  const task = tasks.get(selected.id);
  if (task) showHead({ ...task, status });
  loadApprovals();
  scheduleRefresh(); // the record (its workspace is made when it starts) and the diff after each turn
}

// State changes come in bursts (a replayed history): one refresh for each burst.
let refreshTimer = null;
function scheduleRefresh() {
  if (refreshTimer !== null) return;
  refreshTimer = setTimeout(() => { refreshTimer = null; refreshTask(); }, 150);
}

function onNotice(m) {
  document.getElementById("t-entries").append(el("div", { class: "entry system_message", text: m.data.notice }));
}

// --- entries ---------------------------------------------------------------------------------

function renderEntry(entry) {
  const kind = entry.type.kind;
  const node = el("div", { class: `entry ${kind}`, "data-index": String(entry.index), "data-kind": kind });
  if (kind === "tool_use") node.append(...renderTool(entry.type.tool));
  else if (kind === "plan") node.append(renderPlan(entry.type.items || []));
  else if (kind === "token_usage") node.append(renderUsage(entry.type.usage));
  else if (kind === "error") node.textContent = `${entry.type.error.code || "error"}: ${entry.type.error.message}`;
  else node.textContent = entry.content || (entry.type.reasoning || "");
  return node;
}

function describeAction(a) {
  switch (a.kind) {
    case "command_run": return `$ ${a.command}`;
    case "file_read": case "file_write": case "file_edit": return a.path;
    case "search": return a.path ? `${a.query} in ${a.path}` : a.query;
    case "web_fetch": return a.url;
    case "task": return a.description;
    default: return a.toolName || "";
  }
}

function renderTool(tool) {
  const head = el("div", { class: "tool-head" }, `${tool.toolName}: ${describeAction(tool.action)}`,
    el("span", { class: "tool-status", "data-status": tool.status, text: tool.status.replace("_", " ") }));
  const out = [head];
  const a = tool.action;
  if (a.kind === "command_run" && a.result) {
    const r = a.result;
    const text = [r.stdout, r.stderr].filter(Boolean).join("\n");
    if (text) out.push(el("pre", { class: "output", text }));
    if (r.exitCode != null) out.push(el("div", { class: "exit", text: `exit ${r.exitCode}` }));
  }
  for (const change of a.changes || []) if (change.unifiedDiff) out.push(renderDiff(change.unifiedDiff));
  if (a.kind === "tool" && a.args != null) out.push(el("pre", { text: JSON.stringify(a.args, null, 2) }));
  if (tool.result && tool.result.error) out.push(el("div", { class: "error", text: tool.result.error }));
  else if (tool.result && tool.result.data != null && a.kind !== "command_run") {
    const data = typeof tool.result.data === "string" ? tool.result.data : JSON.stringify(tool.result.data, null, 2);
    out.push(el("pre", { class: "output", text: data.slice(0, 20000) }));
  }
  if (tool.approval && tool.approval.decision !== "pending") {
    const why = tool.approval.reason ? `: ${tool.approval.reason}` : "";
    const always = tool.approval.forSession ? " (for the session)" : "";
    out.push(el("div", { class: "approval-note", text: `${tool.approval.decision}${always}${why}` }));
  }
  return out;
}

function renderDiff(text) {
  // Before the first hunk, "--- a/x" and "+++ b/x" are the header, not a deletion and an addition.
  const pre = el("pre", { class: "diff" });
  let inHunk = false;
  for (const line of text.split("\n")) {
    if (line.startsWith("@@")) inHunk = true;
    const cls = line.startsWith("@@") ? "hunk" : !inHunk ? "meta"
      : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "";
    pre.append(el("span", { class: cls, text: line + "\n" }));
  }
  return pre;
}

function renderPlan(items) {
  return el("ul", { class: "plan" },
    ...items.map((i) => el("li", { "data-status": i.status, text: `[${i.status}] ${i.content}` })));
}

function renderUsage(u) {
  const cost = u.totalCostUsd == null ? "" : ` · $${u.totalCostUsd.toFixed(4)}`;
  return el("span", { text: `tokens: ${u.inputTokens} in, ${u.outputTokens} out, ` +
    `${u.cacheReadTokens} cache read, ${u.cacheWriteTokens} cache write${cost}` });
}

// --- approvals -------------------------------------------------------------------------------

async function loadApprovals() {
  if (!selected) return;
  const id = selected.id;
  let open = [];
  try { open = await api("GET", `/api/approvals?task_id=${id}`); } catch (e) { return; }
  if (!selected || selected.id !== id) return;
  const box = document.getElementById("t-approvals");
  const shown = new Set(open.map((a) => String(a.id)));
  for (const node of [...box.children]) {
    if (!shown.has(node.dataset.approval) && !node.dataset.said) answeredElsewhere(node);
  }
  for (const a of open) if (!box.querySelector(`[data-approval="${a.id}"]`)) box.append(approvalBox(a));
}

// Another client (or the timeout, or the run ending) settled it: say how, then let it go.
async function answeredElsewhere(node) {
  node.dataset.said = "1";
  for (const b of node.querySelectorAll("button")) b.disabled = true;
  try {
    const a = await api("GET", `/api/approvals/${node.dataset.approval}`);
    node.querySelector(".said").textContent = a.status === "withdrawn"
      ? `Withdrawn: ${a.reason}` : `Already answered: ${a.decision} by ${a.answered_by}`;
  } catch (e) { node.querySelector(".said").textContent = "Already answered"; }
  setTimeout(() => node.remove(), 4000);
}

function approvalBox(a) {
  const what = a.request.command || JSON.stringify(a.request.tool_input);
  const reason = el("input", { class: "reason", placeholder: "reason (for a denial)" });
  const edited = el("textarea", { class: "edited", rows: "3", hidden: "" });
  edited.value = JSON.stringify(a.request.tool_input, null, 2);
  const said = el("p", { class: "said", role: "status" });
  const box = el("div", { class: "approval", "data-approval": String(a.id) },
    el("div", { class: "what", text: `${a.request.tool_name} wants to run: ${what}` }));
  async function answer(body) {
    for (const b of box.querySelectorAll("button")) b.disabled = true;
    try {
      const done = await api("POST", `/api/approvals/${a.id}`, { by: "board", ...body });
      said.textContent = `${done.decision}`;
    } catch (e) {
      said.textContent = e.code === "already_answered" ? `Already answered: ${e.message}` : e.message;
      if (e.code !== "already_answered") for (const b of box.querySelectorAll("button")) b.disabled = false;
    }
    box.dataset.said = "1";
    setTimeout(() => { box.remove(); }, 4000);
  }
  const button = (cls, text, fn) => el("button", { type: "button", class: cls, onclick: fn, text });
  box.append(
    button("primary approve", "Approve", () => answer({ decision: "approve" })),
    button("approve-session", "Always allow this", () => answer({ decision: "approve", for_session: true })),
    button("edit", "Edit input…", () => { edited.hidden = !edited.hidden; }),
    button("approve-edited", "Approve edited", () => {
      let input;
      try { input = JSON.parse(edited.value); } catch (e) { said.textContent = "The input is not JSON."; return; }
      answer({ decision: "approve", updated_input: input });
    }),
    button("danger deny", "Deny", () => answer({ decision: "deny", reason: reason.value || undefined })),
    button("danger deny-stop", "Deny and stop", () =>
      answer({ decision: "deny", reason: reason.value || undefined, interrupt: true })),
    reason, edited, said);
  return box;
}

// --- workspace (diff, checkpoints, rollback, commit, removal) -------------------------------------

const LIVE = ["running", "waiting_approval"];
let wsLoads = 0; // a newer load wins over a slower older one

function wsMode(task) {
  return (task && task.run_options && task.run_options.workspace) || "here";
}

function wsSay(text, isError) {
  document.getElementById("ws-said").textContent = isError ? "" : text;
  document.getElementById("ws-error").textContent = isError ? text : "";
}

async function loadWorkspace(task) {
  if (!selected || !task || task.id !== selected.id) return;
  const id = task.id;
  const load = ++wsLoads;
  const none = document.getElementById("ws-none");
  const body = document.getElementById("ws-body");
  const where = document.getElementById("ws-where");
  if (!task.workspace) {
    body.hidden = true;
    where.textContent = "";
    none.textContent = wsMode(task) === "here"
      ? "This task runs in its own directory: no workspace, no checkpoints."
      : ["done", "failed", "cancelled", "lost", "blocked"].includes(task.status)
        ? "Its workspace has been removed (or was never made)."
        : "Its workspace is made when it starts.";
    return;
  }
  const scope = document.getElementById("ws-scope").value;
  const query = scope.startsWith("turn:") ? `?turn=${scope.slice(5)}` : "";
  let points, diff;
  try {
    [points, diff] = await Promise.all([
      api("GET", `/api/tasks/${id}/checkpoints`), api("GET", `/api/tasks/${id}/diff${query}`)]);
  } catch (e) {
    if (load !== wsLoads) return;
    if (e.code === "turn_not_found" && scope !== "all") {
      document.getElementById("ws-scope").value = "all";
      return loadWorkspace(task);
    }
    body.hidden = true;
    none.textContent = e.code === "no_workspace" ? "Its workspace has been removed." : `${e.code || "error"}: ${e.message}`;
    return;
  }
  if (load !== wsLoads || !selected || selected.id !== id) return;
  none.textContent = "";
  body.hidden = false;
  where.textContent = `${points.mode} · branch ${points.branch} · ${points.path}`;
  showScopes(points.checkpoints, scope);
  document.getElementById("t-diff").replaceChildren(...renderChanges(diff));
  const live = LIVE.includes(task.status);
  document.getElementById("t-checkpoints").replaceChildren(
    ...points.checkpoints.map((c) => checkpointItem(task, c, live)),
    checkpointItem(task, { id: "base", label: "where the workspace started", turn: null }, live));
  document.getElementById("ws-commit-send").disabled = live;
  document.getElementById("ws-remove").disabled = live;
}

function showScopes(points, current) {
  const turns = [...new Set(points.map((c) => c.turn).filter((t) => t != null))].sort((a, b) => a - b);
  const select = document.getElementById("ws-scope");
  select.replaceChildren(el("option", { value: "all", text: "everything (base → now)" }),
    ...turns.map((t) => el("option", { value: `turn:${t}`, text: `turn ${t} only` })));
  select.value = [...select.options].some((o) => o.value === current) ? current : "all";
}

function renderChanges(diff) {
  if (!diff.files.length) return [el("p", { class: "diff-summary", text: "No changes." })];
  const count = diff.files.length + diff.omitted_files;
  const out = [el("p", { class: "diff-summary" }, `${count} file${count === 1 ? "" : "s"} changed`,
    el("span", { class: "n-add", text: `+${diff.additions}` }), el("span", { class: "n-del", text: `−${diff.deletions}` }),
    ` (${diff.start} → ${diff.end})`)];
  out.push(el("ul", { class: "file-list" }, ...diff.files.map((f) => el("li", { "data-path": f.path },
    el("span", { class: "st", text: f.status[0].toUpperCase(), title: f.status }), f.path,
    el("span", { class: "n-add", text: `+${f.additions}` }), el("span", { class: "n-del", text: `−${f.deletions}` })))));
  for (const f of diff.files) {
    const box = el("details", { class: "file-diff", open: "", "data-path": f.path },
      el("summary", { text: `${f.path} (${f.status})` }));
    if (f.binary) box.append(el("p", { class: "reason", text: "Binary file." }));
    else if (f.diff) box.append(renderDiff(f.diff.replace(/\n$/, "")));
    if (f.truncated) box.append(el("p", { class: "reason", text: "Cut: this file's change is too large to show whole." }));
    out.push(box);
  }
  if (diff.omitted_files) out.push(el("p", { class: "reason", text: `${diff.omitted_files} more files are not listed.` }));
  return out;
}

function checkpointItem(task, c, live) {
  const turn = c.turn == null ? "" : ` · turn ${c.turn} ${c.moment === "start" ? "start" : "end"}`;
  const when = c.created_at ? ` · ${new Date(c.created_at * 1000).toLocaleTimeString()}` : "";
  const button = el("button", { type: "button", class: "rollback", "data-checkpoint": String(c.id), text: "Roll back here",
    onclick: () => rollbackTo(task, c.id) });
  button.disabled = live;
  if (live) button.title = "Not while the task runs";
  return el("li", { "data-checkpoint": String(c.id) },
    el("strong", { text: c.id === "base" ? "base" : `#${c.id}` }), turn + when,
    el("span", { class: "label", text: c.label }), button);
}

async function rollbackTo(task, to) {
  const what = to === "base" ? "where the workspace started" : `checkpoint ${to}`;
  if (!confirm(`Put task #${task.id}'s files back as ${what} had them?\n` +
               "Files added since are removed. The files as they are now are kept as a new checkpoint.")) return;
  wsSay("");
  try {
    const done = await api("POST", `/api/tasks/${task.id}/rollback/${to}`);
    wsSay(`Rolled back to ${to}; the files as they were are checkpoint #${done.saved.id}.`);
  } catch (e) { wsSay(`${e.code || "error"}: ${e.message}`, true); }
  loadWorkspace(tasks.get(task.id) || task);
}

async function commitWorkspace(ev) {
  ev.preventDefault();
  if (!selected) return;
  const input = document.getElementById("ws-message");
  wsSay("");
  try {
    const done = await api("POST", `/api/tasks/${selected.id}/commit`, { message: input.value });
    input.value = "";
    wsSay(done.commit ? `Committed ${done.commit.slice(0, 12)} on ${done.branch}.` : "Nothing to commit.");
  } catch (e) { wsSay(`${e.code || "error"}: ${e.message}`, true); }
}

async function removeWorkspace() {
  if (!selected) return;
  const id = selected.id;
  if (!confirm(`Remove task #${id}'s workspace and its checkpoints? (Its branch stays if it has commits.)`)) return;
  wsSay("");
  try {
    const done = await api("DELETE", `/api/tasks/${id}/workspace`);
    wsSay(`Removed ${done.path}` + (done.branch_kept ? `; the branch ${done.branch} stays.` : "."));
  } catch (e) { wsSay(`${e.code || "error"}: ${e.message}`, true); }
  refreshTask();
}

// --- forms -----------------------------------------------------------------------------------

async function loadExecutors(tries) {
  let list = [];
  try { list = await api("GET", "/api/executors"); } catch (e) { return; }
  const select = document.getElementById("f-executor");
  const keep = select.value || localStorage.getItem("orchestrate.executor");
  select.replaceChildren(...list.map((x) => el("option", {
    value: x.name,
    text: x.installed === true ? x.name : x.installed === null ? `${x.name} (checking…)` : `${x.name} (not installed)`,
  })));
  if (keep && list.some((x) => x.name === keep)) select.value = keep;
  if (list.some((x) => x.installed === null) && tries > 0) setTimeout(() => loadExecutors(tries - 1), 2000);
}

async function submitTask(ev) {
  ev.preventDefault();
  const error = document.getElementById("submit-error");
  error.textContent = "";
  const body = {
    executor: document.getElementById("f-executor").value,
    prompt: document.getElementById("f-prompt").value,
    cwd: document.getElementById("f-cwd").value.trim(),
    priority: Number(document.getElementById("f-priority").value || 0),
  };
  const workspace = document.getElementById("f-workspace").value;
  if (workspace !== "here") {
    body.workspace = workspace;
    const opts = { keep: document.getElementById("f-keep").checked };
    const base = document.getElementById("f-base").value.trim();
    const setup = document.getElementById("f-setup").value.trim();
    const globs = document.getElementById("f-globs").value.split(",").map((g) => g.trim()).filter(Boolean);
    if (base && workspace === "worktree") opts.base = base;
    if (setup) opts.setup = setup;
    if (globs.length) opts.copy_globs = globs;
    body.workspace_options = opts;
  }
  const options = document.getElementById("f-options").value.trim();
  if (options) {
    try { body.executor_options = JSON.parse(options); } catch (e) { error.textContent = "Options are not JSON."; return; }
  }
  try {
    const made = await api("POST", "/api/tasks", body);
    localStorage.setItem("orchestrate.cwd", body.cwd);
    localStorage.setItem("orchestrate.executor", body.executor);
    document.getElementById("f-prompt").value = "";
    document.getElementById("new-task").hidden = true;
    onTask(made.task);
    select(made.task.id);
  } catch (e) {
    // The server's own words, with its code: "not_a_git_repository: ... is not inside a git repository".
    error.textContent = e.code ? `${e.code}: ${e.message}` : e.message;
  }
}

function showWorkspaceFields() {
  const mode = document.getElementById("f-workspace").value;
  document.getElementById("f-ws").hidden = mode === "here";
  document.getElementById("f-base-label").hidden = mode !== "worktree";
}

async function sendFollowUp(ev) {
  ev.preventDefault();
  const text = document.getElementById("fu-text");
  const error = document.getElementById("fu-error");
  error.textContent = "";
  try {
    await api("POST", `/api/tasks/${selected.id}/messages`, { text: text.value });
    text.value = "";
  } catch (e) { error.textContent = e.message; }
}

async function act(what) {
  try { onTask(await api("POST", `/api/tasks/${selected.id}/${what}`)); }
  catch (e) { document.getElementById("t-reason").textContent = e.message; }
}

// --- start -----------------------------------------------------------------------------------

function start() {
  document.getElementById("new-task-toggle").addEventListener("click", () => {
    const s = document.getElementById("new-task");
    s.hidden = !s.hidden;
  });
  document.getElementById("submit-form").addEventListener("submit", submitTask);
  document.getElementById("follow-up").addEventListener("submit", sendFollowUp);
  document.getElementById("f-workspace").addEventListener("change", showWorkspaceFields);
  document.getElementById("ws-scope").addEventListener("change", () => selected && loadWorkspace(tasks.get(selected.id)));
  document.getElementById("ws-refresh").addEventListener("click", () => refreshTask());
  document.getElementById("ws-commit").addEventListener("submit", commitWorkspace);
  document.getElementById("ws-remove").addEventListener("click", removeWorkspace);
  document.getElementById("t-cancel").addEventListener("click", () => act("cancel"));
  document.getElementById("t-retry").addEventListener("click", () => act("retry"));
  document.getElementById("t-close").addEventListener("click", () => {
    if (selected) selected.stream.close();
    selected = null;
    document.getElementById("task").hidden = true;
    history.replaceState(null, "", location.pathname);
  });
  document.getElementById("f-cwd").value = localStorage.getItem("orchestrate.cwd") || "";
  loadExecutors(15);
  liveStream("/api/stream", { task: onTask }, setConn);
  const m = /task=(\d+)/.exec(location.hash);
  if (m) select(Number(m[1]));
}

start();
