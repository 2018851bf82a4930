/*
 * tandem — the web page's sub-agents of the open chat: the header's
 * "Sub-agents (n)" menu (n running), a read-only panel that follows one's
 * own conversation, a background one's result folded in the chat, and the
 * open cards of running ones (their answers go to the sub-agent's id).
 * Agents mode's tasks: a `task` call is one line "Task N · title · state";
 * the same panel shows its report (an unverified check marked) over its
 * worker's transcript.
 * A goal (docs/api.md "Goals"): the line over the composer (the goal, its
 * state, Pause, Resume, Clear), its lines in the transcript, and `/goal`.
 * Loops ("Loops"): a line each under the goal's (a pending one the card
 * asking for a yes), the label of a line a loop sent, and `/loop`.
 */
'use strict';

const isResult = (m) => !!(m && m.card && m.card.kind === 'sub_agent_result');

/** A result in the chat: folded, without the headline written for the model. */
function resultFold(m) {
  return el('details', { class: 'sub-result' }, el('summary', { text: `Result of «${m.card.title}» (${m.card.status})` }),
    md.render(String(m.text || '').replace(/^\[[^\n]*\]\n*/, '')));
}

/** The panel: the sub-agent shown, its messages and the last applied seq of its events. */
const sub = { c: null, id: null, kind: 'subagents', row: null, msgs: new Map(), nodes: new Map(), seq: 0, ctl: null };

/** The chat's sub-agents (c.subs, newest first); `cards` (the chat opened or read again): also the open cards of running ones, and its tasks. */
async function loadSubs(c, cards) {
  if (cards) loadTasks(c);
  const ticket = c.subTicket = (c.subTicket || 0) + 1;
  const data = await api('GET', `/conversations/${enc(c.id)}/subagents`).catch(() => null);
  if (!data || c !== chat || ticket !== c.subTicket) return;
  c.subs = data.subagents || [];
  renderSubs();
  for (const s of cards ? c.subs : []) {
    if (s.state !== 'running') continue;
    api('GET', `/conversations/${enc(c.id)}/subagents/${enc(s.id)}`).then((d) => {
      for (const card of d.snapshot.consents || []) {
        if (!c.consents.has(card.card_id)) c.consents.set(card.card_id, { ...card, subagent_id: s.id, subagent_title: s.title });
      }
      if (c === chat) renderConsents();
    }).catch(() => {});
  }
}

function renderSubs() {
  const box = $('#subagents');
  const subs = (chat && chat.subs) || [];
  box.hidden = !subs.length;
  if (!subs.length) box.open = false;
  if (sub.c !== chat && $('#sub-panel').open) $('#sub-panel').close();
  $('.n', box).textContent = subs.filter((s) => s.state === 'running').length;
  $('.menu-items', box).replaceChildren(...subs.map((s) => el('div', { class: 'sub-row', 'data-sub-id': s.id },
    button('sub-open quiet', `${s.title} · ${s.state} · ${s.wait ? 'foreground' : 'background'}`, () => showSub(s.id, true)),
    s.state === 'running' ? button('sub-stop', 'Stop', (e) => stopSub(s.id, e.currentTarget)) : null)));
}

/** A sub-agent's end on the parent (stream.js): its cards go, the list and the panel follow. */
function subDone(c, d) {
  for (const card of [...c.consents.values()]) if (card.subagent_id === d.subagent_id) dropCard(c, card.card_id);
  loadSubs(c);
  if (sub.id === d.subagent_id) showSub(sub.id);
}

async function stopSub(sid, target) {
  const c = chat;
  target.disabled = true;
  try {
    await api('POST', `/conversations/${enc(c.id)}/subagents/${enc(sid)}/stop`, {});
  } catch (error) {
    if (error.type !== 'not_running') showError(error);
  }
  target.disabled = false;
  if (c === chat) loadSubs(c);
  if (sub.id === sid) showSub(sid);
}

/** Shows one sub-agent (`kind` 'tasks': a task's worker) in the panel (`open`: the panel too) and follows it while it runs. */
function showSub(sid, open, kind) {
  if (sub.ctl) sub.ctl.abort();
  Object.assign(sub, { c: chat, id: sid, kind: open ? kind || 'subagents' : sub.kind, ctl: new AbortController() });
  if (open) {
    $('#subagents').open = false;
    $('#sub-log').replaceChildren();
    $('#sub-title').textContent = '…';
    $('#sub-panel').showModal();
  }
  followSub(sub.ctl.signal, chat, sid, sub.kind);
}

/** The sub-agent's snapshot, then its events while it runs; after a drop or a reset, both again. */
async function followSub(signal, c, sid, kind) {
  for (let delay = RETRY_MIN_MS; !signal.aborted; delay = Math.min(delay * 2, RETRY_MAX_MS)) {
    const attempt = new AbortController();
    const abort = () => attempt.abort();
    signal.addEventListener('abort', abort);
    try {
      const d = await api('GET', `/conversations/${enc(c.id)}/${kind}/${enc(sid)}`);
      if (signal.aborted) return;
      Object.assign(sub, { row: d.subagent || d.task, seq: Number(d.snapshot.seq) || 0, msgs: new Map(), nodes: new Map() });
      for (const m of d.snapshot.messages || []) sub.msgs.set(m.id, m);
      paintSub();
      if (sub.row.state !== 'running') return;
      const hung = setTimeout(abort, REQUEST_MS);
      const res = await fetch(`${API}/conversations/${enc(sid)}/events?after=${sub.seq}`,
        { signal: attempt.signal, cache: 'no-store', headers: { accept: 'text/event-stream' } });
      clearTimeout(hung);
      if (res.ok) {
        delay = RETRY_MIN_MS;
        await readSse(res.body, attempt, (frame) => signal.aborted || subEvent(frame));
      }
    } catch (error) {
      if (error.status === 404) return;
    } finally {
      signal.removeEventListener('abort', abort);
      attempt.abort();
    }
    await sleep(delay, signal);
  }
}

/** One event of the sub-agent's: its messages' text, as they come. */
function subEvent(frame) {
  if (frame.type === 'reset') throw new Reset();
  const seq = Number(frame.id);
  if (!(seq > sub.seq)) return;
  sub.seq = seq;
  let d;
  try { d = JSON.parse(frame.data.join('\n')); } catch { return; }
  let m = d.message || sub.msgs.get(d.message_id);
  if (!m) return;
  if (frame.type === 'text.delta') m.text = (m.text || '') + (d.text || '');
  else if (!frame.type.startsWith('message.')) return;
  sub.msgs.set(m.id, m = { ...sub.msgs.get(m.id), ...m });
  paintMsg(m);
}

function paintSub() {
  const s = sub.row, task = sub.kind === 'tasks';
  $('#sub-title').textContent = task ? `Task ${s.n}: ${s.title}` : s.title;
  $('#sub-state').textContent = `${s.state} · ${task ? "a worker's" : s.wait ? 'waited for' : 'in the background'} · read only`;
  $('#sub-stop').hidden = task || s.state !== 'running';
  $('#sub-report').hidden = !task;
  if (task) $('#sub-report').replaceChildren(taskReport(s), el('h3', { text: "The worker's transcript" }));
  $('#sub-log').replaceChildren();
  for (const m of sub.msgs.values()) paintMsg(m);
}

/** A message as text: an answer's calls one line each, a tool's result by its summary. */
function paintMsg(m) {
  const panel = $('#sub-panel');
  const end = panel.scrollHeight - panel.scrollTop - panel.clientHeight < 80; // at the end: it stays there
  let node = sub.nodes.get(m.id);
  if (!node) sub.nodes.set(m.id, node = $('#sub-log').appendChild(el('p', { class: 'sub-msg', 'data-role': m.role })));
  const calls = (m.tool_calls || []).map((t) => `→ ${(t.function || t).name} ${summarizeArguments((t.function || t).arguments)}`);
  node.textContent = m.role === 'tool' ? m.summary || oneLine(m.text).slice(0, 200) : [m.text, ...calls].filter(Boolean).join('\n');
  if (end) panel.scrollTop = panel.scrollHeight;
}

function initSubs() {
  $('#sub-close').addEventListener('click', () => $('#sub-panel').close());
  $('#sub-panel').addEventListener('close', () => { if (sub.ctl) sub.ctl.abort(); sub.id = null; });
  $('#sub-stop').addEventListener('click', (e) => stopSub(sub.id, e.currentTarget));
}

/** The saved agent a person's message asked for (`/agent`), or the skill it ran with (`/review`), as a chip; '' for none. */
const agentChip = (m) => {
  const r = (m.attachments || []).find((a) => a && (a.kind === 'agent' || a.kind === 'skill'));
  if (!r) return '';
  return r.kind === 'skill'
    ? el('p', { class: 'agent-chip skill-chip muted', text: `Skill ${r.name}`, title: `Sent with the ${r.layer} skill ${r.name}` })
    : el('p', { class: 'agent-chip muted', text: `For ${r.name}` });
};

/* -- tasks -- */

const TASK_HEAD = /^\[The report of task (\d+) \(«.*?»\), (\w+)/;
const isTask = (raw) => (raw.function || raw).name === 'task';

/** The chat's tasks (c.tasks) when it is in Agents mode or made a task (`any`: anyway); its lines follow. */
async function loadTasks(c, any) {
  if (!any && !(c.conversation.settings || {}).agents && ![...c.calls.values()].some((k) => k.name === 'task')) return;
  const ticket = c.taskTicket = (c.taskTicket || 0) + 1;
  const data = await api('GET', `/conversations/${enc(c.id)}/tasks`).catch(() => null);
  if (!data || c !== chat || ticket !== c.taskTicket) return;
  c.tasks = data.tasks || [];
  for (const [id, view] of c.views) if (view.tasks) fillTools(c, view, c.byId.get(id));
}

/** One line a task: running until its call's result, then the state its report's headline (or the list) says. */
function fillTasks(c, view, raws) {
  if (!raws.length) return;
  if (!view.tasks) (view.tools || view.body).after(view.tasks = el('div', { class: 'task-lines' }));
  view.taskNodes = view.taskNodes || new Map();
  for (const raw of raws) {
    let line = view.taskNodes.get(raw.id);
    if (!line) {
      view.taskNodes.set(raw.id, line = { text: el('span') });
      line.open = button('task-open quiet', 'Report', () => showSub(line.id, true, 'tasks'));
      view.tasks.append(line.root = el('div', { class: 'task-line', 'data-call-id': raw.id }, line.text, line.open));
    }
    const call = c.calls.get(raw.id) || {};
    const row = (c.tasks || []).find((t) => t.call_id === raw.id) || {};
    const [, n, said] = TASK_HEAD.exec(call.result || '') || [];
    let a = (raw.function || raw).arguments;
    try { a = typeof a === 'string' ? JSON.parse(a) : a; } catch { a = null; }
    const state = said || (row.held ? 'stopped: Continue resumes it' : row.state) || (call.result != null ? 'not started' : call.status === 'failed' ? 'not run' : 'running');
    line.id = row.id;
    line.text.textContent = `Task${n || row.n ? ` ${n || row.n}` : ''} · ${row.title || (a && a.title) || ''} · ${state}`;
    line.root.dataset.state = state;
    line.open.hidden = !row.id;
  }
}

/** A task's report (the whole one, else its call's result), each check no call ran marked. */
function taskReport(s) {
  const call = sub.c && sub.c.calls.get(s.call_id);
  const text = String(s.report || (call && call.result) || '').replace(/^(\[[^\n]*\]\n*)?(# Task[^\n]*\n+)?/, ''); // the panel's title says it
  if (!text) return el('p', { class: 'muted', text: 'No report yet: the worker is at it.' });
  const box = el('div', { class: 'task-report' }, md.render(text.replace(/^(-[^\n]*)\n(?=[^-\s])/gm, '$1\n\n'))); // a field after a list is no part of its last item
  for (const li of box.querySelectorAll('li')) if (/^unverified:/.test(li.textContent)) li.classList.add('unverified');
  return box;
}

/* -- goal -- */

/** A button's (and a command's) route: [method, path under the chat]; setting one is a PUT of /goal. */
const GOAL_ROUTES = { pause: ['POST', '/goal/pause'], resume: ['POST', '/goal/resume'], clear: ['DELETE', '/goal'] };

/** The open chat's goal over the composer: its text on one line, its state, what can be done; its loops' lines too. */
function renderGoal() {
  renderLoops();
  const box = $('#goal');
  const g = chat && chat.goal;
  box.hidden = !g;
  if (!g) return;
  box.dataset.state = g.state;
  const active = g.state === 'active';
  $('#goal-state').textContent = active ? `Goal · ${g.turns ? `turn ${g.turns} of ${g.max_turns}` : 'starts after this answer'}`
    : g.state === 'done' ? 'Goal reached' : `Goal ${g.state}`;
  const text = $('.goal-text', box);
  text.textContent = oneLine(g.text);
  text.title = g.text;
  const note = $('.goal-note', box);
  const evidence = (g.evidence || []).length ? ` (evidence: ${g.evidence.join(', ')})` : '';
  const why = String(g.note || g.paused_by || '');
  note.textContent = g.state === 'paused' ? why.charAt(0).toUpperCase() + why.slice(1)
    : g.state === 'blocked' ? `${g.note || 'Blocked'}${g.needs ? ` It needs: ${g.needs}` : ''}`
      : g.state === 'done' ? `${g.note || ''}${evidence}` : '';
  note.hidden = !note.textContent;
  $('#goal-pause').hidden = !active;
  $('#goal-resume').hidden = g.state !== 'paused' && g.state !== 'blocked';
  $('#goal-clear').textContent = g.state === 'done' ? 'Dismiss' : 'Clear';
}

/** A goal chatd answered (null: none), unless the chat has a newer one (its event came first). */
function noteGoal(c, goal, was) {
  if (goal ? c.goal && c.goal.updated > goal.updated : c.goal && c.goal.updated !== was) return;
  c.goal = goal || null;
  if (c === chat) renderGoal();
}

/** Sets (`text`), pauses, resumes or clears the chat's goal; a refusal is thrown (an ApiError). */
async function goalRequest(c, action, text) {
  const was = c.goal && c.goal.updated;
  const [method, path] = GOAL_ROUTES[action] || ['PUT', '/goal'];
  const call = () => api(method, `/conversations/${enc(c.id)}${path}`, method === 'DELETE' ? undefined : text ? { text } : {});
  try {
    const answer = await (action === 'set' || action === 'resume' ? startingRun(c, call) : call());
    noteGoal(c, action === 'clear' ? null : answer && answer.goal, was);
  } catch (error) {
    if (error.status === 404 && action !== 'set') noteGoal(c, null, was); // cleared meanwhile
    else if (error.type === 'goal_state') loadGoal(c); // changed meanwhile: as it is now
    throw error;
  }
  refreshListSoon();
}

/** The chat's goal as chatd has it now. */
async function loadGoal(c) {
  const data = await api('GET', `/conversations/${enc(c.id)}/goal`).catch(() => null);
  if (data) noteGoal(c, data.goal, c.goal && c.goal.updated);
}

/** Pause, Resume, Clear (a refusal shown as the page's others are). */
async function goalButton(action, target) {
  const c = chat;
  if (!c) return;
  const hadFocus = document.activeElement === target; // disabled or hidden, it drops it: handed on below
  target.disabled = true;
  try {
    await goalRequest(c, action);
  } catch (error) {
    showError(error);
  }
  target.disabled = false;
  if (hadFocus && (target.hidden || document.activeElement !== target)) ($('#goal:not([hidden]) .goal-head button:not([hidden])') || $('#composer')).focus();
}

/** A command sent (composer.js): `work` runs, the box emptied; a refusal gives the words back and says why under it. */
async function runCommand(typed, work) {
  const box = $('#composer');
  const key = compose.key || NEW_CHAT_KEY;
  page.sending = true;
  box.value = '';
  fitComposer();
  try {
    await work();
    draftSet(key, '');
  } catch (failure) {
    if (!box.value && compose.key === key) { box.value = typed; fitComposer(); }
    if (failure.status !== 401) showInlineError($('#composer-error'), failure);
  } finally {
    page.sending = false;
  }
}

/**
 * `/goal …` (`arg` what follows): `/goal <text>` sets the goal (on the start screen in a new chat),
 * `clear`, `resume` and `pause` do that, `/goal` alone shows the goal.
 */
const goalCommand = (typed, arg) => runCommand(typed, async () => {
  const word = arg.toLowerCase();
  if (!arg || GOAL_ROUTES[word]) {
    if (chat) await (arg ? goalRequest(chat, word) : loadGoal(chat));
    if (!chat || (!arg && !chat.goal)) showToast('This chat has no goal: type /goal and what it should work toward.');
  } else {
    const c = chat || await startChat();
    if (!c) throw new Error('the new chat did not open');
    await nameChat(c, arg);
    await goalRequest(c, 'set', arg);
    keepBottom(true);
  }
});

/** A goal line of the transcript: what changed, in a few words. */
function goalLineText(m) {
  const text = String(m.text || '');
  if (m.goal_event === 'continue') return `Continue toward the goal${m.goal_turn ? ` · turn ${m.goal_turn}` : ''}`;
  if (m.goal_event === 'set') return text.replace(/^Goal: /, 'Goal set: ');
  if (m.goal_event === 'resumed') return text.replace(/^Resume work toward the goal: /, 'Goal resumed: ');
  return text;
}

function initGoal() {
  for (const action of Object.keys(GOAL_ROUTES)) $(`#goal-${action}`).addEventListener('click', (e) => goalButton(action, e.currentTarget));
}

/* -- loops -- */

const UNITS = { h: ['h', 'hour'], m: ['min', 'minute'], s: ['s', 'second'] };
/** An interval ("1h30m") as "1 h 30 min", or `long` as "1 hour 30 minutes". */
const ivText = (iv, long) => iv.replace(/(\d+)([hms])/g, (_, n, u) => ` ${n} ${UNITS[u][+!!long]}${long && n > 1 ? 's' : ''}`).trim();
const loopPace = (l) => (l.interval ? `every ${ivText(l.interval)}` : 'self-paced');
/** Each state's buttons: [act, label, the state it asks (none: removed)]. */
const LOOP_ACTS = { pending: [['start', 'Start', 'active'], ['cancel', 'Cancel']], active: [['pause', 'Pause', 'paused'], ['stop', 'Stop']],
  paused: [['resume', 'Resume', 'active'], ['stop', 'Stop']], ended: [['dismiss', 'Dismiss']] };

/** The chat's loops under the goal, a line each (a pending one the card asking for a yes); the focus stays. */
function renderLoops() {
  const box = $('#loops');
  const loops = (chat && chat.loops) || [];
  const f = document.activeElement;
  const was = box.contains(f) && f.dataset.act && [f.closest('.loop').dataset.loopId, f.dataset.act];
  box.hidden = !loops.length;
  box.replaceChildren(...loops.map(loopLine));
  if (was) focusLoop(...was);
}

/** Focus on loop `id`'s button `act`, else another of its, another loop's, the box. */
function focusLoop(id, act) {
  const q = (s) => $(s, $('#loops'));
  (q(`[data-loop-id="${id}"] [data-act="${act}"]`) || q(`[data-loop-id="${id}"] button`) || q('button') || $('#composer')).focus();
}

function loopLine(l) {
  const pending = l.state === 'pending';
  const head = pending ? `Run this ${l.interval ? `every ${ivText(l.interval, 1)}` : 'again and again, as the model decides,'} until you stop it?`
    : [`Loop${l.state === 'active' ? '' : ` ${l.state}`}`, loopPace(l), l.runs && `run ${l.runs}`, l.running && 'running', l.wait && `waits for: ${l.wait}`]
      .filter(Boolean).join(' · ');
  const why = pending ? l.prompt : (l.reason || '').replace(/^./, (c) => c.toUpperCase());
  return el('div', { class: `loop${pending ? ' loop-card' : ''}`, 'data-loop-id': l.id, 'data-state': l.state, role: 'group', 'aria-label': head },
    el('div', { class: 'goal-head' }, el('span', { class: 'loop-state', text: head, title: `/loop stop ${l.id.slice(2, 8)} stops it` }),
      pending ? null : el('span', { class: 'goal-text', text: oneLine(l.prompt), title: l.prompt }),
      ...LOOP_ACTS[l.state].map(([act, label, state]) => button(`loop-${act}`, label, (e) => loopButton(l.id, state, e.currentTarget), { 'data-act': act }))),
    why ? el('p', { class: 'goal-note', text: why }) : null);
}

/** Start, Cancel, Pause, Resume, Stop, Dismiss (a refusal shown as the page's others are). */
async function loopButton(id, state, target) {
  const had = document.activeElement === target; // disabled, it drops the focus: handed on below
  target.disabled = true;
  await loopRequest(chat, id, state).catch(showError);
  target.disabled = false;
  if (had && document.activeElement !== target) focusLoop(id, target.dataset.act);
}

/** Asks loop `id` for `state`, or removes it (no `id`: all); the `loops` event brings the new list. */
async function loopRequest(c, id, state) {
  try {
    await api(state ? 'PUT' : 'DELETE', `/conversations/${enc(c.id)}/loops${id ? `/${enc(id)}` : ''}`, state && { state });
    if (state) return;
  } catch (error) {
    if (error.status !== 404) throw error; // gone meanwhile: off the list
  }
  c.loops = (c.loops || []).filter((l) => id && l.id !== id);
  if (c === chat) renderLoops();
}

/**
 * `/loop 5m <prompt>` makes an interval loop, `/loop <prompt>` a self-paced one (on the start screen
 * in a new chat); `/loop list` (or alone) shows the loops, `stop` removes them, `stop <id>` one.
 */
const loopCommand = (typed, arg) => runCommand(typed, async () => {
  const [, first, rest] = /^(\S*)\s*([\s\S]*)$/.exec(arg);
  const word = first.toLowerCase();
  const loops = (chat && chat.loops) || [];
  const list = !arg || (word === 'list' && !rest);
  if (list || (word === 'stop' && !/\s/.test(rest))) {
    if (!loops.length) return showToast('This chat has no loops: type /loop 5m and what to do each time.');
    if (list) return focusLoop(loops[0].id);
    const hits = loops.filter((l) => l.id.startsWith(rest) || l.id.startsWith(`l_${rest}`));
    if (rest && hits.length !== 1) throw new ApiError(400, 'loop', `${hits.length ? 'More than one' : 'No'} loop of this chat starts with ${rest}.`);
    return loopRequest(chat, rest && hits[0].id);
  }
  const interval = /^(\d+[hms])+$/i.test(word) ? word : null;
  const prompt = interval ? rest : arg;
  if (!prompt) throw new ApiError(400, 'loop', 'Say what the loop does each time: /loop 5m check the build.');
  const c = chat || await startChat();
  if (!c) throw new Error('the new chat did not open');
  const made = await api('POST', `/conversations/${enc(c.id)}/loops`, { prompt, interval });
  await nameChat(c, prompt);
  if (!(c.loops ||= []).some((l) => l.id === made.id)) c.loops.push(made); // unless its event came first
  if (c === chat) renderLoops();
});

/** A user line a loop sent: its label, so it does not read as typed. */
const loopChip = (m) => (m.loop ? el('p', { class: 'agent-chip loop-chip muted', text: `Loop run ${m.loop.run}` }) : null);
