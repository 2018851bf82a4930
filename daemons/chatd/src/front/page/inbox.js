/*
 * tandem — the web page's inbox: what triggerd, connectord and chatd left
 * for the person while they were elsewhere (app.js calls initInbox() once,
 * startInbox() when the page goes live and stopInbox() when it leaves).
 *
 *   badge    the Notifications button in the chat's header: the unread
 *            count (99+ above 99), said in its aria-label too; from
 *            chatd's GET /notifications/count.
 *   panel    All / Unread / Failed, entries grouped Today / Yesterday /
 *            Earlier by the browser's own day; each shows its title, what
 *            sent it (a trigger's or a connector's name), when, and its
 *            text. Opening one opens its chat (and so marks it read); one
 *            with no chat is marked read. Mark read and Delete per entry;
 *            Mark all read, Clear read, Clear all (asked first, with the
 *            count). On a phone the panel is a sheet over the bottom.
 *   keys     ↑ ↓ Home End move between entries, Enter opens, Delete
 *            deletes, Esc closes and gives the focus back to the button.
 *   live     while the panel is open, chatd's GET /notifications/events
 *            (fetch + a small SSE reader, reconnecting after 0.5 s growing
 *            to 5 s like the chat's stream). The stream is live only, so
 *            every connect reads the list and the count again; events that
 *            come while that read is out are applied after it. With the
 *            panel closed the badge reads the count every 15 s while the
 *            tab is in sight (and the list when the count moved): a browser
 *            opens 6 connections to a host, and a second stream in every
 *            tab would halve the tabs that can follow a chat.
 *   seen     opening a chat (the address names it) marks its unread
 *            entries read.
 *
 * The whole inbox is read at once (chatd keeps 500 at most), so the
 * filters and the groups are the page's own and always exact.
 */
'use strict';

const INBOX_LIMIT = 500; // chatd keeps at most this many: the list is all of them
const INBOX_FRESH_MS = 4000; // an entry that came while the panel was open is highlighted this long
const INBOX_COUNT_SOON_MS = 150; // events in a burst ask for the count once

const inbox = {
  items: [], // newest first, as chatd lists them
  unread: 0,
  total: 0,
  filter: 'all', // all | unread | failed
  open: false,
  control: null, // the live stream's AbortController
  ticket: 0, // the latest list read; older answers are dropped
  loading: false,
  queued: [], // events that came while the list was being read
  fresh: new Set(), // ids highlighted as new
  marking: new Set(), // ids whose read is on its way
  countTimer: null,
  pollTimer: null,
  hiddenTimer: null,
  confirming: false,
};

/* -- what -- */

/** A failed run, or something switched off (a notice with no chat to open). */
const isFailed = (n) => n.kind === 'run_failed' || (n.kind === 'needs_attention' && !n.conversation_id);

const INBOX_FILTERS = { all: () => true, unread: (n) => !n.read, failed: isFailed };

const SOURCE_WORDS = { trigger: 'Trigger', connector: 'Connector', chatd: 'tandem' };

/** "Trigger · Morning notes": what sent it. */
function sourceOf(n) {
  const source = n.source || {};
  const word = SOURCE_WORDS[source.type] || 'tandem';
  return source.name && source.type !== 'chatd' ? `${word} · ${source.name}` : word;
}

/** The local day of `date` as a number to compare: days since the epoch in this browser's zone. */
const localDay = (date) => Math.floor((date.getTime() - date.getTimezoneOffset() * 60000) / 86400000);

/** Today, Yesterday or Earlier, by the browser's local day. */
function groupOf(created, now = new Date()) {
  const date = new Date(created);
  if (Number.isNaN(date.getTime())) return 'Earlier';
  const days = localDay(now) - localDay(date);
  if (days <= 0) return 'Today';
  return days === 1 ? 'Yesterday' : 'Earlier';
}

/** 14:02 for today and yesterday, "3 Mar, 14:02" before. */
function whenOf(created, group) {
  const date = new Date(created);
  if (Number.isNaN(date.getTime())) return '';
  const time = date.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  if (group !== 'Earlier') return time;
  return `${date.toLocaleDateString([], { day: 'numeric', month: 'short' })}, ${time}`;
}

const countText = (n) => (n > 99 ? '99+' : String(n));

/* -- badge -- */

function paintBadge() {
  const badge = $('#inbox-count');
  badge.textContent = inbox.unread === 0 ? '' : countText(inbox.unread);
  badge.hidden = inbox.unread === 0;
  const said = inbox.unread === 0 ? 'none unread' : `${inbox.unread} unread`;
  $('#inbox-open').setAttribute('aria-label', `Notifications, ${said}`);
}

/** The unread count and the total, from chatd. */
async function loadInboxCount() {
  const counts = await api('GET', '/notifications/count');
  inbox.unread = Number(counts && counts.unread) || 0;
  inbox.total = Number(counts && counts.total) || 0;
  paintBadge();
  if (inbox.open) paintInboxHead();
}

/** The count again, once for a burst of events. */
function inboxCountSoon() {
  clearTimeout(inbox.countTimer);
  inbox.countTimer = setTimeout(() => loadInboxCount().catch(() => {}), INBOX_COUNT_SOON_MS);
}

/* -- list -- */

/** Reads the list and the counts again; events that come meanwhile wait for it. */
async function loadInbox() {
  const ticket = ++inbox.ticket;
  inbox.loading = true;
  try {
    const [listing] = await Promise.all([api('GET', `/notifications?limit=${INBOX_LIMIT}`), loadInboxCount()]);
    if (ticket !== inbox.ticket) return;
    inbox.items = Array.isArray(listing && listing.notifications) ? listing.notifications : [];
  } finally {
    if (ticket === inbox.ticket) {
      inbox.loading = false;
      const queued = inbox.queued.splice(0);
      for (const [type, data] of queued) applyInboxEvent(type, data);
    }
  }
  renderInbox();
  markSeenChat(wantedChatId());
}

/** The unread entries about chat `id` are read now: the person opened it. */
function markSeenChat(id) {
  if (!id || page.state !== 'live') return;
  const ids = inbox.items.filter((n) => n.conversation_id === id && !n.read && !inbox.marking.has(n.id)).map((n) => n.id);
  if (ids.length) markRead(ids).catch(showError);
}

async function markRead(ids) {
  for (const id of ids) inbox.marking.add(id);
  try {
    await api('POST', '/notifications/read', { ids });
  } finally {
    for (const id of ids) inbox.marking.delete(id);
  }
  setRead(ids);
  inboxCountSoon();
}

function setRead(ids) {
  const which = ids === 'all' ? null : new Set(ids);
  for (const n of inbox.items) if (!which || which.has(n.id)) n.read = true;
  renderInbox();
}

function dropEntries(ids, readOnly) {
  const which = ids === 'all' ? null : new Set(ids);
  inbox.items = inbox.items.filter((n) => !((!which || which.has(n.id)) && (!readOnly || n.read)));
  renderInbox();
}

async function deleteEntries(body) {
  await api('DELETE', '/notifications', body);
  dropEntries(body.all ? 'all' : body.ids, body.read_only === true);
  await loadInboxCount();
}

/* -- live -- */

function startInbox() {
  stopInbox();
  loadInbox().catch(() => {});
  inbox.pollTimer = setInterval(pollInbox, LIST_EVERY_MS);
}

/** The panel is open and in sight: follow chatd's inbox stream. */
function followInbox() {
  if (inbox.control || page.state !== 'live') return;
  inbox.control = new AbortController();
  tailInbox(inbox.control.signal);
}

function unfollowInbox() {
  if (inbox.control) inbox.control.abort();
  inbox.control = null;
}

/** The panel closed, the tab in sight: the count, and the list when the count moved. */
async function pollInbox() {
  if (page.state !== 'live' || inbox.control || document.visibilityState !== 'visible') return;
  const before = [inbox.unread, inbox.total];
  await loadInboxCount().catch(() => {});
  if (inbox.unread !== before[0] || inbox.total !== before[1]) loadInbox().catch(() => {});
}

/** Leaves the inbox: no stream, nothing of the old session shown. */
function stopInbox() {
  unfollowInbox();
  clearInterval(inbox.pollTimer);
  inbox.pollTimer = null;
  inbox.ticket += 1;
  inbox.loading = false;
  inbox.queued = [];
  clearTimeout(inbox.countTimer);
  closeInbox(false);
  inbox.items = [];
  inbox.unread = 0;
  inbox.total = 0;
  paintBadge();
}

/** Out of sight a while: the stream goes (a browser opens 6 connections to a host at most). */
function onInboxVisibility() {
  clearTimeout(inbox.hiddenTimer);
  if (document.visibilityState === 'hidden') {
    inbox.hiddenTimer = setTimeout(() => {
      if (document.visibilityState === 'hidden') unfollowInbox();
    }, HIDDEN_DROP_MS);
  } else if (page.state === 'live') {
    if (inbox.open) followInbox();
    else pollInbox();
  }
}

/**
 * Follows the inbox's events until aborted. Every connect reads the list again (the stream
 * has no replay); every reconnect waits 0.5 s growing to 5 s, short again once an event came.
 */
async function tailInbox(signal) {
  let delay = RETRY_MIN_MS;
  while (!signal.aborted) {
    const attempt = new AbortController();
    const abort = () => attempt.abort();
    signal.addEventListener('abort', abort);
    const hung = setTimeout(abort, REQUEST_MS);
    const progress = { heard: false };
    try {
      const res = await fetch(`${API}/notifications/events`,
        { signal: attempt.signal, cache: 'no-store', headers: { accept: 'text/event-stream' } });
      if (res.ok) {
        clearTimeout(hung);
        loadInbox().catch(() => {}); // after the head: nothing committed from now on is missed
        await readInboxEvents(res.body, attempt, progress);
      } else {
        const error = await errorFrom(res);
        if (error.status === 401) return signedOut();
      }
    } catch {
      if (signal.aborted) return;
    } finally {
      clearTimeout(hung);
      signal.removeEventListener('abort', abort);
      attempt.abort();
    }
    if (progress.heard) delay = RETRY_MIN_MS;
    await sleep(delay, signal);
    delay = Math.min(delay * 2, RETRY_MAX_MS);
  }
}

/** The inbox's frames (stream.js's reader): each JSON event applied, `progress.heard` once one came. */
function readInboxEvents(body, attempt, progress) {
  return readSse(body, attempt, (frame) => {
    if (!frame.type || !frame.data.length) return;
    let data;
    try { data = JSON.parse(frame.data.join('\n')); } catch { return; } // not JSON: skipped
    onInboxEvent(frame.type, data);
    progress.heard = true;
  });
}

function onInboxEvent(type, data) {
  if (inbox.loading) inbox.queued.push([type, data]);
  else applyInboxEvent(type, data);
  inboxCountSoon();
}

/** One event of chatd's inbox stream, applied to the list (each is safe to apply twice). */
function applyInboxEvent(type, data) {
  if (type === 'notification.created' && data && data.id) {
    if (inbox.items.some((n) => n.id === data.id)) return;
    inbox.items.unshift(data);
    if (inbox.open) {
      inbox.fresh.add(data.id);
      setTimeout(() => { inbox.fresh.delete(data.id); renderInbox(); }, INBOX_FRESH_MS);
    }
    renderInbox();
    // About the chat on screen, in sight: the person is looking at it.
    if (data.conversation_id && !data.read && document.visibilityState === 'visible' && chat && chat.id === data.conversation_id) {
      markSeenChat(data.conversation_id);
    }
  } else if (type === 'notification.read') {
    setRead(data.all ? 'all' : data.ids || []);
  } else if (type === 'notification.deleted') {
    dropEntries(data.all ? 'all' : data.ids || [], data.read_only === true);
  }
}

/* -- panel -- */

function openInbox() {
  if (page.state !== 'live') return;
  inbox.open = true;
  inbox.confirming = false;
  $('#inbox').hidden = false;
  $('#inbox-open').setAttribute('aria-expanded', 'true');
  followInbox(); // its connect reads the list again
  closeDrawer();
  renderInbox();
  const first = $('#inbox-list .inbox-entry-open');
  (first || $(`#inbox .inbox-filter[data-filter="${inbox.filter}"]`)).focus();
}

/** Closes the panel; `refocus`: the focus goes back to the Notifications button. */
function closeInbox(refocus) {
  if (!inbox.open) return;
  inbox.open = false;
  inbox.confirming = false;
  inbox.fresh.clear();
  unfollowInbox();
  $('#inbox').hidden = true;
  $('#inbox-open').setAttribute('aria-expanded', 'false');
  if (refocus) $('#inbox-open').focus();
}

function paintInboxHead() {
  const unread = inbox.items.filter((n) => !n.read).length;
  const read = inbox.items.length - unread;
  $('#inbox-read-all').disabled = unread === 0;
  $('#inbox-clear-read').disabled = read === 0;
  $('#inbox-clear-all').disabled = inbox.items.length === 0;
  for (const b of $$('#inbox .inbox-filter')) b.setAttribute('aria-pressed', String(b.dataset.filter === inbox.filter));
  const ask = $('#inbox-confirm');
  ask.hidden = !inbox.confirming;
  if (inbox.confirming) {
    const n = Math.max(inbox.total, inbox.items.length);
    $('.inbox-confirm-text', ask).textContent =
      `Remove all ${n} notification${n === 1 ? '' : 's'}? This cannot be undone.`;
    $('#inbox-confirm-yes').textContent = `Remove ${n}`;
  }
}

/** The panel's list, from `inbox.items` and the filter; the focused entry keeps the focus. */
function renderInbox() {
  if (!inbox.open) return;
  paintInboxHead();
  const box = $('#inbox-list');
  const focused = document.activeElement && box.contains(document.activeElement)
    ? document.activeElement.closest('.inbox-entry') : null;
  const focusId = focused && focused.dataset.id;
  const shown = inbox.items.filter(INBOX_FILTERS[inbox.filter]);
  const now = new Date();
  const nodes = [];
  let group = null;
  let ul = null;
  for (const n of shown) {
    const g = groupOf(n.created, now);
    if (g !== group) {
      group = g;
      const heading = el('h3', { class: 'inbox-group', text: g, id: `inbox-group-${g.toLowerCase()}` });
      ul = el('ul', { class: 'inbox-entries', 'aria-labelledby': heading.id });
      nodes.push(el('section', {}, heading, ul));
    }
    ul.append(inboxEntry(n, g));
  }
  box.replaceChildren(...nodes);
  const empty = $('#inbox-empty');
  empty.hidden = shown.length > 0;
  empty.textContent = { all: 'Nothing here yet.', unread: 'Nothing unread.', failed: 'Nothing failed.' }[inbox.filter];
  if (focusId) {
    const again = $(`#inbox-list .inbox-entry[data-id="${CSS.escape(focusId)}"] .inbox-entry-open`);
    if (again) again.focus();
  }
}

function inboxEntry(n, group) {
  const failed = isFailed(n);
  const classes = ['inbox-entry', n.read ? 'read' : 'unread', failed && 'failed', inbox.fresh.has(n.id) && 'fresh'];
  const when = whenOf(n.created, group);
  const exact = new Date(n.created);
  const open = el('button', {
    type: 'button', class: 'inbox-entry-open',
    title: n.conversation_id ? 'Open its chat' : undefined,
    onclick: () => openEntry(n),
  },
  el('span', { class: 'inbox-title' }, el('span', { class: 'inbox-dot', 'aria-hidden': 'true' }), n.title || ''),
  el('span', { class: 'inbox-meta' },
    failed ? el('span', { class: 'inbox-failed', text: 'Failed' }) : null,
    el('span', { class: 'inbox-source', text: sourceOf(n) }),
    el('time', { datetime: n.created, title: Number.isNaN(exact.getTime()) ? '' : exact.toLocaleString(), text: when })),
  n.body ? el('span', { class: 'inbox-body', text: n.body }) : null,
  el('span', { class: 'visually-hidden', text: n.read ? '' : ' (unread)' }));
  const actions = el('span', { class: 'inbox-actions' },
    n.read ? null : button('quiet inbox-mark', 'Mark read', () => markRead([n.id]).catch(showError),
      { 'aria-label': `Mark read: ${n.title}` }),
    button('quiet inbox-delete', 'Delete', () => deleteEntry(n),
      { 'aria-label': `Delete: ${n.title}` }));
  return el('li', { class: classes.filter(Boolean).join(' '), 'data-id': n.id }, open, actions);
}

/** Opens an entry: its chat (which marks its entries read), or, with no chat, marks it read. */
function openEntry(n) {
  if (n.conversation_id) {
    closeInbox(true);
    if (wantedChatId() === n.conversation_id) markSeenChat(n.conversation_id);
    else navigate(n.conversation_id);
  } else if (!n.read) {
    markRead([n.id]).catch(showError);
  }
}

/** Deletes one entry; the focus moves to the next (or the one before). */
async function deleteEntry(n) {
  const entries = $$('#inbox-list .inbox-entry');
  const at = entries.findIndex((li) => li.dataset.id === n.id);
  const next = entries[at + 1] || entries[at - 1];
  try {
    await deleteEntries({ ids: [n.id] });
  } catch (error) {
    return showError(error);
  }
  const target = next && $(`#inbox-list .inbox-entry[data-id="${CSS.escape(next.dataset.id)}"] .inbox-entry-open`);
  if (target) target.focus();
  else if (inbox.open) $(`#inbox .inbox-filter[data-filter="${inbox.filter}"]`).focus();
}

function onInboxKey(e) {
  if (e.key === 'Escape') {
    e.preventDefault();
    e.stopPropagation();
    if (inbox.confirming) { inbox.confirming = false; paintInboxHead(); $('#inbox-clear-all').focus(); return; }
    closeInbox(true);
    return;
  }
  const entry = e.target.closest('.inbox-entry');
  if (!entry) return;
  const buttons = $$('#inbox-list .inbox-entry-open');
  const at = buttons.indexOf($('.inbox-entry-open', entry));
  let to = null;
  if (e.key === 'ArrowDown') to = Math.min(at + 1, buttons.length - 1);
  else if (e.key === 'ArrowUp') to = Math.max(at - 1, 0);
  else if (e.key === 'Home') to = 0;
  else if (e.key === 'End') to = buttons.length - 1;
  else if (e.key === 'Delete') {
    e.preventDefault();
    const n = inbox.items.find((item) => item.id === entry.dataset.id);
    if (n) deleteEntry(n);
    return;
  }
  if (to === null || to < 0) return;
  e.preventDefault();
  buttons[to].focus();
  buttons[to].scrollIntoView({ block: 'nearest' });
}

async function inboxAction(target, work) {
  target.disabled = true;
  try {
    await work();
  } catch (error) {
    showError(error);
  } finally {
    target.disabled = false;
    paintInboxHead();
  }
}

/* -- init -- */

function initInbox() {
  $('#inbox-open').addEventListener('click', () => (inbox.open ? closeInbox(true) : openInbox()));
  $('#inbox-close').addEventListener('click', () => closeInbox(true));
  $('#inbox').addEventListener('keydown', onInboxKey);
  for (const b of $$('#inbox .inbox-filter')) {
    b.addEventListener('click', () => { inbox.filter = b.dataset.filter; renderInbox(); });
  }
  $('#inbox-read-all').addEventListener('click', (e) => inboxAction(e.currentTarget, async () => {
    await api('POST', '/notifications/read', { all: true });
    setRead('all');
    await loadInboxCount();
  }));
  $('#inbox-clear-read').addEventListener('click', (e) => inboxAction(e.currentTarget,
    () => deleteEntries({ all: true, read_only: true })));
  $('#inbox-clear-all').addEventListener('click', () => {
    inbox.confirming = true;
    paintInboxHead();
    $('#inbox-confirm-no').focus();
  });
  $('#inbox-confirm-no').addEventListener('click', () => {
    inbox.confirming = false;
    paintInboxHead();
    $('#inbox-clear-all').focus();
  });
  $('#inbox-confirm-yes').addEventListener('click', (e) => inboxAction(e.currentTarget, async () => {
    await deleteEntries({ all: true });
    inbox.confirming = false;
  }));
  document.addEventListener('click', (e) => { // a click outside closes the panel
    if (inbox.open && e.target.isConnected && !$('#inbox').contains(e.target) && !$('#inbox-open').contains(e.target)) {
      closeInbox(false);
    }
  });
  window.addEventListener('hashchange', () => markSeenChat(wantedChatId()));
  document.addEventListener('visibilitychange', onInboxVisibility);
  paintBadge();
}
