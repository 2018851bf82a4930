/*
 * tandem — the web chat page. No framework, no build step, nothing loaded
 * from elsewhere. Served by chatd's front under /chat-app/. The page is
 * classic scripts sharing one global scope, loaded in this order (each uses
 * the others' names only when called; this file's init() starts it all):
 *
 *   composer.js  typing, files, uploads, drafts, the composer's keys
 *   around.js    branch, export, import, Ctrl+K, answered cards
 *   markdown.js  md.render: the model's text as DOM nodes, never HTML
 *   chat.js      the open chat's model and its rendering, run actions
 *   preview.js   the files pane's tables and documents (sheets as tabs, slides)
 *   files.js     change cards, file chips, the files pane and its trash
 *   stream.js    the event stream and one handler per event type
 *   status.js    the status line, the context meter, the failure banner
 *   inbox.js     the Notifications button, its panel and chatd's inbox stream
 *   settings.js  the model picker, the settings panel, the defaults for new chats
 *   push.js      "Notify me on this device": the service worker (sw.js) and Web Push
 *   mcp.js       the MCP servers panel: connectors added, tested, switched, removed
 *   context.js   prompts, resources and templates of the chat's MCP servers in front of a message; a preview
 *   apps.js      MCP Apps: a tool's own page in a sandboxed frame under its call
 *   subagents.js the chat's sub-agents: the header's menu, a read-only panel, results folded; its goal, loops
 *   agents.js    the Agents panel: saved agents, their chats, the form, import, export, templates
 *   skills.js    the chat's Skills menu (a switch a skill) and the Skills panel (the layers, yours written)
 *   tools.js     the chat's Tools menu (a switch a tool group or connector)
 *   app.js       this file, below
 *
 * This file, top to bottom:
 *   dom       $(), el(): nodes come from createElement; text goes in through
 *             textContent and text nodes only.
 *   state     `page` (screen, auth, timers), `list` (the sidebar), `chat` (the
 *             open chat, chat.js).
 *   api       api(): fetch + JSON, 8 s at most; errors are ApiError {status, type, message}.
 *             A 401 goes back to the sign-in card; a lost chatd (no answer,
 *             502/504 but an MCP server's mcp_error, a 503 that is not chatd's own) shows the one banner
 *             (`link`) until requests and the stream work again.
 *   boot      probe(): capabilities + session → live | signin | unavailable;
 *             the probe panel checks again by itself after 5, 10, 20, 30, 30… s.
 *   list      the chat list: search, rename, delete + undo; refreshed after our
 *             own actions, every 15 s and when the open chat changes.
 *   route     #/c/<id> in the address is the open chat.
 *   phone     the drawer (#menu) and visualViewport for the on-screen keyboard.
 *
 * No file of the page assigns innerHTML/outerHTML/insertAdjacentHTML, calls
 * document.write, eval or new Function.
 */
'use strict';

/* -- dom -- */

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

/* -- state -- */

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

/* -- api -- */

class ApiError extends Error {
  constructor(status, type, message, retryAfter = 0) {
    super(message);
    Object.assign(this, { status, type, retryAfter }); // status 0: no answer at all
  }

  /** chatd itself is gone, as opposed to refusing this request. */
  get lost() {
    // chatd's own 503s (engine_unavailable, sandbox_unavailable…) are answers, and so is its
    // 502 mcp_error: an MCP server did not answer chatd (context.js, apps.js show it in words).
    if (this.type === 'mcp_error') return false;
    return [0, 502, 504].includes(this.status) || (this.status === 503 && (!this.type || this.type === 'chatd_unavailable'));
  }
}

/** A request's signal: it gives up after REQUEST_MS (a hung link must not hang the page). */
const timeout = () => AbortSignal.timeout(REQUEST_MS);

/** An ApiError from a refusal's status and body: the server's error.message (as text), else the body's start. */
function refusal(status, text, retryAfter = 0) {
  let error = {};
  try { error = JSON.parse(text).error || {}; } catch { /* not JSON */ }
  const message = (typeof error.message === 'string' && error.message) || String(text || '').trim().slice(0, 200) || `HTTP ${status}`;
  const refused = new ApiError(status, String(error.type || ''), message, retryAfter);
  refused.detail = error; // the rest of the error object (an undo's `conflicts`)
  return refused;
}

/** An ApiError from a fetch's refusal. */
async function errorFrom(res) {
  return refusal(res.status, await res.text().catch(() => ''), Number(res.headers.get('retry-after')) || 0);
}

/**
 * One API call: the JSON answer (null for none), or a rejection with an ApiError.
 * `ms` bounds it (REQUEST_MS); `quiet`: a wait on an MCP server (chatd bounds it),
 * whose failure is this request's alone and never the banner's.
 */
async function api(method, path, body, { ms = REQUEST_MS, quiet = false } = {}) {
  const init = { method, cache: 'no-store', headers: { accept: 'application/json' }, signal: AbortSignal.timeout(ms) };
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const gone = (failure) => {
    if (!quiet) link.requestFailed();
    return new ApiError(0, 'network', quiet && failure && failure.name === 'TimeoutError'
      ? `No answer within ${ms / 1000} s: try again later.` : 'The chat service does not answer.');
  };
  let res;
  try {
    res = await fetch(API + path, init);
  } catch (failure) {
    throw gone(failure);
  }
  if (!res.ok) {
    const error = await errorFrom(res);
    if (error.status === 401) signedOut();
    else if (quiet) { /* the request's own failure */ } else if (error.lost) link.requestFailed();
    else link.requestOk();
    throw error;
  }
  let text;
  try {
    text = await res.text(); // the timeout holds for the body too
  } catch (failure) {
    throw gone(failure);
  }
  if (!quiet) link.requestOk();
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

/* -- boot -- */

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

/* -- sign in -- */

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
  await pushOffForSignOut(); // push.js: a shared device stops being told
  await fetch(`${API}/session`, { method: 'DELETE', signal: timeout() }).catch(() => {});
  showSignin();
}

/** A 401 from any route: the cookie expired or the token changed. */
function signedOut() {
  if (page.state === 'signin') return;
  if (page.auth === 'none') boot(); // nothing to sign in with: look again
  else showSignin();
}

/* -- live -- */

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
  performance.mark('tandem-live'); // the benchmark's "chat list shown" (tests/src/pagebench.rs)
  startInbox(); // inbox.js: the badge, the panel, the inbox's stream
  renewPush(); // push.js: chatd may have let this browser's subscription go
  clearInterval(page.listTimer);
  page.listTimer = setInterval(refreshList, LIST_EVERY_MS);
  await route();
}

/** Leaves the app: no stream, no timers, nothing of the old session on screen. */
function leaveLive() {
  stopStream();
  stopInbox();
  clearInterval(page.listTimer);
  page.openTicket += 1;
  page.openingId = null;
  chat = null;
  list.items = [];
  for (const box of ['#chat-list', '#messages', '#consents', '#pending']) $(box).replaceChildren();
  closeFilesPane();
  // Nothing of the session stays open over the sign-in card.
  closePanel(); // settings.js
  closeSkills(); // skills.js
  closeTools(); // tools.js
  closeSwitcher(); // around.js
  renderSubs(); // subagents.js
  renderGoal();
  if ($('#copy-dialog').open) $('#copy-dialog').close();
  closeDetails(false); // status.js
  hideToast();
  link.reset();
}

/* -- list -- */

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

/* -- toast -- */

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

/* -- route -- */

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
  renderSubs(); // subagents.js: hidden, its panel closed
  renderGoal(); // and the goal's line
  closeTools(); // tools.js
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
  loadAnswered(chat, snapshot); // around.js: the lines of cards answered before
  loadUndoState(chat);
  loadPresence(chat);
  loadSubs(chat, true); // subagents.js: the header's count, the open cards of running ones
  if (pane.open) loadFiles(chat);
}

/* -- phone -- */

function openDrawer() {
  document.body.classList.add('drawer-open');
  $('#menu').setAttribute('aria-expanded', 'true');
  $('#backdrop').hidden = false;
  $('#new-chat').focus(); // the drawer is before the menu button: Tab alone would not reach it
}

function closeDrawer() {
  // The focus in the drawer going hidden: back on the button that opened it.
  if (document.body.classList.contains('drawer-open') && $('#sidebar').contains(document.activeElement)) $('#menu').focus();
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

/* -- init -- */

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
  initInbox(); // inbox.js: the Notifications button and its panel
  initStatus(); // status.js: the meter's details, the failure banner
  initSettings(); // settings.js: the model picker, the settings panel, the defaults
  initMcp(); // mcp.js: the MCP servers panel
  initContext(); // context.js: prompts and resources in front of a message
  initApps(); // apps.js: a tool's page under its call
  initPush(); // push.js: "Notify me on this device"
  initFileSearch(); // filesearch.js: the files pane's search box
  initSubs(); // subagents.js: the sub-agent's panel
  initGoal(); // subagents.js: the goal's buttons
  initAgents(); // agents.js: the Agents panel
  initSkills(); // skills.js: the chat's skills menu, the Skills panel
  initTools(); // tools.js: the chat's Tools menu
  for (const action of ['stop', 'continue', 'regenerate', 'send-now']) on(`#${action}`, 'click', (e) => runAction(e.currentTarget, action));
  on('#scroller', 'scroll', onScroll, { passive: true });
  on('#files-toggle', 'click', toggleFilesPane);
  on('#files-close', 'click', closeFilesPaneToToggle);
  on('#files-pane', 'keydown', (e) => { if (e.key === 'Escape' && !e.defaultPrevented) { e.preventDefault(); closeFilesPaneToToggle(); } });
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
