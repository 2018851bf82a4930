/*
 * tandem — the web page's open chat: a snapshot becomes the model (buildChat),
 * then the DOM (renderChat); after that every view is updated in place.
 *
 *   chat     the model of the open chat: its active path, tool calls, runs,
 *            waiting messages, consent cards, the last applied event seq.
 *   render   messages (body, reasoning, tool calls), consent cards, waiting
 *            messages, run controls (the status line, the meter and the
 *            failure banner are status.js's). Text deltas
 *            are painted once per animation frame; a streaming answer renders
 *            only its last blocks again (md.renderLive).
 *   actions  stop, continue, regenerate, send now.
 */
'use strict';

/* -- chat -- */

/** The open chat's model, from a snapshot. */
function buildChat(snapshot) {
  const c = {
    id: snapshot.conversation.id,
    conversation: snapshot.conversation,
    goal: snapshot.goal || null, // its line over the composer (subagents.js)
    loops: snapshot.loops || [], // and theirs
    path: [], // the active path, oldest first, tool results included
    byId: new Map(),
    calls: new Map(), // call id → {id, name, summary, status, result, resultSummary, ownerId}
    runs: new Map(),
    lastRun: null,
    pending: new Map(),
    gonePending: new Set(), // delivered or removed: a late answer must not bring one back
    consents: new Map(),
    undo: new Map(), // change set rev → what Undo did to it on this page (see undoRow)
    turnUndo: new Map(), // run id → what "Undo this turn" did (see turnRow)
    present: null, // paths the chat's file list holds now (null: not read yet): a chip of another is "deleted since"
    trashed: new Set(), // paths in the chat's trash: such a chip offers Restore
    chipNotes: new Map(), // path → what a chip's Restore answered ({error} or {busy})
    presenceTimer: null,
    undoTimer: null,
    seq: Number(snapshot.seq) || 0,
    usage: null,
    status: { state: 'Ready', detail: '' },
    views: new Map(), // message id → its DOM
    pendingViews: new Map(),
    dirty: new Set(), // messages to paint at the next frame
  };
  for (const run of snapshot.runs || []) {
    c.runs.set(run.id, run);
    c.lastRun = run;
    if (run.usage) c.usage = run.usage;
  }
  for (const message of snapshot.messages || []) {
    c.path.push(message);
    registerMessage(c, message);
  }
  for (const pending of snapshot.pending || []) c.pending.set(pending.id, pending);
  for (const card of snapshot.consents || []) c.consents.set(card.card_id, card);
  // Calls without a result: waiting on a card, running, or left unrun by an ended run.
  const carded = new Set([...c.consents.values()].map((card) => card.call_id));
  const active = c.lastRun && ACTIVE_RUN.has(c.lastRun.status);
  for (const call of c.calls.values()) {
    if (call.result != null) continue;
    if (carded.has(call.id)) call.status = 'waiting';
    else if (active && ownerRun(c, call) === c.lastRun.id) call.status = 'running';
    else Object.assign(call, { status: 'failed', resultSummary: 'not run' });
  }
  const [state, detail] = runStatusLabel(c, c.lastRun);
  c.status = { state, detail };
  return c;
}

/** Notes what a message says about tool calls: an answer's calls, or a call's result. */
function registerMessage(c, message) {
  c.byId.set(message.id, message);
  if (message.role === 'assistant' && Array.isArray(message.tool_calls)) {
    for (const raw of message.tool_calls) {
      if (!raw || !raw.id) continue;
      const fn = raw.function || {};
      const call = callOf(c, raw.id, fn.name || raw.name);
      if (!call.summary) call.summary = summarizeArguments(fn.arguments !== undefined ? fn.arguments : raw.arguments);
      call.ownerId = message.id;
    }
  }
  if (message.role === 'tool' && message.tool_call_id) {
    const call = callOf(c, message.tool_call_id);
    call.result = message.text;
    call.status = message.status === 'failed' ? 'failed' : 'ok';
    if (message.summary) call.resultSummary = oneLine(message.summary);
    if (isFilesCard(message.card)) call.card = message.card;
    if (isAppCard(message.card)) call.app = message.card; // apps.js
  }
}

function callOf(c, id, name) {
  let call = c.calls.get(id);
  if (!call) {
    call = { id, name: 'tool', summary: '', status: 'running', result: null, resultSummary: '', ownerId: null, card: null, app: null };
    c.calls.set(id, call);
  }
  if (name) call.name = name;
  return call;
}

function ownerRun(c, call) {
  const owner = call.ownerId && c.byId.get(call.ownerId);
  return owner ? owner.run_id : null;
}

/** A short line for a call from its arguments (the snapshot keeps no summary). */
function summarizeArguments(args) {
  let value = args;
  if (typeof args === 'string') {
    try { value = JSON.parse(args); } catch { return oneLine(args).slice(0, 120); }
  }
  if (!value || typeof value !== 'object') return '';
  const key = ['command', 'path', 'url', 'query', 'pattern'].find((k) => typeof value[k] === 'string');
  if (key) return oneLine(value[key]).slice(0, 120);
  const text = JSON.stringify(value);
  return text === '{}' ? '' : text.slice(0, 120);
}

function isRunActive(c) {
  return !!((c.lastRun && ACTIVE_RUN.has(c.lastRun.status)) || (c.conversation.state && c.conversation.state !== 'idle'));
}

function runOf(c, id) {
  let run = c.runs.get(id);
  if (!run) {
    run = { id, status: 'queued' };
    c.runs.set(id, run);
    c.lastRun = run;
  }
  return run;
}

/** Puts a new message on the path. A new branch (edit, regenerate) drops what followed its parent. */
function insertMessage(c, message) {
  if (c.byId.has(message.id)) return updateMessage(c, message);
  const at = message.parent_id == null ? -1 : c.path.findIndex((m) => m.id === message.parent_id);
  const known = message.parent_id == null || at >= 0;
  if (message.role === 'compacted' && known) {
    c.path.splice(at + 1, 0, message); // a summary goes in under its parent; the answer being written moves under it
  } else {
    if (known) {
      for (const gone of c.path.splice(at + 1)) {
        c.byId.delete(gone.id);
        const view = c.views.get(gone.id);
        if (view) { view.node.remove(); c.views.delete(gone.id); }
      }
    }
    c.path.push(message);
  }
  registerMessage(c, message);
  if (message.role === 'tool') refreshCall(c, c.calls.get(message.tool_call_id));
  else placeView(c, message);
  renderChips(c);
  renderControls();
  keepBottom();
}

function updateMessage(c, message) {
  const known = c.byId.get(message.id);
  if (!known) return; // not on this device's path
  Object.assign(known, message);
  registerMessage(c, known);
  const view = c.views.get(known.id);
  if (view) fillView(c, known, view);
  renderControls();
  keepBottom();
}

/* -- render -- */

function renderChat() {
  const c = chat;
  $('#empty-chat').hidden = true;
  c.views.clear();
  c.pendingViews.clear();
  $('#messages').replaceChildren(...c.path.filter((m) => m.role !== 'tool').map((m) => makeView(c, m).node));
  $('#messages').dataset.seq = String(c.seq);
  $('#pending').replaceChildren();
  for (const id of c.pending.keys()) paintPending(c, id);
  renderTitle();
  renderConsents();
  renderGoal(); // subagents.js
  renderChips(c);
  renderStatus();
  renderMeter();
  renderControls();
  keepBottom(true);
}

function renderTitle() {
  $('#chat-title').textContent = chat ? titleOf(chat.conversation) : 'New chat';
  $('#files-toggle').hidden = !chat;
  renderChatMenu(); // around.js
  renderChatTools(); // settings.js: the model picker and the settings button
  renderSubs(); // subagents.js
}

/** Adds a message's view at its place on the path (a summary can go in the middle). */
function placeView(c, message) {
  const view = makeView(c, message);
  const next = c.path.slice(c.path.indexOf(message) + 1).map((m) => c.views.get(m.id)).find(Boolean);
  $('#messages').insertBefore(view.node, next ? next.node : null);
}

/** A message's DOM: reasoning and tool calls fold around the body, made once there is something to fold. */
function makeView(c, message) {
  const result = isResult(message); // a sub-agent's (subagents.js), not the person's
  const node = el('div', { class: 'message', 'data-message-id': message.id, 'data-role': result ? 'result' : message.role, 'data-goal-event': message.goal_event });
  const view = { node, body: el('div', { class: 'body' }), reasoning: null, tools: null, note: null, callNodes: new Map(), editing: false, later: null };
  node.append(view.body);
  if (message.role === 'assistant') node.append(view.note = el('p', { class: 'note', hidden: true }));
  if (message.role === 'user' && !result) {
    node.append(contextFold(message) || '', agentChip(message), loopChip(message), attachmentChips(message) || '', el('div', { class: 'actions' }, button('edit quiet', 'Edit', () => startEdit(c, message.id))));
  }
  addBranch(c, message, node); // around.js
  c.views.set(message.id, view);
  fillView(c, message, view);
  return view;
}

const NOTES = { stopped: 'Stopped.', interrupted: 'Interrupted: Continue finishes it.', failed: 'This answer failed.' };

function fillView(c, message, view) {
  view.node.classList.toggle('streaming', message.status === 'streaming');
  if (!view.editing && !fillBody(view.body, message) && !view.later) {
    view.later = setTimeout(() => { view.later = null; markDirty(c, message.id); }, LONG_EVERY_MS);
  }
  if (message.role !== 'assistant') return;
  fillReasoning(view, message);
  fillTools(c, view, message);
  view.note.textContent = NOTES[message.status] || '';
  view.note.hidden = !view.note.textContent;
}

/** What each answer's body shows: {text, live (md.renderLive's), at (when)}. */
const painted = new WeakMap();

/** Paints a message's text; false when a long streaming answer is left for a later paint. */
function fillBody(body, message) {
  const text = message.text || '';
  if (message.role === 'assistant') return fillAnswer(body, text, message.status === 'streaming');
  if (isResult(message)) body.replaceChildren(resultFold(message));
  else if (message.role === 'compacted') {
    body.replaceChildren(el('details', { class: 'summary-fold' }, el('summary', { text: 'Summary of the earlier conversation' }), md.render(text)));
  } else if (message.role === 'cleared') body.textContent = 'Context cleared: the model does not see the messages above.';
  else if (message.role === 'goal') body.textContent = goalLineText(message); // subagents.js
  else body.textContent = message.role === 'user' ? typedText(message) : text; // as typed (composer.js: without what chatd added for files)
  return true;
}

/**
 * An answer's Markdown. While it streams only its last blocks are rendered again (md.renderLive):
 * rendering all of a long answer every frame froze the tab.
 */
function fillAnswer(body, text, streaming) {
  const shown = painted.get(body);
  if (shown && shown.text === text) return true; // a status change: the text is on screen already
  const now = performance.now();
  if (!streaming) {
    body.replaceChildren(md.render(text));
    painted.set(body, { text, live: null, at: now });
    return true;
  }
  const live = shown && shown.live;
  // A huge last block (one long code block) is still rendered whole: then not every frame.
  if (live && text.length - live.done.length > LONG_TAIL && now - shown.at < LONG_EVERY_MS) return false;
  painted.set(body, { text, live: md.renderLive(body, text, live), at: now });
  return true;
}

function fillReasoning(view, message) {
  if (!message.reasoning && !view.reasoning) return;
  if (!view.reasoning) {
    view.reasoning = el('details', { class: 'reasoning' }, el('summary'), el('div', { class: 'reasoning-text' }));
    view.body.before(view.reasoning);
  }
  if (view.reasoningShown !== message.reasoning) { // a text delta leaves it as it was
    view.reasoningShown = message.reasoning;
    $('.reasoning-text', view.reasoning).textContent = message.reasoning || '';
  }
  $('summary', view.reasoning).textContent = message.status === 'streaming' && !message.text ? 'Thinking…' : 'Reasoning';
}

/** The calls an answer made, folded under it, each updated in place; its tasks a line each (subagents.js). */
function fillTools(c, view, message) {
  const all = Array.isArray(message.tool_calls) ? message.tool_calls.filter((raw) => raw && raw.id) : [];
  fillTasks(c, view, all.filter(isTask));
  const calls = all.filter((raw) => !isTask(raw));
  if (!calls.length) return;
  if (!view.tools) view.body.after(view.tools = el('details', { class: 'tools' }, el('summary')));
  $('summary', view.tools).textContent = calls.length === 1 ? '1 tool call' : `${calls.length} tool calls`;
  for (const { id } of calls) {
    let node = view.callNodes.get(id);
    if (!node) {
      node = makeCallNode(id);
      view.callNodes.set(id, node);
      view.tools.append(node.root);
    }
    if (c.calls.has(id)) fillCall(c, node, c.calls.get(id));
  }
}

function makeCallNode(id) {
  const node = {
    name: el('span', { class: 'name' }),
    summary: el('span', { class: 'summary' }),
    status: el('span', { class: 'status' }),
    resultSummary: el('p', { class: 'result-summary' }),
    result: el('pre', { class: 'result' }),
    files: el('div', { class: 'files-change', hidden: true }),
    filesKey: '',
    app: null, // apps.js: the frame of the tool's page
    appKey: '',
  };
  node.root = el('div', { class: 'tool-call', 'data-call-id': id },
    el('div', { class: 'tool-head' }, node.name, node.summary, node.status), node.resultSummary, node.files, node.result);
  return node;
}

function fillCall(c, node, call) {
  fillFilesCard(c, node, call);
  fillAppFrame(c, node, call); // apps.js
  node.name.textContent = call.name;
  node.summary.textContent = call.summary;
  node.status.textContent = call.status; // running | ok | failed | waiting
  node.root.dataset.status = call.status;
  node.resultSummary.textContent = call.resultSummary;
  node.resultSummary.hidden = !call.resultSummary;
  const result = call.result == null ? '' : String(call.result);
  node.result.hidden = !result;
  node.result.textContent = result.length > RESULT_CHARS
    ? `${result.slice(0, RESULT_CHARS)}\n… (${result.length - RESULT_CHARS} more characters)` : result;
  fillConsentLines(c, node, call); // around.js: its answered cards, one line each
}

/** Repaints one call under the answer that made it. */
function refreshCall(c, call) {
  const view = call && call.ownerId && c.views.get(call.ownerId);
  if (!view) return;
  const node = view.callNodes.get(call.id);
  if (node) fillCall(c, node, call);
  else fillTools(c, view, c.byId.get(call.ownerId));
}

/* Text deltas go into the model at once and reach the DOM at the next frame. */
let frameAsked = false;

function markDirty(c, id) {
  c.dirty.add(id);
  if (frameAsked) return;
  frameAsked = true;
  requestAnimationFrame(flush);
  setTimeout(flush, 100); // a hidden tab gets no frames: paint it anyway
}

function flush() {
  frameAsked = false;
  if (!chat || !chat.dirty.size) return;
  for (const id of chat.dirty) {
    const view = chat.views.get(id);
    if (view && chat.byId.has(id)) fillView(chat, chat.byId.get(id), view);
  }
  chat.dirty.clear();
  keepBottom();
}

/** Scrolls to the end when the reader is there already (or when told to). */
function keepBottom(force = false) {
  const scroller = $('#scroller');
  if (force) page.stick = true;
  if (page.stick) scroller.scrollTop = scroller.scrollHeight;
}

function onScroll() {
  const s = $('#scroller');
  page.stick = s.scrollHeight - s.scrollTop - s.clientHeight < 80;
}

/* Run controls (the status line and the meter are status.js's). */

function renderControls() {
  const c = chat;
  const active = !!c && isRunActive(c);
  const shown = c && [...c.path].reverse().find((m) => m.role !== 'tool');
  $('#stop').hidden = !active;
  $('#continue').hidden = !c || active || !c.lastRun || !CONTINUABLE.has(c.lastRun.status);
  $('#regenerate').hidden = !c || active || !shown || shown.role !== 'assistant';
  $('#send-now').hidden = !c || active || c.pending.size === 0;
  // A button hidden under the focus (Continue pressed) hands it to the box, not to the page's body.
  const focused = document.activeElement;
  if (focused && focused.hidden && focused.parentElement === $('#run-controls')) $('#composer').focus();
}

/* Consent cards. */

function renderConsents() {
  $('#consents').replaceChildren(...(chat ? [...chat.consents.values()].map((card) => consentCard(chat, card)) : []));
}

function consentCard(c, card) {
  // chatd's labels when it sends some: a host command's "always" holds for the whole box.
  const labels = (card.labels && typeof card.labels === 'object' && card.labels) || {};
  const error = el('p', { class: 'inline-error', hidden: true });
  const buttons = DECISIONS.map(([decision, label]) => button(`decision ${decision}`,
    typeof labels[decision] === 'string' && labels[decision] ? labels[decision] : label,
    () => answerCard(c, card, decision, buttons, error), { 'data-decision': decision }));
  return el('div', { class: 'consent', 'data-card-id': card.card_id, role: 'group', 'aria-label': 'Permission needed' },
    el('p', { class: 'consent-head' }, card.subagent_id ? `Sub-agent «${card.subagent_title}» asks: ` : 'Permission needed: ',
      el('span', { class: 'name', text: card.name || 'tool' })),
    el('p', { class: 'summary', text: card.summary || '' }),
    card.reason ? el('p', { class: 'reason', text: card.reason }) : null,
    el('div', { class: 'consent-buttons' }, ...buttons),
    error);
}

async function answerCard(c, card, decision, buttons, error) {
  const pressed = buttons.find((b) => b === document.activeElement); // disabling drops the focus: given back below
  for (const b of buttons) b.disabled = true;
  try {
    await api('POST', `/conversations/${enc(card.subagent_id || c.id)}/consent`, { card_id: card.card_id, decision }); // a sub-agent's at its id
    noteAnswered(c, card, decision, true); // around.js
    dropCard(c, card.card_id);
  } catch (failure) {
    if (failure.status === 409 || failure.status === 410) { // answered elsewhere, or no longer waited for
      dropCard(c, card.card_id);
      return showToast(failure.message);
    }
    for (const b of buttons) b.disabled = false;
    showInlineError(error, failure);
  } finally {
    // Still shown: the button again; the card gone: the next card, else the box.
    if (pressed && document.activeElement === document.body) (pressed.isConnected ? pressed : $('#consents .consent button') || $('#composer')).focus();
  }
}

function dropCard(c, cardId) {
  if (!c.consents.delete(cardId)) return;
  if (c === chat) renderConsents();
  if (!c.consents.size && c.status.state === 'Waiting for you') setStatus(c, 'Thinking');
}

/* Waiting messages (sent while a run works), shown over the composer. */

function addPending(c, pending) {
  if (!pending || !pending.id || c.gonePending.has(pending.id)) return;
  c.pending.set(pending.id, { ...c.pending.get(pending.id), ...pending });
  if (c === chat) paintPending(c, pending.id);
  renderControls();
}

function removePending(c, id, delivered) {
  c.gonePending.add(id);
  c.pending.delete(id);
  const view = c.pendingViews.get(id);
  if (view) {
    if (view.editing && delivered) showToast(TOO_LATE);
    view.root.remove();
    c.pendingViews.delete(id);
  }
  renderControls();
}

function paintPending(c, id) {
  let view = c.pendingViews.get(id);
  const pending = c.pending.get(id);
  const result = isResult(pending);
  if (!view) {
    view = { text: el('div', { class: 'text' }), error: el('p', { class: 'inline-error', hidden: true }), editing: false, files: el('div', { class: 'pending-files' }) };
    view.root = el('div', { class: 'pending', 'data-pending-id': id },
      el('span', { class: 'pending-label', text: 'Waiting' }), view.text, view.files,
      el('div', { class: 'pending-actions' },
        result ? null : button('pending-edit quiet', 'Edit', () => editPending(c, id, view)),
        button('pending-remove quiet', 'Remove', () => deletePending(c, id, view))),
      view.error);
    c.pendingViews.set(id, view);
    $('#pending').append(view.root);
  }
  if (result) view.text.replaceChildren(resultFold(pending));
  else if (!view.editing) view.text.textContent = typedText(pending);
  view.files.replaceChildren(...attachmentsOf(pending).map((a) => el('span', { class: 'pending-file', text: baseName(a.path) })));
  view.files.hidden = !view.files.childNodes.length;
}

const TOO_LATE = 'Too late: this message has reached the model already.';

function editPending(c, id, view) {
  if (isResult(c.pending.get(id))) return; // a sub-agent's words, not the person's to edit
  view.error.hidden = true;
  const added = addedText(c.pending.get(id)); // what chatd wrote of its files stays as it was
  const lead = leadText(c.pending.get(id)); // and the MCP context it put in front
  openEditor(view, view.text, 'pending', typedText(c.pending.get(id)), async (text) => {
    try {
      const updated = await api('PATCH', `/conversations/${enc(c.id)}/pending/${enc(id)}`, { text: lead + text + added });
      if (c.pending.has(id)) c.pending.set(id, { ...c.pending.get(id), ...updated });
    } catch (error) {
      if (error.status !== 409) throw error;
      showInlineError(view.error, TOO_LATE); // delivered meanwhile: its pending.delivered takes it away
      if (!view.root.isConnected) showToast(TOO_LATE);
    }
    const pending = c.pending.get(id);
    if (pending) view.text.textContent = typedText(pending);
  });
}

async function deletePending(c, id, view) {
  try {
    await api('DELETE', `/conversations/${enc(c.id)}/pending/${enc(id)}`);
    removePending(c, id, false);
  } catch (error) {
    if (error.status === 409) showInlineError(view.error, TOO_LATE);
    else showError(error);
  }
}

/** Editing a sent message: it is replaced and answered again. */
function startEdit(c, id) {
  const view = c.views.get(id);
  const message = c.byId.get(id);
  if (!view || !message) return;
  const added = addedText(message); // the files' lines chatd wrote for the model stay
  const lead = leadText(message); // and the MCP context in front
  openEditor(view, view.body, 'edit', typedText(message), async (text) => {
    await startingRun(c, () => api('POST', `/conversations/${enc(c.id)}/messages/${enc(id)}/edit`, { text: lead + text + added }));
    refreshListSoon();
  }, () => fillBody(view.body, message));
}

/**
 * An inline editor in place of `shown` (hidden meanwhile, or filled by
 * `restore`): textarea.<kind>-input, button.<kind>-save, button.<kind>-cancel.
 * `save(text)` throws to keep the editor open with its error shown.
 */
function openEditor(view, shown, kind, value, save, restore) {
  if (view.editing) return;
  view.editing = true;
  const input = el('textarea', { class: `${kind}-input`, rows: kind === 'edit' ? '3' : '2', 'aria-label': 'Edit the message' });
  input.value = value || '';
  const error = el('p', { class: 'inline-error', hidden: true });
  const box = el('div', { class: `${kind}-editor` });
  const close = () => {
    view.editing = false;
    view.node?.classList.remove('editing');
    view.root?.classList.remove('editing');
    if (restore) restore(); else { box.remove(); shown.hidden = false; }
  };
  const saveButton = button(`${kind}-save`, kind === 'edit' ? 'Save and run again' : 'Save', async () => {
    if (!input.value.trim()) return;
    saveButton.disabled = true;
    try {
      await save(input.value);
      close();
    } catch (failure) {
      saveButton.disabled = false;
      showInlineError(error, failure);
    }
  });
  input.addEventListener('keydown', (event) => {
    if (event.key === 'Escape') { event.preventDefault(); close(); }
    // A waiting message saves with Enter; a sent one (longer, runs again) with Ctrl/Cmd+Enter.
    const submit = kind === 'edit' ? event.ctrlKey || event.metaKey : !event.shiftKey;
    if (event.key === 'Enter' && submit && !event.isComposing) { event.preventDefault(); saveButton.click(); }
  });
  box.append(input, el('div', { class: 'row' }, saveButton, button(`${kind}-cancel quiet`, 'Cancel', close)), error);
  view.node?.classList.add('editing');
  view.root?.classList.add('editing');
  if (restore) shown.replaceChildren(box);
  else { shown.hidden = true; shown.after(box); }
  input.focus();
}


/* -- run actions -- */

/**
 * Runs `request`, an action that starts a run: the status says Queued at once
 * (chatd's events follow), and goes back to what it was if chatd refuses.
 */
async function startingRun(c, request) {
  const before = c.status;
  if (!isRunActive(c)) setStatus(c, 'Queued');
  try {
    return await request();
  } catch (error) {
    if (c.status.state === 'Queued' && !isRunActive(c)) setStatus(c, before.state, before.detail);
    throw error;
  }
}

/** Stop, Continue, Regenerate, Send now: what follows comes as events. */
async function runAction(target, action) {
  const c = chat;
  if (!c) return;
  const hadFocus = document.activeElement === target; // disabling it drops the focus: given back below
  target.disabled = true;
  try {
    const post = () => api('POST', `/conversations/${enc(c.id)}/${action}`, {});
    await (action === 'stop' ? post() : startingRun(c, post));
    refreshListSoon();
  } catch (error) {
    if (error.type !== 'no_active_run') showError(error); // a Stop that came after the end
  } finally {
    target.disabled = false;
    if (hadFocus && document.activeElement === document.body) (target.hidden ? $('#composer') : target).focus();
  }
}
