/*
 * tandem — the web page's event stream of the open chat.
 *
 *   stream   tail(): fetch + a ReadableStream SSE parser (not EventSource:
 *            reconnects and the banner are ours), resumed with ?after=<seq>;
 *            every reconnect (a reset too) waits 0.5 s growing to 5 s. A tab
 *            hidden for 5 s lets its stream go and resumes it when shown.
 *   events   EVENTS: one handler per event type, applied in seq order; an
 *            event with seq <= the last applied one is skipped.
 */
'use strict';

/* -- stream -- */

let streamControl = null;

function stopStream() {
  if (streamControl) streamControl.abort();
  streamControl = null;
  link.streamUp();
}

function startStream(c) {
  stopStream();
  streamControl = new AbortController();
  tail(c, streamControl.signal);
  if (document.visibilityState === 'hidden') dropWhenHidden(); // opened in a background tab
}

let hiddenTimer = null;

function dropWhenHidden() {
  clearTimeout(hiddenTimer);
  hiddenTimer = setTimeout(() => { if (document.visibilityState === 'hidden') stopStream(); }, HIDDEN_DROP_MS);
}

/** Out of sight: the stream goes after a while. In sight again: it resumes from the last applied seq. */
function onVisibility() {
  if (document.visibilityState === 'hidden') return dropWhenHidden();
  clearTimeout(hiddenTimer);
  if (page.state === 'live' && chat && !streamControl) startStream(chat);
}

/** A `reset` event: this device is too far behind and reloads the snapshot. */
class Reset extends Error {}

/**
 * Follows one chat's events until aborted, reconnecting from the last applied seq. Every
 * reconnect waits (0.5 s growing to 5 s), a reset or a 400 included: a chatd answering those
 * again and again must not be asked in a tight loop. The wait is short again once an event applies.
 */
async function tail(c, signal) {
  let delay = RETRY_MIN_MS;
  while (!signal.aborted) {
    const attempt = new AbortController();
    const abort = () => attempt.abort();
    signal.addEventListener('abort', abort);
    const hung = setTimeout(abort, REQUEST_MS); // until the headers come: a hung connect is a lost chatd
    const progress = { applied: false }; // set by readEvents
    let quiet = false; // a refusal that is not a lost chatd: retried without the banner
    let behind = false; // a reset, or a 400 (our seq is past chatd's log): the snapshot again
    try {
      const res = await fetch(`${API}/conversations/${enc(c.id)}/events?after=${c.seq}`,
        { signal: attempt.signal, cache: 'no-store', headers: { accept: 'text/event-stream' } });
      if (res.ok) {
        clearTimeout(hung); // from here readEvents' silence watchdog keeps watch
        link.streamUp();
        await readEvents(res.body, c, attempt, progress); // ends cleanly when chatd stops: go again
      } else {
        const error = await errorFrom(res);
        if (error.status === 401) return signedOut();
        if (error.status === 404) return chatGone(c);
        behind = error.status === 400;
        quiet = !error.lost;
      }
    } catch (error) {
      if (signal.aborted) return;
      behind = error instanceof Reset;
    } finally {
      clearTimeout(hung);
      signal.removeEventListener('abort', abort);
      attempt.abort();
    }
    if (progress.applied) delay = RETRY_MIN_MS;
    if (behind) {
      try {
        await reload(c, signal);
        quiet = true;
      } catch (error) {
        if (error.status === 404) return chatGone(c);
        quiet = !error.lost; // a lost chatd shows the banner; api() saw to a 401
      }
    }
    if (signal.aborted) return;
    if (!quiet) link.streamDown();
    await sleep(delay, signal);
    delay = Math.min(delay * 2, RETRY_MAX_MS);
  }
}

/**
 * Reads an SSE body frame by frame (`id:`, `event:`, `data:` lines; a blank
 * line ends one; comments skipped), calling `onFrame({id, type, data})`
 * for each; silence past SILENCE_MS (keepalives come every 15 s) aborts
 * `attempt`: a dead link. The chat's stream and the inbox's both read here.
 */
async function readSse(body, attempt, onFrame) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let frame = { id: null, type: '', data: [] };
  let watchdog = setTimeout(() => attempt.abort(), SILENCE_MS);
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      clearTimeout(watchdog);
      watchdog = setTimeout(() => attempt.abort(), SILENCE_MS);
      buffer += value;
      let start = 0;
      for (let end; (end = buffer.indexOf('\n', start)) !== -1; start = end + 1) {
        const line = buffer.slice(start, buffer[end - 1] === '\r' ? end - 1 : end);
        if (line === '') {
          onFrame(frame);
          frame = { id: null, type: '', data: [] };
        } else if (line[0] !== ':') {
          const colon = line.indexOf(':');
          const field = colon === -1 ? line : line.slice(0, colon);
          const value = colon === -1 ? '' : line.slice(colon + (line[colon + 1] === ' ' ? 2 : 1));
          if (field === 'id') frame.id = value;
          else if (field === 'event') frame.type = value;
          else if (field === 'data') frame.data.push(value);
        }
      }
      buffer = buffer.slice(start);
    }
  } finally {
    clearTimeout(watchdog);
    reader.cancel().catch(() => {});
  }
}

/** The chat's events, applied in order; `progress.applied` once one applied. */
function readEvents(body, c, attempt, progress) {
  return readSse(body, attempt, (frame) => { if (dispatchFrame(c, frame)) progress.applied = true; });
}

/** One SSE frame: true when it was an event that applied. */
function dispatchFrame(c, frame) {
  if (frame.type === 'reset') throw new Reset();
  if (!frame.data.length) return false;
  let data;
  try { data = JSON.parse(frame.data.join('\n')); } catch { return false; }
  return applyEvent(c, Number(frame.id), frame.type, data);
}

/** Applies one event once: a replay after a reconnect (seq <= the last applied) changes nothing. */
function applyEvent(c, seq, type, data) {
  if (c !== chat || !Number.isFinite(seq) || seq <= c.seq) return false;
  c.seq = seq;
  try {
    if (EVENTS[type]) EVENTS[type](c, data || {});
  } catch (error) {
    console.error('event', type, error);
  }
  $('#messages').dataset.seq = String(seq);
  return true;
}

/** Loads the snapshot again into the same chat object and repaints it. */
async function reload(c, signal) {
  const snapshot = await api('GET', `/conversations/${enc(c.id)}`);
  if (signal.aborted || c !== chat) return;
  Object.assign(c, buildChat(snapshot));
  renderChat();
  loadAnswered(c, snapshot); // around.js
  loadUndoState(c);
  loadPresence(c);
  loadSubs(c, true); // subagents.js
  if (pane.open) loadFiles(c);
}

function chatGone(c) {
  if (c !== chat) return;
  showToast('This chat is gone (deleted for good).', { error: true });
  navigate(null);
  refreshList();
}

/* -- events -- */

const EVENTS = {
  'conversation.updated'(c, d) {
    if (!d.conversation) return;
    if (d.conversation.state === 'queued' && c.conversation.state === 'idle') setStatus(c, 'Queued'); // run.started follows
    c.conversation = d.conversation;
    renderTitle();
    renderControls();
    updateListItem(d.conversation);
    refreshListSoon();
  },
  'message.created'(c, d) { if (d.message) insertMessage(c, d.message); },
  'message.updated'(c, d) { if (d.message) updateMessage(c, d.message); },
  'run.queued'(c, d) {
    const run = Object.assign(runOf(c, d.run_id), { status: 'queued', position: d.position });
    setStatus(c, ...runStatusLabel(c, run));
    renderControls();
  },
  'run.started'(c, d) {
    runOf(c, d.run_id).status = 'running';
    requestBegins(c); // status.js: the time to first token starts here
    setStatus(c, 'Thinking');
    renderControls();
  },
  'text.delta'(c, d) {
    const message = c.byId.get(d.message_id);
    if (!message) return;
    message.text = (message.text || '') + (d.text || '');
    markDirty(c, message.id);
    noteDelta(c, d.text); // status.js: first token, the meter's estimate
    setStatus(c, 'Answering');
  },
  'reasoning.delta'(c, d) {
    const message = c.byId.get(d.message_id);
    if (!message) return;
    message.reasoning = (message.reasoning || '') + (d.text || '');
    markDirty(c, message.id);
    noteDelta(c, d.text);
    setStatus(c, 'Thinking');
  },
  'tool.started'(c, d) {
    const call = callOf(c, d.call_id, d.name);
    call.status = 'running';
    if (d.summary) call.summary = oneLine(d.summary);
    refreshCall(c, call);
    setStatus(c, toolStep(call.name, d.summary || call.summary)); // status.js: "Reading notes.md"
  },
  'tool.finished'(c, d) {
    const call = callOf(c, d.call_id);
    Object.assign(call, { status: d.ok ? 'ok' : 'failed', resultSummary: oneLine(d.summary) });
    if (isFilesCard(d.card)) call.card = d.card;
    // The line's card (message.created) has the input and result; the event names the page.
    if (!call.app && d.app) call.app = { kind: 'mcp_app', ...d.app };
    refreshCall(c, call);
    renderChips(c);
    requestBegins(c); // the next request goes with this result
    setStatus(c, 'Thinking');
  },
  files(c, d) { // a change set was kept: the list changed, and an undo (origin user) may concern a card here
    if (pane.open) refreshFilesSoon(c);
    refreshPresenceSoon(c);
    if (d.origin === 'user') refreshUndoSoon(c);
  },
  'tool.consent'(c, d) {
    if (!d.card_id) return;
    noteCard(c, d); // around.js: the call an egress card goes under
    c.consents.set(d.card_id, d);
    if (d.call_id && !d.subagent_id) { // a sub-agent's call is in its own chat
      const call = callOf(c, d.call_id, d.name);
      call.status = 'waiting';
      refreshCall(c, call);
    }
    renderConsents();
    setStatus(c, 'Waiting for you');
    keepBottom();
  },
  'tool.consent_answered'(c, d) {
    const card = c.consents.get(d.card_id);
    noteAnswered(c, card, d.decision, false); // around.js
    dropCard(c, d.card_id);
    const call = c.calls.get(d.call_id || (card && card.call_id));
    if (!call || call.status !== 'waiting') return;
    const allowed = d.decision === 'once' || d.decision === 'always';
    call.status = allowed ? 'running' : 'failed';
    if (!allowed) call.resultSummary = d.decision === 'expired' ? 'nobody answered in time' : 'denied';
    refreshCall(c, call);
  },
  usage(c, d) { noteUsage(c, d); }, // status.js
  paused(c, d) { runOf(c, d.run_id).steps = d.steps; }, // run.finished follows: Paused · after N steps
  'run.retrying'(c, d) {
    setStatus(c, 'Thinking', `retrying${d.wait_s != null ? ` in ${d.wait_s} s` : ''}${d.reason ? `: ${oneLine(d.reason)}` : ''}`);
  },
  'run.finished'(c, d) {
    const run = Object.assign(runOf(c, d.run_id), { status: d.status }, d.error ? { error: d.error } : {});
    for (const call of c.calls.values()) { // an ended run leaves none of its calls running
      if ((call.status === 'running' || call.status === 'waiting') && ownerRun(c, call) === d.run_id) {
        Object.assign(call, { status: 'failed', resultSummary: call.resultSummary || 'not run' });
        refreshCall(c, call);
      }
    }
    for (const card of [...c.consents.values()]) if (card.run_id === d.run_id) dropCard(c, card.card_id);
    noteFinished(c, run, d); // status.js: its failure, for the banner
    setStatus(c, ...runStatusLabel(c, run));
    renderControls();
  },
  'pending.added'(c, d) { addPending(c, d.pending); },
  'pending.updated'(c, d) { addPending(c, d.pending); },
  'pending.removed'(c, d) { removePending(c, d.pending_id, false); },
  'pending.delivered'(c, d) { removePending(c, d.pending_id, true); },
  sub_agent_started(c) { loadSubs(c); }, // subagents.js: the count and the menu
  sub_agent_done(c, d) { subDone(c, d); },
  task_started(c) { loadTasks(c, true); }, // subagents.js: the task's line
  task_done(c, d) { loadTasks(c, true); if (sub.id === d.task_id) showSub(sub.id); },
  goal(c, d) { c.goal = d.goal || null; renderGoal(); }, // subagents.js: the line over the composer
  loops(c, d) { c.loops = d.loops || []; renderLoops(); }, // and the loops' lines
};
