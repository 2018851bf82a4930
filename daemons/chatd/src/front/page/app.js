/*
 * tandem — the web chat page. One file, no framework, no build step, nothing
 * loaded from elsewhere. Served by chatd's front at /chat-app/app.js.
 *
 * Layout, top to bottom:
 *   dom       $(), el(): nodes come from createElement; text goes in through
 *             textContent and text nodes only.
 *   state     `page` (screen, auth, timers), `list` (the sidebar), `chat` (the
 *             open chat: its active path, tool calls, runs, waiting messages,
 *             consent cards, the last applied event seq).
 *   api       api(): fetch + JSON, 8 s at most; errors are ApiError {status, type, message}.
 *             A 401 goes back to the sign-in card; a lost chatd (no answer,
 *             502/504, a 503 that is not chatd's own) shows the one banner
 *             (`link`) until requests and the stream work again.
 *   boot      probe(): capabilities + session → live | signin | unavailable;
 *             the probe panel checks again by itself after 5, 10, 20, 30, 30… s.
 *   list      the chat list: search, rename, delete + undo; refreshed after our
 *             own actions, every 15 s and when the open chat changes.
 *   route     #/c/<id> in the address is the open chat.
 *   chat      a snapshot becomes the model (buildChat), then the DOM
 *             (renderChat); after that every view is updated in place.
 *   render    messages (body, reasoning, tool calls), consent cards, waiting
 *             messages, status line, context meter, run controls. Text deltas
 *             are painted once per animation frame; a streaming answer renders
 *             only its last blocks again (md.renderLive).
 *   stream    tail(): fetch + a ReadableStream SSE parser (not EventSource:
 *             reconnects and the banner are ours), resumed with ?after=<seq>;
 *             every reconnect (a reset too) waits 0.5 s growing to 5 s. A tab
 *             hidden for 5 s lets its stream go and resumes it when shown.
 *   events    EVENTS: one handler per event type, applied in seq order; an
 *             event with seq <= the last applied one is skipped.
 *   files     a tool line's change card (its files, Undo, the refusal, Redo),
 *             chips under a turn's last answer for the files it made, and the
 *             files pane (the list, a preview from a blob URL, Download,
 *             Delete; the trash with Restore and Delete for good, each
 *             asked in place).
 *   markdown  md.render(text) → DOM nodes. The model's text is never HTML:
 *             raw tags stay text, links are http(s)/mailto only. Linear time:
 *             no backtracking pattern, closers found in one pass.
 *   phone     the drawer (#menu) and visualViewport for the on-screen keyboard.
 *
 * The composer (typing, files, uploads, drafts, its keys) is composer.js, loaded first.
 *
 * Nothing here assigns innerHTML/outerHTML/insertAdjacentHTML, calls
 * document.write, eval or new Function.
 */
'use strict';

/* ------------------------------------------------------------------ dom -- */

const $ = (selector, root = document) => root.querySelector(selector);
const $$ = (selector) => [...document.querySelectorAll(selector)];
const enc = encodeURIComponent;

/** A new element. props: class, text, on<event> (a function), or attributes. */
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value == null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (typeof value === 'function') node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children) if (child != null) node.append(child); // strings become text nodes
  return node;
}

const button = (cls, text, onclick, more = {}) => el('button', { type: 'button', class: cls, text, onclick, ...more });

/** Waits `ms`, or less when `signal` aborts; its listener goes when the time is up (a long outage retries often). */
const sleep = (ms, signal) => new Promise((resolve) => {
  if (signal && signal.aborted) return resolve();
  const done = () => {
    clearTimeout(timer);
    if (signal) signal.removeEventListener('abort', done);
    resolve();
  };
  const timer = setTimeout(done, ms);
  if (signal) signal.addEventListener('abort', done, { once: true });
});

/** The first non-empty line, trimmed: error details are shown on one line. */
const oneLine = (text) => String(text || '').split('\n').map((l) => l.trim()).find(Boolean) || '';

/* ---------------------------------------------------------------- state -- */

const API = '/v1/chat-app';
const PROBE_DELAYS_S = [5, 10, 20, 30];
const REQUEST_MS = 8000; // a request (or a stream's headers) taking longer is a lost chatd: a hung TCP link
const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 5000;
const SILENCE_MS = 45000; // keepalives come every 15 s: three missed means a dead link
const LIST_EVERY_MS = 15000;
// A tab out of sight this long lets its stream go, and takes it up again from its seq when seen:
// a browser opens at most 6 connections to one host and each stream holds one, so six tabs
// left open would leave a seventh waiting with nothing on screen.
const HIDDEN_DROP_MS = 5000;
const UNDO_MS = 8000;
const RESULT_CHARS = 2000;
const LONG_TAIL = 20000; // characters an answer's paint renders again, above which…
const LONG_EVERY_MS = 250; // …it paints at most this often while streaming
const ACTIVE_RUN = new Set(['queued', 'running', 'waiting']);
const CONTINUABLE = new Set(['interrupted', 'paused', 'stopped']);
const DECISIONS = [['once', 'Allow once'], ['always', 'Always allow'], ['deny', 'Deny']];

const page = {
  state: 'loading', // loading | signin | unavailable | live (also body[data-state])
  auth: null, // token | none | unknown
  booting: false,
  probeTry: 0,
  countdown: null,
  listTimer: null,
  stick: true, // scrolled to the end: stay there as text comes in
  sending: false,
  openTicket: 0, // the latest chat asked for; older answers are dropped
  openingId: null,
};

const list = { items: [], query: '', ticket: 0, renaming: false, stale: false, soon: null, searchTimer: null };

/** The open chat (see buildChat), or null on the start screen. */
let chat = null;

/* ------------------------------------------------------------------ api -- */

class ApiError extends Error {
  constructor(status, type, message, retryAfter = 0) {
    super(message);
    Object.assign(this, { status, type, retryAfter }); // status 0: no answer at all
  }

  /** chatd itself is gone, as opposed to refusing this request. */
  get lost() {
    // chatd's own 503s (engine_unavailable, sandbox_unavailable…) are answers.
    return [0, 502, 504].includes(this.status) || (this.status === 503 && (!this.type || this.type === 'chatd_unavailable'));
  }
}

/** A request's signal: it gives up after REQUEST_MS (a hung link must not hang the page). */
const timeout = () => AbortSignal.timeout(REQUEST_MS);

/** An ApiError from a refusal: the server's error.message (as text), else its body's start. */
async function errorFrom(res) {
  const text = await res.text().catch(() => '');
  let error = {};
  try { error = JSON.parse(text).error || {}; } catch { /* not JSON */ }
  const message = (typeof error.message === 'string' && error.message) || text.trim().slice(0, 200) || `HTTP ${res.status}`;
  const refused = new ApiError(res.status, String(error.type || ''), message, Number(res.headers.get('retry-after')) || 0);
  refused.detail = error; // the rest of the error object (an undo's `conflicts`)
  return refused;
}

/** One API call: the JSON answer (null for none), or a rejection with an ApiError. */
async function api(method, path, body) {
  const init = { method, cache: 'no-store', headers: { accept: 'application/json' }, signal: timeout() };
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(API + path, init);
  } catch {
    link.requestFailed();
    throw new ApiError(0, 'network', 'The chat service does not answer.');
  }
  if (!res.ok) {
    const error = await errorFrom(res);
    if (error.status === 401) signedOut();
    else if (error.lost) link.requestFailed();
    else link.requestOk();
    throw error;
  }
  let text;
  try {
    text = await res.text(); // the timeout holds for the body too
  } catch {
    link.requestFailed();
    throw new ApiError(0, 'network', 'The chat service does not answer.');
  }
  link.requestOk();
  try {
    return text ? JSON.parse(text) : null;
  } catch {
    throw new ApiError(res.status, 'bad_answer', 'The server answered something that is not JSON.');
  }
}

/** Shows what went wrong with one of our actions, unless the banner or the sign-in card says it. */
function showError(error) {
  if (!(error instanceof ApiError)) console.error(error);
  else if (!error.lost && error.status !== 401) showToast(error.message, { error: true });
}

function showInlineError(node, error) {
  node.textContent = error instanceof ApiError ? error.message : String(error);
  node.hidden = false;
}

/**
 * The banner "The chat service stopped": one element, up while the open
 * chat's stream is down or requests find chatd gone.
 */
const link = {
  streamBroken: false,
  requestBroken: false,
  pinging: false,
  streamDown() { this.streamBroken = true; this.paint(); },
  streamUp() { this.streamBroken = false; this.paint(); },
  requestFailed() { this.requestBroken = true; this.paint(); this.ping(); },
  requestOk() {
    if (!this.requestBroken) return;
    this.requestBroken = false;
    this.paint();
    onRecovered();
  },
  reset() { this.streamBroken = false; this.requestBroken = false; this.paint(); },
  paint() { $('#banner-stopped').hidden = !(page.state === 'live' && (this.streamBroken || this.requestBroken)); },

  /** While requests fail: ask the probe route again, 0.5 s growing to 5 s. */
  async ping() {
    if (this.pinging) return;
    this.pinging = true;
    for (let delay = RETRY_MIN_MS; this.requestBroken && page.state === 'live'; delay = Math.min(delay * 2, RETRY_MAX_MS)) {
      await sleep(delay);
      try {
        if ((await fetch(`${API}/capabilities`, { cache: 'no-store', signal: timeout() })).ok) this.requestOk();
      } catch { /* still gone */ }
    }
    this.pinging = false;
  },
};

/** chatd answers again: catch up with what failed meanwhile. */
function onRecovered() {
  if (page.state !== 'live') return;
  refreshList();
  const wanted = wantedChatId();
  if (wanted && !(chat && chat.id === wanted)) route();
}

/* ----------------------------------------------------------------- boot -- */

function setState(state) {
  page.state = state;
  document.body.dataset.state = state;
  link.paint();
}

/**
 * Probes chatd, then shows the screen that fits: the app, the sign-in card or the probe panel.
 * `manual`: Check again, which leaves the automatic schedule where it was.
 */
async function boot(manual = false) {
  if (page.booting) return;
  page.booting = true;
  stopProbeTimer();
  $('#unavailable .next-check').textContent = 'Checking…';
  try {
    const found = await probe();
    if (!found.ok) return showUnavailable(found, manual);
    page.probeTry = 0;
    page.auth = found.session.auth;
    if (found.session.signed_in) await goLive();
    else showSignin();
  } finally {
    page.booting = false;
  }
}

/** GETs a probe route: {ok, status, json, text}, or what the probe panel shows. */
async function fetchProbe(url) {
  let res;
  try {
    res = await fetch(url, { cache: 'no-store', headers: { accept: 'application/json' }, signal: timeout() });
  } catch {
    return { ok: false, status: 0, cause: 'chatd does not answer', command: 'tandem chat start' };
  }
  const text = await res.text().catch(() => '');
  if (!res.ok) {
    return { ok: false, status: res.status, cause: `HTTP ${res.status} from the server`, message: serverMessage(text), command: commandFor(res.status) };
  }
  let json = null;
  try { json = JSON.parse(text); } catch { /* judged by the caller */ }
  return { ok: true, status: res.status, json, text };
}

function serverMessage(text) {
  try {
    const { message } = JSON.parse(text).error;
    if (typeof message === 'string' && message) return message;
  } catch { /* not an API error: its first 200 characters */ }
  return text.trim().slice(0, 200);
}

function commandFor(status) {
  if ([502, 503, 504].includes(status)) return 'tandem chat start';
  // An engine without a /v1/chat-app forward: chatd serves the page itself.
  if (status === 404) return 'tandem chat start --front 0.0.0.0:4180';
  return 'tandem chat status';
}

async function probe() {
  const caps = await fetchProbe(`${API}/capabilities`);
  if (!caps.ok) return caps;
  const j = caps.json;
  if (!j || typeof j !== 'object' || typeof j.signed_in !== 'boolean' || !('version' in j)) {
    return { ok: false, cause: "The answer is not tandem's capabilities", message: caps.text.trim().slice(0, 200), command: 'tandem chat start --front 0.0.0.0:4180' };
  }
  const session = await fetchProbe(`${API}/session`);
  if (session.ok && session.json && typeof session.json.signed_in === 'boolean') return { ok: true, session: session.json };
  // chatd's API without its front (no session route): the probe's word is all there is.
  if (session.status === 404) return { ok: true, session: { signed_in: j.signed_in, auth: 'unknown' } };
  if (!session.ok) return session;
  return { ok: false, cause: "The answer is not tandem's session", message: session.text.trim().slice(0, 200), command: 'tandem chat status' };
}

function showUnavailable(info, manual = false) {
  leaveLive();
  const panel = $('#unavailable');
  $('.cause', panel).textContent = info.cause;
  const message = $('.server-message', panel);
  message.textContent = info.message || '';
  message.hidden = !info.message;
  $('.command', panel).textContent = info.command;
  setState('unavailable');
  // The next check: 5 s, then twice as long each time, up to 30 s. Check again waits as long as
  // the automatic check it replaced would have.
  if (!manual || page.probeTry === 0) page.probeTry += 1;
  let left = PROBE_DELAYS_S[Math.min(page.probeTry - 1, PROBE_DELAYS_S.length - 1)];
  const show = () => { $('.next-check', panel).textContent = `Checking again in ${left} s`; };
  show();
  page.countdown = setInterval(() => {
    if (--left > 0) return show();
    stopProbeTimer();
    boot();
  }, 1000);
}

function stopProbeTimer() {
  clearInterval(page.countdown);
  page.countdown = null;
}

/* -------------------------------------------------------------- sign in -- */

function showSignin() {
  leaveLive();
  $('#signin-error').hidden = true;
  $('#signin-error').textContent = '';
  setState('signin');
  $('#token').focus();
}

async function signIn() {
  const input = $('#token');
  const error = $('#signin-error');
  const token = input.value.trim();
  if (!token) return showInlineError(error, 'Enter the admin token.');
  $('#signin-submit').disabled = true;
  try {
    await api('POST', '/session', { token }); // a 401 here is a refusal, shown below (signedOut ignores it)
    input.value = '';
    error.hidden = true;
    error.textContent = '';
    await boot();
  } catch (refused) {
    showInlineError(error, refused.status === 429
      ? `Too many wrong tokens: wait ${refused.retryAfter || 60} s, then try again.`
      : refused.message);
  } finally {
    $('#signin-submit').disabled = false;
  }
}

async function signOut() {
  await fetch(`${API}/session`, { method: 'DELETE', signal: timeout() }).catch(() => {});
  showSignin();
}

/** A 401 from any route: the cookie expired or the token changed. */
function signedOut() {
  if (page.state === 'signin') return;
  if (page.auth === 'none') boot(); // nothing to sign in with: look again
  else showSignin();
}

/* ----------------------------------------------------------------- live -- */

async function goLive() {
  $('#signout').hidden = page.auth !== 'token';
  $('#trusted-notice').hidden = page.auth !== 'none';
  link.reset();
  try {
    await loadList();
  } catch (error) {
    if (error.status === 401) return showSignin();
  }
  setState('live');
  clearInterval(page.listTimer);
  page.listTimer = setInterval(refreshList, LIST_EVERY_MS);
  await route();
}

/** Leaves the app: no stream, no timers, nothing of the old session on screen. */
function leaveLive() {
  stopStream();
  clearInterval(page.listTimer);
  page.openTicket += 1;
  page.openingId = null;
  chat = null;
  list.items = [];
  for (const box of ['#chat-list', '#messages', '#consents', '#pending']) $(box).replaceChildren();
  closeFilesPane();
  hideToast();
  link.reset();
}

/* ----------------------------------------------------------------- list -- */

const titleOf = (conversation) => (conversation && conversation.title) || 'New chat';
const listed = (id) => list.items.find((c) => c.id === id);

async function loadList() {
  const ticket = ++list.ticket;
  const q = list.query.trim();
  const data = await api('GET', `/conversations?limit=200${q ? `&q=${enc(q)}` : ''}`);
  if (ticket !== list.ticket) return; // a newer search answered first
  list.items = Array.isArray(data && data.conversations) ? data.conversations : [];
  renderList();
}

/** Reloads the list; a failure is the banner's or the sign-in card's to show. */
function refreshList() {
  if (page.state === 'live' || page.state === 'loading') loadList().catch(() => {});
}

/** A refresh a moment later: a run changes its chat several times in a row. */
function refreshListSoon() {
  clearTimeout(list.soon);
  list.soon = setTimeout(refreshList, 600);
}

/** Rows are kept per chat id and updated in place: a row being clicked is never swapped out. */
function renderList() {
  if (list.renaming) { list.stale = true; return; } // never under a title being typed
  const box = $('#chat-list');
  const rows = new Map([...box.children].map((li) => [li.dataset.chatId, li]));
  list.items.forEach((conversation, i) => {
    const li = rows.get(conversation.id) || chatItem(conversation.id);
    fillChatItem(li, conversation);
    if (box.children[i] !== li) box.insertBefore(li, box.children[i] || null);
  });
  while (box.children.length > list.items.length) box.lastChild.remove();
  const empty = $('#list-empty');
  empty.hidden = list.items.length > 0;
  empty.textContent = list.query.trim() ? 'No chat matches.' : 'No chats yet.';
}

function chatItem(id) {
  const li = el('li', { class: 'chat', 'data-chat-id': id });
  li.append(
    el('a', { class: 'open', href: chatHref(id) }, el('span', { class: 'title' }), el('span', { class: 'dot', hidden: true })),
    button('rename', '✎', () => startRename(li, listed(id) || { id, title: '' }), { title: 'Rename', 'aria-label': 'Rename chat' }),
    button('delete', '✕', () => deleteChat(listed(id) || { id }), { title: 'Delete', 'aria-label': 'Delete chat' }));
  return li;
}

const STATE_LABELS = { running: 'working', queued: 'in line', waiting: 'waiting for you' };

function fillChatItem(li, conversation) {
  li.classList.toggle('active', wantedChatId() === conversation.id);
  $('.title', li).textContent = titleOf(conversation);
  const dot = $('.dot', li);
  dot.className = `dot ${conversation.state}`;
  dot.title = STATE_LABELS[conversation.state] || '';
  dot.hidden = !dot.title;
}

function markActiveChat() {
  for (const li of $$('#chat-list li.chat')) li.classList.toggle('active', li.dataset.chatId === wantedChatId());
}

/** The open chat's row follows its changes without waiting for a reload. */
function updateListItem(conversation) {
  const item = listed(conversation.id);
  if (item) Object.assign(item, conversation);
  const li = $$('#chat-list li.chat').find((n) => n.dataset.chatId === conversation.id);
  if (li) fillChatItem(li, item || conversation);
}

function startRename(li, conversation) {
  if ($('.rename-input', li)) return;
  list.renaming = true;
  const open = $('.open', li);
  const input = el('input', { class: 'rename-input', type: 'text', maxlength: '200', 'aria-label': 'New title' });
  input.value = conversation.title || '';
  open.hidden = true;
  li.insertBefore(input, open);
  input.focus();
  input.select();
  let over = false;
  let saving = false;
  const finish = () => {
    if (over) return;
    over = true;
    list.renaming = false;
    input.remove();
    open.hidden = false;
    if (list.stale) { list.stale = false; renderList(); }
  };
  input.addEventListener('keydown', async (event) => {
    if (event.key === 'Escape') { event.preventDefault(); finish(); return; }
    if (event.key !== 'Enter' || event.isComposing || saving) return;
    event.preventDefault();
    saving = true;
    try {
      const updated = await api('PATCH', `/conversations/${enc(conversation.id)}`, { title: input.value.trim() });
      Object.assign(conversation, updated);
      fillChatItem(li, conversation);
      if (chat && chat.id === conversation.id) { chat.conversation = updated; renderTitle(); }
    } catch (error) {
      showError(error);
    }
    finish();
    refreshList();
  });
  input.addEventListener('blur', () => { if (!saving) finish(); }); // clicking away cancels, like Escape
}

async function deleteChat(conversation) {
  try {
    await api('DELETE', `/conversations/${enc(conversation.id)}`);
  } catch (error) {
    return showError(error);
  }
  const wasOpen = wantedChatId() === conversation.id;
  list.items = list.items.filter((c) => c.id !== conversation.id);
  renderList();
  if (wasOpen) navigate(null);
  showToast('Chat deleted', {
    ms: UNDO_MS,
    undo: async () => {
      await api('POST', `/conversations/${enc(conversation.id)}/restore`, {});
      await loadList();
      if (wasOpen) navigate(conversation.id);
    },
  });
  refreshListSoon();
}

async function newChat() {
  try {
    const conversation = await api('POST', '/conversations', {});
    list.items.unshift(conversation);
    renderList();
    navigate(conversation.id);
    refreshListSoon();
    $('#composer').focus();
  } catch (error) {
    showError(error);
  }
}

function onSearchInput() {
  clearTimeout(list.searchTimer);
  list.searchTimer = setTimeout(() => {
    list.query = $('#search').value;
    refreshList();
  }, 250);
}

/* ---------------------------------------------------------------- toast -- */

let toastTimer = null;

function showToast(message, { undo = null, ms = 5000, error = false } = {}) {
  const box = $('#toast');
  $('.toast-text', box).textContent = message;
  $('#undo').hidden = !undo;
  $('#undo').onclick = undo && (() => { hideToast(); undo().catch(showError); });
  box.classList.toggle('error', error);
  box.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(hideToast, ms);
}

function hideToast() {
  clearTimeout(toastTimer);
  $('#toast').hidden = true;
  $('#undo').onclick = null;
}

/* ---------------------------------------------------------------- route -- */

const chatHref = (id) => `#/c/${enc(id)}`;

function wantedChatId() {
  const match = /^#\/c\/([^/?#]+)/.exec(location.hash);
  try { return match ? decodeURIComponent(match[1]) : null; } catch { return null; }
}

function navigate(id) {
  location.hash = id ? chatHref(id) : '#/';
}

async function route() {
  if (page.state !== 'live') return;
  switchComposer(); // the open chat's draft and files
  closeDrawer();
  markActiveChat();
  const id = wantedChatId();
  if (!id) return showHome();
  if ((chat && chat.id === id) || page.openingId === id) return;
  await openChat(id);
}

/** Clears the chat view: for the start screen or while a chat loads. */
function clearChatView(home) {
  page.openTicket += 1;
  stopStream();
  chat = null;
  clearFilesPane();
  $('#empty-chat').hidden = !home;
  for (const box of ['#messages', '#consents', '#pending']) $(box).replaceChildren();
  $('#messages').dataset.seq = '0';
}

/** The start screen: no chat open; the first message sent makes one. */
function showHome() {
  clearChatView(true);
  closeFilesPane();
  page.openingId = null;
  renderTitle();
  renderStatus();
  renderMeter();
  renderControls();
}

async function openChat(id) {
  clearChatView(false);
  const ticket = page.openTicket;
  page.openingId = id;
  $('#chat-title').textContent = '…';
  renderControls();
  let snapshot;
  try {
    snapshot = await api('GET', `/conversations/${enc(id)}`);
  } catch (error) {
    if (ticket !== page.openTicket) return;
    page.openingId = null;
    if (error.status !== 404) return showError(error); // a lost chatd: opened again once it answers
    showToast('That chat does not exist any more.', { error: true });
    return navigate(null);
  }
  if (ticket !== page.openTicket) return; // another chat was asked for meanwhile
  page.openingId = null;
  chat = buildChat(snapshot);
  renderChat();
  startStream(chat);
  markActiveChat();
  loadAnswered(chat); // around.js: the lines of cards answered before
  loadUndoState(chat);
  loadPresence(chat);
  if (pane.open) loadFiles(chat);
}

/* ----------------------------------------------------------------- chat -- */

/** The open chat's model, from a snapshot. */
function buildChat(snapshot) {
  const c = {
    id: snapshot.conversation.id,
    conversation: snapshot.conversation,
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
  }
}

function callOf(c, id, name) {
  let call = c.calls.get(id);
  if (!call) {
    call = { id, name: 'tool', summary: '', status: 'running', result: null, resultSummary: '', ownerId: null, card: null };
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

/** [state, detail] of the status line for a run (none yet: Ready). */
function runStatusLabel(c, run) {
  switch (run && run.status) {
    case 'queued': return ['Queued', run.position ? `number ${run.position} in line` : ''];
    case 'running': {
      const message = run.message_id && c.byId.get(run.message_id);
      return [message && message.status === 'streaming' && message.text ? 'Answering' : 'Thinking', ''];
    }
    case 'waiting': return ['Waiting for you', ''];
    case 'failed': return ['Failed', oneLine(run.error) || 'the run failed'];
    case 'interrupted': return ['Interrupted', oneLine(run.error)];
    case 'paused': return ['Interrupted', oneLine(run.error) || 'paused at the step limit: Continue goes on'];
    case 'stopped': return ['Stopped', ''];
    default: return ['Ready', ''];
  }
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

/* --------------------------------------------------------------- render -- */

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
}

/** Adds a message's view at its place on the path (a summary can go in the middle). */
function placeView(c, message) {
  const view = makeView(c, message);
  const next = c.path.slice(c.path.indexOf(message) + 1).map((m) => c.views.get(m.id)).find(Boolean);
  $('#messages').insertBefore(view.node, next ? next.node : null);
}

/** A message's DOM: reasoning and tool calls fold around the body, made once there is something to fold. */
function makeView(c, message) {
  const node = el('div', { class: 'message', 'data-message-id': message.id, 'data-role': message.role });
  const view = { node, body: el('div', { class: 'body' }), reasoning: null, tools: null, note: null, callNodes: new Map(), editing: false, later: null };
  node.append(view.body);
  if (message.role === 'assistant') node.append(view.note = el('p', { class: 'note', hidden: true }));
  if (message.role === 'user') {
    node.append(attachmentChips(message) || '', el('div', { class: 'actions' }, button('edit quiet', 'Edit', () => startEdit(c, message.id))));
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
  if (message.role === 'compacted') {
    body.replaceChildren(el('details', { class: 'summary-fold' }, el('summary', { text: 'Summary of the earlier conversation' }), md.render(text)));
  } else if (message.role === 'cleared') body.textContent = 'Context cleared: the model does not see the messages above.';
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

/** The calls an answer made, folded under it, each updated in place. */
function fillTools(c, view, message) {
  const calls = Array.isArray(message.tool_calls) ? message.tool_calls.filter((raw) => raw && raw.id) : [];
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
  };
  node.root = el('div', { class: 'tool-call', 'data-call-id': id },
    el('div', { class: 'tool-head' }, node.name, node.summary, node.status), node.resultSummary, node.files, node.result);
  return node;
}

function fillCall(c, node, call) {
  fillFilesCard(c, node, call);
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

/* Status line, context meter, run controls. */

function setStatus(c, state, detail = '') {
  if (c.status.state === state && c.status.detail === detail) return;
  c.status = { state, detail };
  if (c === chat) renderStatus();
}

const STATUS_KIND = { Ready: 'idle', Stopped: 'idle', 'Waiting for you': 'attention', Interrupted: 'bad', Failed: 'bad' };

function renderStatus() {
  const status = chat ? chat.status : { state: 'Ready', detail: '' };
  $('#status .state').textContent = status.state;
  $('#status .detail').textContent = status.detail;
  $('#status').dataset.kind = STATUS_KIND[status.state] || 'working';
}

/** 12.3k from 12345; plain below 1000. */
const formatTokens = (n) => (n >= 1000 ? `${(n / 1000).toFixed(1)}k` : String(Math.round(n)));

function renderMeter() {
  const meter = $('#context-meter');
  const usage = (chat && chat.usage) || {};
  const used = Number(usage.used);
  const limit = Number(usage.limit);
  const known = Number.isFinite(used) && limit > 0;
  meter.textContent = known ? `${formatTokens(used)} / ${formatTokens(limit)} tokens` : '';
  meter.classList.toggle('red', known && used / limit >= 0.9);
  meter.classList.toggle('amber', known && used / limit >= 0.8 && used / limit < 0.9);
  const speed = Number(usage.tokens_per_second); // 0 for a step that only called tools: not shown
  $('#tps').textContent = speed > 0 ? `${speed.toFixed(1)} tok/s` : '';
}

function renderControls() {
  const c = chat;
  const active = !!c && isRunActive(c);
  const shown = c && [...c.path].reverse().find((m) => m.role !== 'tool');
  $('#stop').hidden = !active;
  $('#continue').hidden = !c || active || !c.lastRun || !CONTINUABLE.has(c.lastRun.status);
  $('#regenerate').hidden = !c || active || !shown || shown.role !== 'assistant';
  $('#send-now').hidden = !c || active || c.pending.size === 0;
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
    el('p', { class: 'consent-head' }, 'Permission needed: ', el('span', { class: 'name', text: card.name || 'tool' })),
    el('p', { class: 'summary', text: card.summary || '' }),
    card.reason ? el('p', { class: 'reason', text: card.reason }) : null,
    el('div', { class: 'consent-buttons' }, ...buttons),
    error);
}

async function answerCard(c, card, decision, buttons, error) {
  for (const b of buttons) b.disabled = true;
  try {
    await api('POST', `/conversations/${enc(c.id)}/consent`, { card_id: card.card_id, decision });
    noteAnswered(c, card, decision, true); // around.js
    dropCard(c, card.card_id);
  } catch (failure) {
    if (failure.status === 409 || failure.status === 410) { // answered elsewhere, or no longer waited for
      dropCard(c, card.card_id);
      return showToast(failure.message);
    }
    for (const b of buttons) b.disabled = false;
    showInlineError(error, failure);
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
  if (!view) {
    view = { text: el('div', { class: 'text' }), error: el('p', { class: 'inline-error', hidden: true }), editing: false, files: el('div', { class: 'pending-files' }) };
    view.root = el('div', { class: 'pending', 'data-pending-id': id },
      el('span', { class: 'pending-label', text: 'Waiting' }), view.text, view.files,
      el('div', { class: 'pending-actions' },
        button('pending-edit quiet', 'Edit', () => editPending(c, id, view)),
        button('pending-remove quiet', 'Remove', () => deletePending(c, id, view))),
      view.error);
    c.pendingViews.set(id, view);
    $('#pending').append(view.root);
  }
  const pending = c.pending.get(id);
  if (!view.editing) view.text.textContent = typedText(pending);
  view.files.replaceChildren(...attachmentsOf(pending).map((a) => el('span', { class: 'pending-file', text: baseName(a.path) })));
  view.files.hidden = !view.files.childNodes.length;
}

const TOO_LATE = 'Too late: this message has reached the model already.';

function editPending(c, id, view) {
  view.error.hidden = true;
  const added = addedText(c.pending.get(id)); // what chatd wrote of its files stays as it was
  openEditor(view, view.text, 'pending', typedText(c.pending.get(id)), async (text) => {
    try {
      const updated = await api('PATCH', `/conversations/${enc(c.id)}/pending/${enc(id)}`, { text: text + added });
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
  openEditor(view, view.body, 'edit', typedText(message), async (text) => {
    await startingRun(c, () => api('POST', `/conversations/${enc(c.id)}/messages/${enc(id)}/edit`, { text: text + added }));
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

/* ---------------------------------------------------------------- files -- */

const FILE_OPS = { created: 'Created', changed: 'Changed', deleted: 'Deleted', moved: 'Moved' };
const UNDO_REFRESH_MS = 300; // the `files` events of one undo come together: one look at the list
const FETCH_FILE_MS = 60000; // a file's bytes may take longer than an API call
const PREVIEW_CHARS = 200000; // of a text file; the rest is in the download
const SNIFF_BYTES = 1024 * 1024; // an untyped file (a script, a log) up to this size is shown when it is UTF-8

const isFilesCard = (card) => !!card && typeof card === 'object' && card.kind === 'files_change' && Number.isFinite(Number(card.rev));
const cardFiles = (card) => (Array.isArray(card.files) ? card.files.filter((f) => f && typeof f.path === 'string') : []);
const baseName = (path) => String(path).split('/').pop() || 'file';

function formatBytes(n) {
  if (!(n >= 1024)) return `${Number(n) || 0} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

/* A tool line's change card: what the call changed, and Undo. */

/** Paints the card of a call that changed files; again only when the card or its undo state changed. */
function fillFilesCard(c, node, call) {
  const card = isFilesCard(call.card) ? call.card : null;
  const undo = card ? c.undo.get(Number(card.rev)) || {} : null;
  const key = card ? JSON.stringify([card.rev, undo]) : '';
  if (node.filesKey === key) return;
  node.filesKey = key;
  node.files.hidden = !card;
  if (!card) return node.files.replaceChildren();
  node.files.dataset.rev = String(card.rev);
  const files = cardFiles(card);
  node.files.replaceChildren(...[
    el('ul', { class: 'files-list' }, ...files.map((f) => el('li', { class: 'file-line', 'data-path': f.path, 'data-kind': f.kind },
      el('span', { class: 'op', text: FILE_OPS[f.op] || String(f.op) }), ' ',
      el('span', { class: 'path', text: f.path }),
      typeof f.from === 'string' ? el('span', { class: 'from', text: ` from ${f.from}` }) : null))),
    Number(card.files_more) > 0 ? el('p', { class: 'files-more', text: `+${Number(card.files_more)} more` }) : null,
    typeof card.note === 'string' ? el('p', { class: 'files-note', text: card.note }) : null,
    undoRow(c, card, undo)].filter(Boolean));
}

/**
 * Undo and what it did. `undo.state`: busy (asked), undone (`by`: the set that put the files
 * back, `skipped`), redone (`by`: the redo's set), conflict (`conflicts`: nothing was changed);
 * `error`: a refusal of another kind.
 */
function undoRow(c, card, undo) {
  const rev = Number(card.rev);
  const row = el('div', { class: 'files-undo-row' });
  if (undo.state === 'undone') {
    row.append(el('span', { class: 'files-state', text: undo.by ? `Undone (change set ${undo.by})` : 'Undone: the files already were as before' }));
    if (undo.by) row.append(button('files-redo', 'Redo', () => redoFiles(c, rev, undo.by), { disabled: undo.busy }));
    const skipped = Array.isArray(undo.skipped) ? undo.skipped : [];
    if (skipped.length) {
      row.append(el('p', { class: 'files-skipped' }, 'Left as they are: ',
        ...skipped.flatMap((s, i) => [i ? '; ' : '', el('span', { class: 'path', text: s.path }), ` ${s.reason}`])));
    }
  } else {
    row.append(button('files-undo', 'Undo', () => undoFiles(c, rev, false), { disabled: undo.state === 'busy' }));
    if (undo.state === 'redone') row.append(el('span', { class: 'files-state', text: `Redone (change set ${undo.by})` }));
  }
  if (undo.state === 'conflict') {
    const conflicts = undo.conflicts || [];
    const named = new Set(conflicts.map((x) => x.path));
    const rest = cardFiles(card).some((f) => !named.has(f.path)) || Number(card.files_more) > 0;
    row.append(el('div', { class: 'files-conflict', role: 'alert' },
      el('p', { class: 'conflict-head', text: 'Not undone: nothing was changed, because these files changed since:' }),
      el('ul', {}, ...conflicts.map((x) => el('li', { 'data-path': x.path }, el('span', { class: 'path', text: x.path }), ` ${x.reason}`))),
      rest ? button('files-undo-rest', 'Undo the rest', () => undoFiles(c, rev, true)) : null));
  }
  if (undo.error) row.append(el('p', { class: 'inline-error', text: undo.error }));
  return row;
}

/** The conflicts of a 409 `undo_conflict`: [{path, reason}]. */
function conflictsOf(error) {
  const list = error.detail && Array.isArray(error.detail.conflicts) ? error.detail.conflicts : [];
  return list.filter((x) => x && typeof x.path === 'string').map((x) => ({ path: x.path, reason: String(x.reason || 'changed since') }));
}

/** Sets what the page knows of change set `rev`'s undo and repaints its card and the chips. */
function setUndo(c, rev, state) {
  c.undo.set(rev, state);
  if (c !== chat) return;
  for (const call of c.calls.values()) if (isFilesCard(call.card) && Number(call.card.rev) === rev) refreshCall(c, call);
  renderChips(c);
}

const failureText = (error) => (error instanceof ApiError && !error.lost ? error.message : 'The chat service does not answer: try again.');

async function undoFiles(c, rev, skipConflicts) {
  setUndo(c, rev, { state: 'busy' });
  try {
    const answer = await api('POST', `/conversations/${enc(c.id)}/files/undo`, skipConflicts ? { rev, skip_conflicts: true } : { rev });
    setUndo(c, rev, { state: 'undone', by: (answer && answer.rev) || null, skipped: (answer && answer.skipped) || [] });
  } catch (error) {
    if (error instanceof ApiError && error.type === 'undo_conflict') setUndo(c, rev, { state: 'conflict', conflicts: conflictsOf(error) });
    else setUndo(c, rev, { error: failureText(error) });
  }
}

/** Redo: the undo's own set undone. */
async function redoFiles(c, rev, by) {
  const before = c.undo.get(rev) || {};
  setUndo(c, rev, { ...before, busy: true, error: undefined });
  try {
    const answer = await api('POST', `/conversations/${enc(c.id)}/files/undo`, { rev: by });
    setUndo(c, rev, { state: 'redone', by: (answer && answer.rev) || by });
  } catch (error) {
    setUndo(c, rev, { ...before, busy: false, error: failureText(error) });
  }
}

function refreshUndoSoon(c) {
  clearTimeout(c.undoTimer);
  c.undoTimer = setTimeout(() => loadUndoState(c), UNDO_REFRESH_MS);
}

/**
 * What the chat's history says was undone (another device's Undo, or this one's before a
 * reload): a set is undone while a set that undoes it is not undone itself.
 */
async function loadUndoState(c) {
  const revs = [...c.calls.values()].filter((call) => isFilesCard(call.card)).map((call) => Number(call.card.rev));
  if (!revs.length) return;
  let answer;
  try {
    answer = await api('GET', `/conversations/${enc(c.id)}/files/changes?limit=200`);
  } catch {
    return; // the cards keep their Undo; a refusal then says why
  }
  if (c !== chat) return;
  const undoers = new Map();
  const sets = (answer && answer.changes) || [];
  const pathsOf = (set) => new Set((Array.isArray(set.changes) ? set.changes : []).flatMap((x) => [x.path, x.from]).filter(Boolean));
  const touched = new Map(sets.map((set) => [set.rev, pathsOf(set)]));
  for (const set of sets) {
    const mine = touched.get(set.rev);
    for (const undone of set.undoes || []) { // a turn's undo names every set of the turn…
      // …a set whose every file Undo the rest left as it was among them: that one was not undone.
      const theirs = touched.get(undone);
      if (theirs && theirs.size && ![...theirs].some((p) => mine.has(p))) continue;
      if (!undoers.has(undone)) undoers.set(undone, []);
      undoers.get(undone).push(set.rev);
    }
  }
  const known = new Set(((answer && answer.changes) || []).map((set) => set.rev));
  const memo = new Map();
  const undoneBy = (rev) => {
    if (!memo.has(rev)) memo.set(rev, (undoers.get(rev) || []).find((u) => !undoneBy(u)) || null);
    return memo.get(rev);
  };
  for (const rev of revs) {
    const local = c.undo.get(rev) || {};
    const by = undoneBy(rev);
    // This page's word stands while the undo it saw stands.
    const stands = local.state === 'undone' && local.by && known.has(local.by) && !undoneBy(local.by);
    if (local.state === 'busy' || local.busy) continue;
    if (by && local.state !== 'undone') setUndo(c, rev, { state: 'undone', by });
    else if (!by && local.state === 'undone' && !stands) setUndo(c, rev, {});
  }
  for (const [run, turn] of [...c.turnUndo]) { // a turn's undo that was itself undone (a Redo elsewhere)
    if (turn.state === 'undone' && turn.by && undoneBy(turn.by)) setTurnUndo(c, run, null);
  }
}

/* Chips under a turn's last answer: the deliverable files the turn left made or changed. */

/**
 * Per run: `files` (path → {op, kind}, from its calls' cards in order; an undone card counts
 * for nothing) and `revs` (every card's change set).
 */
function turnFiles(c) {
  const turns = new Map();
  for (const call of c.calls.values()) {
    if (!isFilesCard(call.card)) continue;
    const run = ownerRun(c, call);
    if (!run) continue;
    if (!turns.has(run)) turns.set(run, { files: new Map(), revs: [] });
    turns.get(run).revs.push(Number(call.card.rev));
    if ((c.undo.get(Number(call.card.rev)) || {}).state === 'undone') continue;
    const { files } = turns.get(run);
    for (const f of cardFiles(call.card)) {
      const was = files.get(f.op === 'moved' && f.from ? f.from : f.path);
      if (f.op === 'moved' && f.from) files.delete(f.from);
      if (f.op === 'deleted') { files.delete(f.path); continue; }
      files.set(f.path, { op: was && was.op === 'created' ? 'created' : f.op, kind: f.kind });
    }
  }
  return turns;
}

function renderChips(c) {
  if (c !== chat) return;
  const turns = turnFiles(c);
  const last = new Map(); // run id → its last answer on the path
  for (const m of c.path) if (m.role === 'assistant' && m.run_id) last.set(m.run_id, m.id);
  for (const [id, view] of c.views) {
    const message = c.byId.get(id);
    if (!message || message.role !== 'assistant') continue;
    const turn = last.get(message.run_id) === id && turns.get(message.run_id);
    const files = turn ? [...turn.files].filter(([, f]) => f.kind === 'deliverable') : [];
    const revs = turn ? turn.revs : [];
    const where = files.map(([path]) => [chipPresence(c, path), c.chipNotes.get(path) || null]);
    const key = JSON.stringify([files, where, revs.map((rev) => (c.undo.get(rev) || {}).state), c.turnUndo.get(message.run_id)]);
    if (view.chipsKey === key) continue;
    view.chipsKey = key;
    if (view.chips) view.chips.remove();
    const chips = files.length ? el('div', { class: 'file-chips' }, ...files.map(([path, f]) => fileChip(c, path, f.op))) : null;
    const row = revs.length ? turnRow(c, message.run_id, revs) : null;
    view.chips = chips || row ? el('div', { class: 'turn-files' }, chips, row) : null;
    if (view.chips) view.node.append(view.chips);
  }
}

/** "Undo this turn" under its last answer: every change set of the run, newest first, in one undo. */
function turnRow(c, run, revs) {
  const undo = c.turnUndo.get(run) || {};
  const row = el('div', { class: 'turn-undo' });
  if (undo.state === 'undone') {
    row.append(el('span', { class: 'files-state', text: undo.by ? `Turn undone (change set ${undo.by})` : 'Turn undone: the files already were as before' }));
    if (undo.by) row.append(button('turn-redo', 'Redo', () => redoTurn(c, run, undo), { disabled: undo.busy }));
    const skipped = Array.isArray(undo.skipped) ? undo.skipped : [];
    if (skipped.length) {
      row.append(el('p', { class: 'files-skipped' }, 'Left as they are: ',
        ...skipped.flatMap((x, i) => [i ? '; ' : '', el('span', { class: 'path', text: x.path }), ` ${x.reason}`])));
    }
  } else if (revs.some((rev) => (c.undo.get(rev) || {}).state !== 'undone')) {
    row.append(button('turn-undo-button', 'Undo this turn', () => undoTurn(c, run, false), { disabled: undo.state === 'busy' }));
  }
  if (undo.state === 'conflict') {
    row.append(el('div', { class: 'files-conflict', role: 'alert' },
      el('p', { class: 'conflict-head', text: 'Not undone: nothing was changed, because these files changed since:' }),
      el('ul', {}, ...undo.conflicts.map((x) => el('li', { 'data-path': x.path }, el('span', { class: 'path', text: x.path }), ` ${x.reason}`))),
      button('turn-undo-rest', 'Undo the rest', () => undoTurn(c, run, true))));
  }
  if (undo.error) row.append(el('p', { class: 'inline-error', text: undo.error }));
  return row.childNodes.length ? row : null;
}

/** Repaints every change card and the chips: a turn's undo concerns several cards. */
function setTurnUndo(c, run, state) {
  if (state) c.turnUndo.set(run, state); else c.turnUndo.delete(run);
  if (c !== chat) return;
  for (const call of c.calls.values()) if (isFilesCard(call.card)) refreshCall(c, call);
  renderChips(c);
}

async function undoTurn(c, run, skipConflicts) {
  setTurnUndo(c, run, { state: 'busy' });
  try {
    const answer = await api('POST', `/conversations/${enc(c.id)}/files/undo`, skipConflicts ? { run, skip_conflicts: true } : { run });
    const by = (answer && answer.rev) || null;
    const skipped = Array.isArray(answer && answer.skipped) ? answer.skipped : [];
    // A tool line whose every file was left as it is was not undone.
    const left = new Set(skipped.map((x) => x.path));
    const cards = new Map([...c.calls.values()].filter((call) => isFilesCard(call.card)).map((call) => [Number(call.card.rev), call.card]));
    const whollyLeft = (card) => !!card && !(Number(card.files_more) > 0) && cardFiles(card).every((f) => left.has(f.path));
    const revs = (Array.isArray(answer && answer.undone) ? answer.undone.map(Number) : []).filter((rev) => !whollyLeft(cards.get(rev)));
    for (const rev of revs) c.undo.set(rev, { state: 'undone', by });
    setTurnUndo(c, run, { state: 'undone', by, revs, skipped });
  } catch (error) {
    if (error instanceof ApiError && error.type === 'undo_conflict') setTurnUndo(c, run, { state: 'conflict', conflicts: conflictsOf(error) });
    else setTurnUndo(c, run, { error: failureText(error) });
  }
}

async function redoTurn(c, run, undo) {
  setTurnUndo(c, run, { ...undo, busy: true, error: undefined });
  try {
    const answer = await api('POST', `/conversations/${enc(c.id)}/files/undo`, { rev: undo.by });
    for (const rev of undo.revs || []) c.undo.set(rev, { state: 'redone', by: (answer && answer.rev) || undo.by });
    setTurnUndo(c, run, null);
  } catch (error) {
    setTurnUndo(c, run, { ...undo, busy: false, error: failureText(error) });
  }
}

/** Where a chip's file is now: here, trashed (deleted, Restore can bring it back), or gone. */
function chipPresence(c, path) {
  if (!c.present || c.present.has(path)) return 'here';
  return c.trashed.has(path) ? 'trashed' : 'gone';
}

/**
 * A chip: `Created report.md · Open`; a file deleted since is struck through and says so (no
 * Open: its bytes are not there to show), with Restore while the chat's trash holds it.
 */
function fileChip(c, path, op) {
  const where = chipPresence(c, path);
  const text = el('span', { class: 'chip-text', text: `${FILE_OPS[op] || op} ${path}` });
  const sep = () => el('span', { class: 'chip-sep', text: '·', 'aria-hidden': 'true' });
  if (where === 'here') {
    return el('div', { class: 'file-chip', 'data-path': path }, text, sep(),
      button('chip-open', 'Open', () => openFilesPane(path), { 'aria-label': `Open ${path}` }));
  }
  const note = c.chipNotes.get(path) || {};
  return el('div', { class: 'file-chip deleted', 'data-path': path },
    el('s', {}, text), sep(), el('span', { class: 'chip-gone', text: 'deleted since' }),
    where === 'trashed' ? button('chip-restore', 'Restore', () => restoreChip(c, path),
      { 'aria-label': `Restore ${path} from the trash`, disabled: !!note.busy }) : null,
    note.error ? el('span', { class: 'inline-error chip-error', role: 'alert', text: note.error }) : null);
}

/** Which files are there now and which are in the trash: what the chips show. */
async function loadPresence(c) {
  let files;
  let trash;
  try {
    [files, trash] = await Promise.all([
      api('GET', `/conversations/${enc(c.id)}/files`),
      api('GET', `/conversations/${enc(c.id)}/files/trash`)]);
  } catch {
    return; // the chips stay as they were
  }
  if (c !== chat) return;
  const paths = (answer) => (Array.isArray(answer && answer.files) ? answer.files : [])
    .filter((f) => f && typeof f.path === 'string').map((f) => f.path);
  c.present = new Set(paths(files));
  c.trashed = new Set(paths(trash));
  renderChips(c);
}

function refreshPresenceSoon(c) {
  clearTimeout(c.presenceTimer);
  c.presenceTimer = setTimeout(() => { if (c === chat) loadPresence(c); }, UNDO_REFRESH_MS);
}

/** Restore on a deleted file's chip: the trash route; the chip is live again once the list has it. */
async function restoreChip(c, path) {
  c.chipNotes.set(path, { busy: true });
  renderChips(c);
  try {
    await api('POST', `/conversations/${enc(c.id)}/files/trash/restore`, { path });
    c.chipNotes.delete(path);
  } catch (error) {
    const conflict = error instanceof ApiError && error.type === 'restore_conflict';
    c.chipNotes.set(path, { error: conflict ? `Not restored: ${path} is there again; nothing was changed.`
      : error instanceof ApiError && error.status === 404 ? `${path} is not in the trash any more.` : failureText(error) });
  }
  await loadPresence(c);
  renderChips(c);
  reloadPane(c);
}

/* The files pane: the chat's files, one previewed. */

const pane = {
  open: false, items: null, ticket: 0, soon: null, path: null, url: null, frameUrl: null, previewTicket: 0,
  // A question asked in place before a delete: {what: delete | purge | empty, path}; one at a time.
  ask: null,
  askFresh: false,
  // What an action on a row answered, by path: {error} or {conflict} (a restore refused).
  notes: new Map(),
  busy: new Set(), // paths (and '*' for Empty trash) whose action is under way
  trash: null, // {files, days} as GET …/files/trash answered
  trashTicket: 0,
  freed: '', // what the last Delete for good freed, until the next action
};

function openFilesPane(path = null) {
  if (!chat) return;
  pane.open = true;
  $('#files-pane').hidden = false;
  $('#files-toggle').setAttribute('aria-expanded', 'true');
  document.body.classList.add('files-open');
  loadFiles(chat);
  if (path) previewFile(chat, path);
}

function closeFilesPane() {
  pane.open = false;
  $('#files-pane').hidden = true;
  $('#files-toggle').setAttribute('aria-expanded', 'false');
  document.body.classList.remove('files-open');
  clearFilesPane();
}

/** Empties the pane (another chat, or none): the list, the preview and its blob URL. */
function clearFilesPane() {
  pane.ticket += 1;
  pane.items = null;
  clearTimeout(pane.soon);
  for (const id of ['#files-made', '#files-given', '#files-working']) {
    $(id).hidden = true;
    $('ul.files', $(id)).replaceChildren();
  }
  $('#files-status').textContent = '';
  clearTrash();
  clearPreview();
}

function clearPreview() {
  pane.previewTicket += 1;
  pane.path = null;
  if (pane.url) URL.revokeObjectURL(pane.url);
  if (pane.frameUrl) URL.revokeObjectURL(pane.frameUrl);
  pane.url = null;
  pane.frameUrl = null;
  const box = $('#file-preview');
  box.hidden = true;
  $('.preview-name', box).textContent = '';
  $('.preview-links', box).replaceChildren();
  $('.preview-body', box).replaceChildren();
}

function refreshFilesSoon(c) {
  clearTimeout(pane.soon);
  pane.soon = setTimeout(() => { if (pane.open && c === chat) loadFiles(c); }, UNDO_REFRESH_MS);
}

async function loadFiles(c) {
  loadTrash(c);
  const ticket = ++pane.ticket;
  if (!pane.items) $('#files-status').textContent = 'Loading…';
  let answer;
  try {
    answer = await api('GET', `/conversations/${enc(c.id)}/files`);
  } catch (error) {
    if (ticket === pane.ticket && c === chat) $('#files-status').textContent = failureText(error);
    return;
  }
  if (ticket !== pane.ticket || c !== chat || !pane.open) return;
  pane.items = Array.isArray(answer && answer.files) ? answer.files.filter((f) => f && typeof f.path === 'string') : [];
  renderFiles();
}

/** Deliverables first (made and changed, then given), working files folded under their count. */
function renderFiles() {
  const items = pane.items || [];
  const made = items.filter((f) => f.kind !== 'working' && (f.origin === 'tool' || f.origin === 'command'));
  const given = items.filter((f) => f.kind !== 'working' && !made.includes(f));
  const working = items.filter((f) => f.kind === 'working');
  for (const [id, files] of [['#files-made', made], ['#files-given', given], ['#files-working', working]]) {
    const group = $(id);
    group.hidden = !files.length;
    $('ul.files', group).replaceChildren(...files.map(fileRow));
  }
  $('summary', $('#files-working')).textContent = `Working files (${working.length})`;
  const trashed = pane.trash && pane.trash.files.length;
  $('#files-status').textContent = items.length ? ''
    : trashed ? 'No files here now: what was deleted is in the trash below.'
      : 'No files yet: what this chat is given, makes or changes is listed here.';
  markPreviewed();
}

function fileRow(f) {
  const asked = pane.ask && pane.ask.what === 'delete' && pane.ask.path === f.path;
  const note = pane.notes.get(f.path);
  return el('li', { class: 'file-row', 'data-path': f.path, 'data-kind': f.kind },
    button('file-open', f.path, () => previewFile(chat, f.path), { title: `Preview ${f.path}` }),
    el('span', { class: 'file-meta', text: formatBytes(f.size) }),
    button('file-delete', 'Delete', () => askFiles({ what: 'delete', path: f.path }),
      { 'aria-label': `Delete ${f.path}`, disabled: pane.busy.has(f.path) || asked }),
    asked ? askBox(`Move ${f.path} to the trash?`, '', 'Move to trash', () => deleteFile(chat, f.path)) : null,
    note && note.error ? el('p', { class: 'inline-error', text: note.error }) : null);
}

/* The trash: deleted files whose bytes are kept, Restore and Delete for good. */

const ORIGIN_BY = { user: 'by you', tool: 'by the model', command: 'by a command', outside: 'outside tandem' };

/** When, shortly: "just now", "5 min ago", "3 h ago", else the date. */
function whenText(iso) {
  const at = Date.parse(iso);
  if (!Number.isFinite(at)) return '';
  const s = (Date.now() - at) / 1000;
  if (s < 60) return 'just now';
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(at).toLocaleDateString();
}

function clearTrash() {
  pane.trashTicket += 1;
  Object.assign(pane, { trash: null, ask: null, freed: '' });
  pane.notes.clear();
  pane.busy.clear();
  const box = $('#files-trash');
  box.hidden = true;
  box.open = false;
  $('ul.files', box).replaceChildren();
  $('.trash-foot', box).replaceChildren();
  $('.trash-freed', box).textContent = '';
}

async function loadTrash(c) {
  const ticket = ++pane.trashTicket;
  let answer;
  try {
    answer = await api('GET', `/conversations/${enc(c.id)}/files/trash`);
  } catch {
    return; // the list above says what is wrong; the trash keeps what it showed
  }
  if (ticket !== pane.trashTicket || c !== chat || !pane.open) return;
  const files = Array.isArray(answer && answer.files) ? answer.files.filter((f) => f && typeof f.path === 'string') : [];
  pane.trash = { files, days: Number(answer && answer.days) || 0 };
  const listed = new Set(files.map((f) => f.path));
  const live = new Set((pane.items || []).map((f) => f.path));
  // A question or a note about a row that is gone goes with it.
  if (pane.ask && pane.ask.what !== 'delete' && pane.ask.path && !listed.has(pane.ask.path)) pane.ask = null;
  if (pane.ask && pane.ask.what === 'empty' && !files.length) pane.ask = null;
  for (const path of [...pane.notes.keys()]) if (!listed.has(path) && !live.has(path)) pane.notes.delete(path);
  paintPane();
}

/** "Trash (N)": folded, shown while it holds a file or has something to say. */
function renderTrash() {
  const box = $('#files-trash');
  const { files, days } = pane.trash || { files: [], days: 0 };
  box.hidden = !files.length && !pane.freed;
  $('summary', box).textContent = `Trash (${files.length})`;
  $('ul.files', box).replaceChildren(...files.map(trashRow));
  $('.trash-freed', box).textContent = pane.freed;
  const asked = pane.ask && pane.ask.what === 'empty';
  $('.trash-foot', box).replaceChildren(...(files.length ? [
    days ? el('p', { class: 'muted trash-days', text: `Deleted files are kept ${days} days, then deleted for good.` }) : null,
    button('trash-empty', 'Empty trash', () => askFiles({ what: 'empty' }), { disabled: pane.busy.has('*') || asked }),
    asked ? askBox(`Delete ${files.length === 1 ? 'the 1 file' : `all ${files.length} files`} in the trash for good?`,
      'This cannot be undone.', 'Empty trash', () => purgeTrash(chat, null)) : null,
  ].filter(Boolean) : []));
}

function trashRow(f) {
  const asked = pane.ask && pane.ask.what === 'purge' && pane.ask.path === f.path;
  const note = pane.notes.get(f.path) || {};
  const busy = pane.busy.has(f.path) || pane.busy.has('*');
  const meta = [formatBytes(f.size), whenText(f.deleted), ORIGIN_BY[f.origin] || ''].filter(Boolean).join(' · ');
  return el('li', { class: 'trash-row', 'data-path': f.path },
    el('div', { class: 'trash-line' },
      el('span', { class: 'path', text: f.path }),
      el('span', { class: 'file-meta', text: meta, title: String(f.deleted || '') })),
    el('div', { class: 'trash-buttons' },
      button('trash-restore', 'Restore', () => restoreFile(chat, f.path), { 'aria-label': `Restore ${f.path}`, disabled: busy }),
      button('trash-purge', 'Delete for good', () => askFiles({ what: 'purge', path: f.path }),
        { 'aria-label': `Delete ${f.path} for good`, disabled: busy || asked })),
    asked ? askBox(`Delete ${f.path} for good?`, 'This cannot be undone.', 'Delete for good', () => purgeTrash(chat, [f.path])) : null,
    note.conflict ? el('div', { class: 'files-conflict', role: 'alert' },
      el('p', {}, 'Not restored: ', el('span', { class: 'path', text: note.conflict }),
        ' is there again. Move or delete it first; nothing was changed.')) : null,
    note.error ? el('p', { class: 'inline-error', text: note.error }) : null);
}

/** A question asked in place (the page has no dialogs): the action, or Cancel. */
function askBox(question, warning, yes, onYes) {
  const box = el('div', { class: 'files-ask', role: 'group', 'aria-label': question },
    el('p', { class: 'ask-text' }, question, warning ? el('span', { class: 'ask-warning', text: ` ${warning}` }) : null),
    el('div', { class: 'ask-buttons' },
      button('ask-yes danger', yes, onYes),
      button('ask-no', 'Cancel', () => askFiles(null))));
  if (pane.askFresh) { // focus moves to a question once, when asked: a repaint must not take it from the composer
    pane.askFresh = false;
    requestAnimationFrame(() => { const b = $('.ask-yes', box); if (b && b.isConnected) b.focus(); });
  }
  return box;
}

function paintPane() {
  if (pane.items) renderFiles();
  renderTrash();
}

function askFiles(ask) {
  pane.ask = ask;
  pane.askFresh = !!ask;
  pane.freed = '';
  if (ask && ask.path) pane.notes.delete(ask.path);
  paintPane();
}

/** Marks `key` busy (or not) and repaints. */
function setBusy(key, on) {
  if (on) pane.busy.add(key); else pane.busy.delete(key);
  paintPane();
}

/** Reads the list and the trash again now (the `files` event comes too; this does not wait for it). */
function reloadPane(c) {
  if (c === chat) refreshPresenceSoon(c); // the chips too: a purge keeps no file from the list, yet its Restore goes
  if (pane.open && c === chat) loadFiles(c);
}

async function deleteFile(c, path) {
  if (!c) return;
  pane.ask = null;
  pane.notes.delete(path);
  setBusy(path, true);
  try {
    await api('DELETE', `/conversations/${enc(c.id)}/files?path=${enc(path)}`);
    if (pane.path === path) clearPreview();
  } catch (error) {
    pane.notes.set(path, { error: error instanceof ApiError && error.status === 404 ? `${path} is not there any more.` : failureText(error) });
  } finally {
    setBusy(path, false);
    reloadPane(c);
  }
}

async function restoreFile(c, path) {
  if (!c) return;
  pane.ask = null;
  pane.freed = '';
  pane.notes.delete(path);
  setBusy(path, true);
  try {
    await api('POST', `/conversations/${enc(c.id)}/files/trash/restore`, { path });
  } catch (error) {
    if (error instanceof ApiError && error.type === 'restore_conflict') {
      pane.notes.set(path, { conflict: (error.detail && typeof error.detail.path === 'string' && error.detail.path) || path });
    } else if (error instanceof ApiError && error.status === 404) {
      pane.notes.set(path, { error: `${path} is not in the trash any more.` });
    } else {
      pane.notes.set(path, { error: failureText(error) });
    }
  } finally {
    setBusy(path, false);
    reloadPane(c);
  }
}

/** Delete for good: `paths`, or the whole trash (null). Says what it freed. */
async function purgeTrash(c, paths) {
  if (!c) return;
  const key = paths ? paths[0] : '*';
  pane.ask = null;
  pane.freed = '';
  if (paths) pane.notes.delete(key);
  setBusy(key, true);
  try {
    const answer = await api('POST', `/conversations/${enc(c.id)}/files/trash/purge`, paths ? { paths } : {});
    const files = Number(answer && answer.files) || 0;
    const bytes = Number(answer && answer.bytes) || 0;
    const what = paths && files === 1 ? paths[0] : `${files} ${files === 1 ? 'file' : 'files'}`;
    pane.freed = bytes > 0 ? `Deleted ${what} for good. Freed ${formatBytes(bytes)}.`
      : `Deleted ${what} for good. Nothing was freed: other files still use the same bytes.`;
  } catch (error) {
    if (paths) pane.notes.set(key, { error: failureText(error) });
    else pane.freed = failureText(error);
  } finally {
    setBusy(key, false);
    reloadPane(c);
  }
}

function markPreviewed() {
  for (const row of document.querySelectorAll('#files-pane li.file-row')) row.classList.toggle('previewed', row.dataset.path === pane.path);
}

/** Fetches a file's bytes through the page's session and shows them: text, Markdown, an image; a Download always. */
async function previewFile(c, path) {
  if (!c) return;
  clearPreview();
  const ticket = pane.previewTicket;
  pane.path = path;
  markPreviewed();
  const box = $('#file-preview');
  box.hidden = false;
  $('.preview-name', box).textContent = path;
  const body = $('.preview-body', box);
  body.replaceChildren(el('p', { class: 'muted', text: 'Loading…' }));
  let blob;
  try {
    const res = await fetch(`${API}/conversations/${enc(c.id)}/files/content?path=${enc(path)}`,
      { cache: 'no-store', signal: AbortSignal.timeout(FETCH_FILE_MS) });
    if (!res.ok) throw await errorFrom(res);
    blob = await res.blob();
  } catch (error) {
    if (ticket !== pane.previewTicket) return;
    if (error instanceof ApiError && error.status === 401) return signedOut();
    body.replaceChildren(el('p', { class: 'inline-error', text: error instanceof ApiError ? error.message : 'The file could not be fetched.' }));
    return;
  }
  if (ticket !== pane.previewTicket || c !== chat) return;
  pane.url = URL.createObjectURL(blob);
  $('.preview-links', box).replaceChildren(
    el('a', { class: 'preview-download', href: pane.url, download: baseName(path), text: 'Download' }));
  const shown = await previewOf(blob, path, pane.url);
  if (ticket === pane.previewTicket) body.replaceChildren(shown);
}

/**
 * What a file shows as. A PDF shows in the browser's own viewer in a frame of the pane: the
 * page's CSP admits a frame of a blob URL (`frame-src blob:`) and nothing else, and the page
 * makes such a URL only of bytes it typed as a PDF itself (pdfUrl), so no frame ever runs a
 * document of the front's origin.
 */
async function previewOf(blob, path, url) {
  const type = (blob.type || '').split(';')[0].trim().toLowerCase();
  if (type.startsWith('image/') && type !== 'image/svg+xml') return el('img', { class: 'preview-image', src: url, alt: path });
  if (type === 'application/pdf') {
    return el('div', { class: 'preview-pdf' },
      el('iframe', { class: 'preview-frame', src: pdfUrl(blob), title: `${path} (PDF)` }),
      el('p', { class: 'muted' }, el('a', { class: 'preview-open', href: url, target: '_blank', rel: 'noopener', text: 'Open the PDF in a new tab' })));
  }
  const text = await textOf(blob, type);
  if (text == null) return el('p', { class: 'muted', text: 'No preview for this kind of file: Download it.' });
  const cut = text.length > PREVIEW_CHARS;
  const shown = cut ? text.slice(0, PREVIEW_CHARS) : text;
  const more = cut ? el('p', { class: 'muted', text: `… ${text.length - PREVIEW_CHARS} more characters in the download` }) : null;
  if (type === 'text/markdown' || /\.(md|markdown)$/i.test(path)) {
    return el('div', { class: 'preview-markdown body' }, md.render(shown), more);
  }
  return el('div', {}, el('pre', { class: 'preview-text', text: shown }), more);
}

/** A blob URL of the bytes typed application/pdf by the page itself: the only kind a frame shows. */
function pdfUrl(blob) {
  if (pane.frameUrl) URL.revokeObjectURL(pane.frameUrl);
  pane.frameUrl = URL.createObjectURL(new Blob([blob], { type: 'application/pdf' }));
  return pane.frameUrl;
}

/** A text type's text; an untyped small file's when it is UTF-8 without NULs (a script, a log); else null. */
async function textOf(blob, type) {
  const texty = type.startsWith('text/') || type === 'application/json';
  if (!texty && !((type === '' || type === 'application/octet-stream') && blob.size <= SNIFF_BYTES)) return null;
  try {
    const text = new TextDecoder('utf-8', { fatal: !texty }).decode(await blob.arrayBuffer());
    return texty || !text.includes('\u0000') ? text : null;
  } catch {
    return null;
  }
}

/* ---------------------------------------------------------- run actions -- */

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
  target.disabled = true;
  try {
    const post = () => api('POST', `/conversations/${enc(c.id)}/${action}`, {});
    await (action === 'stop' ? post() : startingRun(c, post));
    refreshListSoon();
  } catch (error) {
    if (error.type !== 'no_active_run') showError(error); // a Stop that came after the end
  } finally {
    target.disabled = false;
  }
}

/* --------------------------------------------------------------- stream -- */

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

/** SSE: `id:`, `event:`, `data:` lines; a blank line ends an event; `:` lines are comments. */
async function readEvents(body, c, attempt, progress) {
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
          if (dispatchFrame(c, frame)) progress.applied = true;
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
  loadAnswered(c); // around.js
  loadUndoState(c);
  loadPresence(c);
  if (pane.open) loadFiles(c);
}

function chatGone(c) {
  if (c !== chat) return;
  showToast('This chat is gone (deleted for good).', { error: true });
  navigate(null);
  refreshList();
}

/* --------------------------------------------------------------- events -- */

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
    setStatus(c, 'Thinking');
    renderControls();
  },
  'text.delta'(c, d) {
    const message = c.byId.get(d.message_id);
    if (!message) return;
    message.text = (message.text || '') + (d.text || '');
    markDirty(c, message.id);
    setStatus(c, 'Answering');
  },
  'reasoning.delta'(c, d) {
    const message = c.byId.get(d.message_id);
    if (!message) return;
    message.reasoning = (message.reasoning || '') + (d.text || '');
    markDirty(c, message.id);
    setStatus(c, 'Thinking');
  },
  'tool.started'(c, d) {
    const call = callOf(c, d.call_id, d.name);
    call.status = 'running';
    if (d.summary) call.summary = oneLine(d.summary);
    refreshCall(c, call);
    setStatus(c, `Running ${call.name}`);
  },
  'tool.finished'(c, d) {
    const call = callOf(c, d.call_id);
    Object.assign(call, { status: d.ok ? 'ok' : 'failed', resultSummary: oneLine(d.summary) });
    if (isFilesCard(d.card)) call.card = d.card;
    refreshCall(c, call);
    renderChips(c);
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
    if (d.call_id) {
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
  usage(c, d) {
    c.usage = d;
    if (c === chat) renderMeter();
  },
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
    setStatus(c, ...runStatusLabel(c, run));
    renderControls();
  },
  'pending.added'(c, d) { addPending(c, d.pending); },
  'pending.updated'(c, d) { addPending(c, d.pending); },
  'pending.removed'(c, d) { removePending(c, d.pending_id, false); },
  'pending.delivered'(c, d) { removePending(c, d.pending_id, true); },
};

/* ------------------------------------------------------------- markdown -- */

/**
 * Markdown → DOM nodes. Every piece of text becomes a text node; an href
 * comes only from a URL that parses with protocol http:, https: or mailto:.
 * Raw HTML in the text stays text.
 */
const md = (() => {
  // Block patterns run on every line, so none may backtrack over a long run of spaces (quadratic:
  // one long line froze the tab). Heading, rule and table-rule tails are read by hand, and the `s`
  // flag lets `.` take U+2028 too, so a trailing `(.*)$` never fails and retries.
  const FENCE = /^( {0,3})(`{3,}|~{3,})[ \t]*([^\s`]*)(.*)$/s;
  const HEADING = /^ {0,3}(#{1,6})(?=[ \t]|$)/;
  const RULE_MARK = /^ {0,3}([-*_])/;
  const QUOTE = /^ {0,3}> ?(.*)$/s;
  const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$/s;
  const RULE_CELL = /^:?-+:?$/;
  const ESCAPABLE = '\\`*_{}[]()#+-.!<>|~"\'';
  const SPECIAL = /[\n\\`*_[hH]/g;
  const BARE_URL = /^https?:\/\/[^\s<>"`]+/i;
  const MAX_DEPTH = 12;
  const MAX_SCAN = 4000; // how far away a closing `*`, `]` or `)` may be

  const normalize = (text) => String(text).replace(/\r\n?/g, '\n');

  function render(text) {
    const fragment = document.createDocumentFragment();
    blocks(normalize(text).split('\n'), fragment, 0);
    return fragment;
  }

  /**
   * Renders a text that is still growing (a streaming answer) into `box`, the same DOM as
   * render(text) but re-rendering only its last blocks. Text only grows at its last line, and no
   * block reads further than the line after the next block's first line, so a top-level block is
   * final once that line is complete: its DOM is kept. `live` ({done: the text of the final
   * blocks, kept: their node count}) goes from one call to the next; pass null to start over.
   */
  function renderLive(box, text, live) {
    text = normalize(text);
    if (!live || !text.startsWith(live.done)) { // not the same text grown: from scratch
      box.replaceChildren();
      live = { done: '', kept: 0 };
    }
    const lines = text.slice(live.done.length).split('\n');
    const starts = []; // each top-level block: its first line, the nodes made before it
    const fragment = document.createDocumentFragment();
    blocks(lines, fragment, 0, starts);
    let final = 0;
    while (final + 1 < starts.length && starts[final + 1].line + 1 < lines.length - 1) final += 1;
    while (box.childNodes.length > live.kept) box.lastChild.remove();
    box.append(fragment);
    if (final > 0) {
      live.kept += starts[final].nodes;
      live.done += `${lines.slice(0, starts[final].line).join('\n')}\n`;
    }
    return live;
  }

  const blank = (line) => !line.trim();
  const isSpace = (ch) => ch === ' ' || ch === '\t';
  const indentOf = (line) => line.length - line.trimStart().length;
  const ordered = (marker) => /\d/.test(marker);

  function fenceOpen(line) {
    const m = FENCE.exec(line);
    return m && !(m[2][0] === '`' && m[4].includes('`')) ? m : null; // ```a``` on one line is inline code
  }

  /** `## Title ##` → {level, text}, or null. */
  function headingOf(line) {
    const m = HEADING.exec(line);
    if (!m) return null;
    let start = m[0].length;
    let end = line.length;
    while (start < end && isSpace(line[start])) start += 1;
    while (end > start && isSpace(line[end - 1])) end -= 1;
    let hashes = end;
    while (hashes > start && line[hashes - 1] === '#') hashes -= 1;
    if (hashes < end && hashes > start && isSpace(line[hashes - 1])) { // a closing run of #
      end = hashes;
      while (end > start && isSpace(line[end - 1])) end -= 1;
    }
    return { level: m[1].length, text: line.slice(start, end) };
  }

  /** `---`, `* * *`, `___`: three or more of one mark and nothing else but spaces. */
  function isRule(line) {
    const m = RULE_MARK.exec(line);
    if (!m) return false;
    let marks = 0;
    for (let k = m[0].length - 1; k < line.length; k += 1) {
      if (line[k] === m[1]) marks += 1;
      else if (!isSpace(line[k])) return false;
    }
    return marks >= 3;
  }

  /** The `|---|:--:|` line under a table's head. */
  function isTableRule(line) {
    let t = line.trim();
    if (t.startsWith('|')) t = t.slice(1);
    if (t.endsWith('|')) t = t.slice(0, -1);
    return t.split('|').every((cell) => RULE_CELL.test(cell.trim()));
  }

  const isItem = (line) => ITEM.test(line) && !isRule(line);
  const startsBlock = (line) => !!fenceOpen(line) || HEADING.test(line) || isRule(line) || QUOTE.test(line) || isItem(line);
  const isTableStart = (lines, i) => lines[i].includes('|') && i + 1 < lines.length &&
    lines[i + 1].includes('|') && lines[i + 1].includes('-') && isTableRule(lines[i + 1]);

  /** Blocks of `lines` into `parent`; `starts` (top level) gets each block's first line and node count before it. */
  function blocks(lines, parent, depth, starts = null) {
    if (depth > MAX_DEPTH) return parent.append(el('p', { text: lines.join('\n') })); // absurd nesting: plain text
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (starts && !blank(line)) starts.push({ line: i, nodes: parent.childNodes.length });
      if (blank(line)) i += 1;
      else if ((m = fenceOpen(line))) i = fence(lines, i, m, parent);
      else if ((m = headingOf(line))) {
        parent.append(inline(m.text, el(`h${m.level}`)));
        i += 1;
      } else if (isRule(line)) { parent.append(el('hr')); i += 1; }
      else if (QUOTE.test(line)) i = quote(lines, i, parent, depth);
      else if (isItem(line)) i = list(lines, i, parent, depth);
      else if (isTableStart(lines, i)) i = table(lines, i, parent);
      else i = paragraph(lines, i, parent);
    }
  }

  /** ``` or ~~~ fences; one still open (streaming) runs to the end. */
  function fence(lines, start, m, parent) {
    const close = new RegExp(`^ {0,3}\\${m[2][0]}{${m[2].length},}[ \\t]*$`);
    const indent = new RegExp(`^ {0,${m[1].length}}`); // the fence's own indent goes from its lines
    const body = [];
    let i = start + 1;
    for (; i < lines.length && !close.test(lines[i]); i += 1) body.push(lines[i].replace(indent, ''));
    const code = el('code', { text: body.join('\n'), 'data-lang': m[3] });
    const copy = button('copy quiet', 'Copy', () => copyText(code, copy), { 'aria-label': 'Copy the code' });
    parent.append(el('div', { class: 'codeblock' },
      el('div', { class: 'code-head' }, el('span', { class: 'code-lang', text: m[3] || 'code' }), copy),
      el('pre', {}, code)));
    return i < lines.length ? i + 1 : i;
  }

  function quote(lines, i, parent, depth) {
    const inner = [];
    for (; i < lines.length; i += 1) {
      const m = QUOTE.exec(lines[i]);
      if (m) inner.push(m[1]);
      // A plain line right after quoted text continues it (a lazy line).
      else if (!blank(lines[i]) && inner.length && !blank(inner[inner.length - 1]) && !startsBlock(lines[i])) inner.push(lines[i]);
      else break;
    }
    const box = el('blockquote');
    blocks(inner, box, depth + 1);
    parent.append(box);
    return i;
  }

  function list(lines, i, parent, depth) {
    const first = ITEM.exec(lines[i]);
    const numbered = ordered(first[2]);
    const box = el(numbered ? 'ol' : 'ul');
    if (numbered && parseInt(first[2], 10) !== 1) box.setAttribute('start', String(parseInt(first[2], 10)));
    let loose = false;
    let more = true;
    while (more && i < lines.length) {
      const m = ITEM.exec(lines[i]);
      if (!m || isRule(lines[i]) || ordered(m[2]) !== numbered) break;
      const width = m[1].length + m[2].length + 1;
      const item = [m[3] || ''];
      for (i += 1; i < lines.length; i += 1) {
        const line = lines[i];
        if (blank(line)) {
          let j = i + 1;
          while (j < lines.length && blank(lines[j])) j += 1;
          if (j < lines.length && indentOf(lines[j]) >= 2) { // more of this item after a gap
            while (i < j - 1) { item.push(''); i += 1; }
            item.push('');
            loose = true;
            continue;
          }
          const next = j < lines.length && ITEM.exec(lines[j]);
          if (next && !isRule(lines[j]) && ordered(next[2]) === numbered) { loose = true; i = j; } else more = false;
          break;
        }
        if (indentOf(line) >= 2) item.push(line.slice(Math.min(indentOf(line), width)));
        else if (startsBlock(line)) break;
        else item.push(line); // a lazy line continues the item's paragraph
      }
      const li = el('li');
      blocks(item, li, depth + 1);
      box.append(li);
    }
    box.classList.toggle('tight', !loose);
    parent.append(box);
    return i;
  }

  function cells(line) {
    const text = line.trim().replace(/^\|/, '').replace(/(?<!\\)\|$/, '');
    return text.split(/(?<!\\)\|/).map((cell) => cell.trim().replace(/\\\|/g, '|'));
  }

  function table(lines, i, parent) {
    const head = cells(lines[i]);
    const aligns = cells(lines[i + 1]).map((r) => (r.endsWith(':') ? (r.startsWith(':') ? 'align-center' : 'align-right') : null));
    const row = (values, tag) => el('tr', {}, ...head.map((_, k) => inline(values[k] || '', el(tag, { class: aligns[k] }))));
    const body = el('tbody');
    for (i += 2; i < lines.length && !blank(lines[i]) && lines[i].includes('|'); i += 1) body.append(row(cells(lines[i]), 'td'));
    parent.append(el('div', { class: 'table-wrap' }, el('table', {}, el('thead', {}, row(head, 'th')), body)));
    return i;
  }

  function paragraph(lines, i, parent) {
    const text = [lines[i].trimStart()];
    for (i += 1; i < lines.length && !blank(lines[i]) && !startsBlock(lines[i]) && !isTableStart(lines, i); i += 1) {
      text.push(lines[i].trimStart());
    }
    parent.append(inline(text.join('\n'), el('p')));
    return i;
  }

  /**
   * Inline spans into `parent`: code, strong, em, links, bare URLs, line breaks; the rest is text.
   * `scan` keeps what was learnt about `src` (closers, unclosed runs), so no opener that stays
   * unclosed makes the scan read the rest of the text again: the work stays linear.
   */
  function inline(src, parent, inLink = false, depth = 0) {
    const scan = { src, pairs: null, closers: {}, unclosedTicks: new Set() };
    let text = '';
    const put = (node) => {
      if (text) parent.append(text);
      text = '';
      parent.append(node);
    };
    let i = 0;
    while (i < src.length) {
      SPECIAL.lastIndex = i;
      const hit = SPECIAL.exec(src);
      if (!hit) { text += src.slice(i); break; }
      text += src.slice(i, hit.index);
      i = hit.index;
      const c = src[i];
      let span = null;
      if (c === '\n') span = { node: el('br'), next: i + 1 };
      else if (c === '\\' && ESCAPABLE.includes(src[i + 1])) span = { text: src[i + 1], next: i + 2 };
      else if (c === '`') span = codeSpan(scan, i);
      else if ((c === '*' || c === '_') && depth < MAX_DEPTH) span = emphasis(scan, i, inLink, depth);
      else if (c === '[' && !inLink) span = mdLink(scan, i, depth);
      else if ((c === 'h' || c === 'H') && !inLink && !/[A-Za-z0-9]/.test(src[i - 1] || '')) span = bareUrl(src, i);
      if (!span) span = { text: c === '`' ? src.slice(i, i + runLength(src, i)) : c, next: i + (c === '`' ? runLength(src, i) : 1) };
      if (span.node) put(span.node); else text += span.text;
      i = span.next;
    }
    if (text) parent.append(text);
    return parent;
  }

  function runLength(src, i) {
    let j = i;
    while (src[j] === src[i]) j += 1;
    return j - i;
  }

  /** A run of backticks up to the next run of the same length; a length found unclosed stays so further on. */
  function codeSpan(scan, i) {
    const { src } = scan;
    const run = runLength(src, i);
    if (scan.unclosedTicks.has(run)) return null;
    const ticks = '`'.repeat(run);
    let j = src.indexOf(ticks, i + run);
    while (j !== -1 && src[j + run] === '`') j = src.indexOf(ticks, j + runLength(src, j));
    if (j === -1) { scan.unclosedTicks.add(run); return null; }
    let content = src.slice(i + run, j).replace(/\n/g, ' ');
    // One space goes from each end when both have one and there is more than spaces.
    if (content.length > 2 && content[0] === ' ' && content[content.length - 1] === ' ' && /\S/.test(content)) content = content.slice(1, -1);
    return { node: el('code', { text: content }), next: j + run };
  }

  /**
   * Where `delim` (`*`, `**`, `_` or `__`) can close, in order. Whether a place closes does not
   * depend on the opener, so one pass finds them all, the first time an opener needs them.
   */
  function closers(scan, delim) {
    if (scan.closers[delim]) return scan.closers[delim];
    const { src } = scan;
    const c = delim[0];
    const found = [];
    for (let j = src.indexOf(delim); j !== -1; j = src.indexOf(delim, j + 1)) {
      if (/\s/.test(src[j - 1])) continue;
      if (delim.length === 1 && src[j + 1] === c) { j += 1; continue; } // part of a ** run
      if (c === '_' && /[A-Za-z0-9]/.test(src[j + delim.length] || '')) continue;
      found.push(j);
    }
    return (scan.closers[delim] = found);
  }

  /** The first of the sorted `places` at or after `from`, or -1 (a binary search). */
  function firstFrom(places, from) {
    let lo = 0;
    let hi = places.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (places[mid] < from) lo = mid + 1; else hi = mid;
    }
    return lo < places.length ? places[lo] : -1;
  }

  function emphasis(scan, i, inLink, depth) {
    const { src } = scan;
    const c = src[i];
    const delim = src[i + 1] === c ? c + c : c;
    const open = i + delim.length;
    if (open >= src.length || /\s/.test(src[open])) return null;
    if (c === '_' && /[A-Za-z0-9]/.test(src[i - 1] || '')) return null; // snake_case stays text
    const j = firstFrom(closers(scan, delim), open + 1);
    if (j === -1 || j >= open + MAX_SCAN) return null;
    return { node: inline(src.slice(open, j), el(delim.length === 2 ? 'strong' : 'em'), inLink, depth + 1), next: j + delim.length };
  }

  /**
   * Each `[` and `(` with the place of its closing `]` / `)` (-1: none), found in one pass: a `(`
   * closes on its own line only, a backslash hides the next character.
   */
  function pairs(scan) {
    if (scan.pairs) return scan.pairs;
    const { src } = scan;
    const close = new Int32Array(src.length).fill(-1);
    const brackets = [];
    const parens = [];
    for (let k = 0; k < src.length; k += 1) {
      const ch = src[k];
      if (ch === '\\') k += 1;
      else if (ch === '[') brackets.push(k);
      else if (ch === ']') { if (brackets.length) close[brackets.pop()] = k; }
      else if (ch === '(') parens.push(k);
      else if (ch === ')') { if (parens.length) close[parens.pop()] = k; }
      else if (ch === '\n') parens.length = 0;
    }
    return (scan.pairs = close);
  }

  /** [label](url): a link when the URL is safe, else the whole of it as text. */
  function mdLink(scan, i, depth) {
    const { src } = scan;
    const close = pairs(scan);
    const limit = Math.min(src.length, i + MAX_SCAN);
    const k = close[i];
    if (k === -1 || k >= limit || src[k + 1] !== '(') return null;
    const p = close[k + 1];
    if (p === -1 || p >= limit) return null;
    const label = src.slice(i + 1, k);
    let target = src.slice(k + 2, p).trim();
    target = (/^(\S+)\s+(?:"[^"]*"|'[^']*')$/.exec(target) || [null, target])[1]; // drop a "title"
    if (target.startsWith('<') && target.endsWith('>')) target = target.slice(1, -1);
    const href = safeHref(target);
    if (!href || !label.trim()) return { text: src.slice(i, p + 1), next: p + 1 };
    return { node: inline(label, linkTo(href), true, depth + 1), next: p + 1 };
  }

  function bareUrl(src, i) {
    const m = BARE_URL.exec(src.slice(i, i + 2048));
    if (!m) return null;
    let url = m[0];
    // Trailing punctuation belongs to the sentence, an unmatched ) to the text around.
    let opens = 0;
    let closes = 0;
    for (const ch of url) { if (ch === '(') opens += 1; else if (ch === ')') closes += 1; }
    for (;;) {
      const last = url[url.length - 1];
      if (".,;:!?*_~']".includes(last)) url = url.slice(0, -1);
      else if (last === ')' && opens < closes) { url = url.slice(0, -1); closes -= 1; }
      else break;
    }
    const href = safeHref(url);
    return href ? { node: linkTo(href, url), next: i + url.length } : null;
  }

  function safeHref(url) {
    try {
      const parsed = new URL(url);
      return ['http:', 'https:', 'mailto:'].includes(parsed.protocol) ? parsed.href : null;
    } catch {
      return null; // relative or malformed: shown as text
    }
  }

  const linkTo = (href, text) => el('a', { href, rel: 'noopener noreferrer nofollow', target: '_blank', text });

  return { render, renderLive };
})();

/** Copies a code block: navigator.clipboard when the page may use it, else selects it for Ctrl+C. */
async function copyText(code, target) {
  try {
    await navigator.clipboard.writeText(code.textContent);
    target.textContent = 'Copied';
  } catch {
    // Plain http on a LAN has no clipboard API.
    getSelection().selectAllChildren(code);
    target.textContent = 'Selected: Ctrl+C';
  }
  setTimeout(() => { target.textContent = 'Copy'; }, 1500);
}

/* ---------------------------------------------------------------- phone -- */

function openDrawer() {
  document.body.classList.add('drawer-open');
  $('#menu').setAttribute('aria-expanded', 'true');
  $('#backdrop').hidden = false;
}

function closeDrawer() {
  document.body.classList.remove('drawer-open');
  $('#menu').setAttribute('aria-expanded', 'false');
  $('#backdrop').hidden = true;
}

/** With the on-screen keyboard up, the app fits the part still visible: the composer stays in view. */
function fitViewport() {
  const vv = window.visualViewport;
  const root = document.documentElement.style;
  if (!vv || vv.scale > 1.01) {
    root.removeProperty('--app-h');
    root.removeProperty('--app-top');
    return;
  }
  root.setProperty('--app-h', `${Math.round(vv.height)}px`);
  root.setProperty('--app-top', `${Math.round(vv.offsetTop)}px`);
  keepBottom();
}

/* ----------------------------------------------------------------- init -- */

function init() {
  const on = (selector, type, handler, options) => $(selector).addEventListener(type, handler, options);
  on('#signin-submit', 'click', signIn);
  on('#token', 'keydown', (e) => { if (e.key === 'Enter' && !e.isComposing) { e.preventDefault(); signIn(); } });
  on('#check-again', 'click', () => boot(true));
  on('#signout', 'click', signOut);
  on('#new-chat', 'click', newChat);
  on('#search', 'input', onSearchInput);
  on('#chat-list', 'click', (e) => { if (e.target.closest('a.open')) closeDrawer(); }); // the open chat again: no hashchange
  on('#menu', 'click', () => (document.body.classList.contains('drawer-open') ? closeDrawer() : openDrawer()));
  on('#backdrop', 'click', closeDrawer);
  initComposer(); // composer.js: the box, its files, drafts and keys
  initAround(); // around.js: branch, export, import, Ctrl+K, answered cards
  for (const action of ['stop', 'continue', 'regenerate', 'send-now']) on(`#${action}`, 'click', (e) => runAction(e.currentTarget, action));
  on('#scroller', 'scroll', onScroll, { passive: true });
  on('#files-toggle', 'click', () => (pane.open ? closeFilesPane() : openFilesPane()));
  on('#files-close', 'click', closeFilesPane);
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape') closeDrawer(); });
  window.addEventListener('hashchange', route);
  document.addEventListener('visibilitychange', onVisibility);
  if (window.visualViewport) {
    window.visualViewport.addEventListener('resize', fitViewport);
    window.visualViewport.addEventListener('scroll', fitViewport);
    fitViewport();
  }
  boot();
}

init();
