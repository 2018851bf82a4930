/*
 * tandem — the web page's actions around a chat (app.js's init() calls initAround()).
 *
 *   branch    a Branch button on each message: chatd's fork from that
 *             message (the chat up to it), and the page opens the new chat.
 *   export    the chat menu (⋯) saves the chat as Markdown or JSON (chatd's
 *             export, handed to the browser as a download), or copies the
 *             Markdown: the clipboard when the page may use it, else the
 *             text shown selected for Ctrl+C (plain http has no clipboard).
 *   import    Import in the chat list takes a JSON export; the page opens
 *             the new chat; chatd's refusal is shown in its words.
 *   switcher  Ctrl+K (Cmd+K) opens a dialog: chatd's search as you type
 *             (title or a word in a message), ↑ ↓ Enter to open, Esc to
 *             close. A result shows its title, the line that matched (as
 *             text, never HTML; none for a title match) and when it last
 *             changed.
 *   answered  a permission card once answered leaves one line under its
 *             call ("Allowed for this chat by you, 14:02"): from this page's
 *             own answer or chatd's tool.consent_answered event; an egress
 *             card (no call of its own) goes under the call that reached out.
 *             A chat opened later takes its lines from the snapshot's
 *             `answered` cards, with when each was answered.
 */
'use strict';

const SWITCH_DEBOUNCE_MS = 180;
const SWITCH_LIMIT = 20;
const SAVE_URL_MS = 60000; // a download's blob URL is kept this long, then freed

const switcher = { ticket: 0, timer: null, items: [], at: 0, back: null };

/* -- branch -- */

/** Adds the Branch button to a message's view (app.js's makeView). */
function addBranch(c, message, node) {
  if (message.role === 'tool' || message.role === 'cleared' || message.role === 'goal') return; // a goal line is not forked
  const branch = button('branch quiet', 'Branch', (e) => branchFrom(c, message.id, e.currentTarget),
    { title: 'A new chat with the messages up to this one', 'aria-label': 'Branch: a new chat up to this message' });
  let actions = $(':scope > .actions', node);
  if (!actions) node.append(actions = el('div', { class: 'actions' }));
  actions.append(branch);
}

async function branchFrom(c, messageId, target) {
  target.disabled = true;
  try {
    const fork = await api('POST', `/conversations/${enc(c.id)}/fork`, { from_message_id: messageId });
    const id = fork && (fork.id || (fork.conversation && fork.conversation.id));
    refreshList();
    if (id) navigate(id);
  } catch (error) {
    showError(error);
  } finally {
    target.disabled = false;
  }
}

/* -- export -- */

/** chatd's export of the open chat in `format` (md or json), as a Blob. */
async function exportOf(c, format) {
  let res;
  try {
    res = await fetch(`${API}/conversations/${enc(c.id)}/export?format=${format}`, { cache: 'no-store', signal: timeout() });
  } catch {
    throw new ApiError(0, 'network', 'The chat service does not answer.');
  }
  if (!res.ok) {
    const error = await errorFrom(res);
    if (error.status === 401) signedOut();
    throw error;
  }
  return res.blob();
}

/** A file name from the chat's title: letters, digits, - and _ kept. */
function exportName(c, ext) {
  const base = titleOf(c.conversation).replace(/[^\p{L}\p{N}_-]+/gu, '-').replace(/^-+|-+$/g, '').slice(0, 60);
  return `${base || 'chat'}.${ext}`;
}

/** Hands a blob to the browser as a download named `name`. */
function saveBlob(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = el('a', { href: url, download: name, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), SAVE_URL_MS);
}

async function exportChat(format) {
  const c = chat;
  closeChatMenu();
  if (!c) return;
  try {
    saveBlob(await exportOf(c, format), exportName(c, format === 'md' ? 'md' : 'json'));
  } catch (error) {
    showError(error);
  }
}

async function copyChat() {
  const c = chat;
  closeChatMenu();
  if (!c) return;
  let text;
  try {
    text = await (await exportOf(c, 'md')).text();
  } catch (error) {
    return showError(error);
  }
  try {
    await navigator.clipboard.writeText(text);
    showToast('Copied the chat as Markdown.');
  } catch {
    // As a code block's Copy: no clipboard API (plain http on a LAN) → the text selected for Ctrl+C.
    const dialog = $('#copy-dialog');
    const pre = $('#copy-dialog-text');
    pre.textContent = text;
    dialog.showModal();
    getSelection().selectAllChildren(pre);
  }
}

function closeChatMenu() {
  $('#chat-menu').open = false;
}

/** The chat menu follows the open chat (app.js's renderTitle). */
function renderChatMenu() {
  const menu = $('#chat-menu');
  menu.hidden = !chat;
  if (!chat) menu.open = false;
}

/* -- import -- */

async function importFile(file) {
  let body;
  try {
    body = JSON.parse(await file.text());
  } catch {
    return showToast(`${file.name} is not a chat export: it is not JSON.`, { error: true });
  }
  try {
    const made = await api('POST', '/conversations/import', body);
    refreshList();
    if (made && made.id) navigate(made.id);
  } catch (error) {
    showError(error); // chatd's own words: the field and the limit
  }
}

/* -- switcher -- */

function openSwitcher() {
  const dialog = $('#switcher');
  if (dialog.open) return $('#switcher-q').focus();
  switcher.back = document.activeElement;
  closeDrawer();
  $('#switcher-q').value = '';
  dialog.showModal();
  $('#switcher-q').focus();
  searchSwitcher();
}

function closeSwitcher() {
  const dialog = $('#switcher');
  if (dialog.open) dialog.close();
}

function onSwitcherClosed() {
  clearTimeout(switcher.timer);
  switcher.ticket += 1;
  const back = switcher.back;
  switcher.back = null;
  if (back && back.isConnected && typeof back.focus === 'function') back.focus();
}

async function searchSwitcher() {
  const ticket = ++switcher.ticket;
  const q = $('#switcher-q').value.trim();
  const note = $('#switcher-note');
  let data;
  try {
    data = await api('GET', `/conversations?limit=${SWITCH_LIMIT}${q ? `&q=${enc(q)}` : ''}`);
  } catch (error) {
    if (ticket !== switcher.ticket) return;
    note.textContent = error instanceof ApiError ? error.message : 'The search failed.';
    return;
  }
  if (ticket !== switcher.ticket) return; // a newer search was asked for
  switcher.items = Array.isArray(data && data.conversations) ? data.conversations : [];
  switcher.at = 0;
  paintSwitcher();
  note.textContent = switcher.items.length ? '' : (q ? 'No chat matches.' : 'No chats yet.');
}

function paintSwitcher() {
  const box = $('#switcher-list');
  box.replaceChildren(...switcher.items.map((conversation, i) => {
    const when = whenText(conversation.updated);
    const line = conversation.match && typeof conversation.match.line === 'string' ? conversation.match.line : '';
    const li = el('li', { id: `switch-${i}`, role: 'option', class: 'switch-item', 'data-chat-id': conversation.id },
      el('span', { class: 'switch-title', text: titleOf(conversation) }),
      el('span', { class: 'switch-line muted', text: line }),
      el('span', { class: 'switch-when muted', text: when ? `changed ${when}` : '' }));
    li.addEventListener('click', () => pickSwitcher(i));
    return li;
  }));
  markSwitcher();
}

function markSwitcher() {
  const input = $('#switcher-q');
  [...$('#switcher-list').children].forEach((li, i) => {
    li.setAttribute('aria-selected', String(i === switcher.at));
    if (i === switcher.at) li.scrollIntoView({ block: 'nearest' });
  });
  if (switcher.items.length) input.setAttribute('aria-activedescendant', `switch-${switcher.at}`);
  else input.removeAttribute('aria-activedescendant');
}

function pickSwitcher(i) {
  const conversation = switcher.items[i];
  if (!conversation) return;
  switcher.back = null; // focus goes to the chat, not back where Ctrl+K was pressed
  closeSwitcher();
  navigate(conversation.id);
  $('#composer').focus();
}

function onSwitcherKey(event) {
  const n = switcher.items.length;
  if (event.key === 'ArrowDown' || event.key === 'ArrowUp') {
    event.preventDefault();
    if (!n) return;
    switcher.at = (switcher.at + (event.key === 'ArrowDown' ? 1 : n - 1)) % n;
    markSwitcher();
  } else if (event.key === 'Enter' && !event.isComposing) {
    event.preventDefault();
    if (switcher.timer) { // typed faster than the debounce: search now, then open the first
      clearTimeout(switcher.timer);
      switcher.timer = null;
      searchSwitcher().then(() => pickSwitcher(switcher.at));
    } else pickSwitcher(switcher.at);
  }
}

function onSwitcherInput() {
  clearTimeout(switcher.timer);
  switcher.timer = setTimeout(() => { switcher.timer = null; searchSwitcher(); }, SWITCH_DEBOUNCE_MS);
}

/* -- answered -- */

const ANSWER_WORDS = { once: 'Allowed once', deny: 'Denied', expired: 'Not answered in time' };

/** What "always" meant: a host command's is for the whole box, the rest for this chat. */
function alwaysWords(card) {
  return card.labels && typeof card.labels === 'object' && card.labels.always ? 'Allowed always on this instance' : 'Allowed for this chat';
}

/**
 * The call a card goes under: its own, or for an egress card the call of its
 * run that is reaching out (the last one running, else the run's last call).
 */
function cardCall(c, card) {
  if (card.call_id) return card.call_id;
  if (card.callFor) return card.callFor;
  const ofRun = [...c.calls.values()].filter((call) => !card.run_id || ownerRun(c, call) === card.run_id);
  const live = ofRun.filter((call) => call.status === 'running' || call.status === 'waiting');
  const found = live.length ? live[live.length - 1] : ofRun[ofRun.length - 1];
  return found ? found.id : null;
}

/**
 * A card as it comes (app.js's tool.consent): an egress card's call is the
 * one running now. Its answer may come after that call ended (egressd refused
 * the connection before chatd heard the card closed).
 */
function noteCard(c, card) {
  if (!card.call_id) card.callFor = cardCall(c, card);
}

/** Notes a card's answer (app.js: this page's answer, or the event): one line under its call. */
function noteAnswered(c, card, decision, byYou) {
  if (!card || !card.card_id) return;
  if (!c.answered) c.answered = new Map();
  const known = c.answered.get(card.card_id);
  if (known) { // the event and this page's own answer, in either order: one line, "by you"
    known.byYou = known.byYou || byYou;
    return paintAnswered(c, known);
  }
  const line = {
    cardId: card.card_id,
    callId: cardCall(c, card),
    decision,
    words: decision === 'always' ? alwaysWords(card) : ANSWER_WORDS[decision] || `Answered: ${decision}`,
    byYou,
    at: new Date().toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }),
    host: card.name === 'egress' && card.host ? `${card.host}: ` : '',
  };
  c.answered.set(card.card_id, line);
  paintAnswered(c, line);
}

/** "Allowed for this chat by you, 14:02" (an egress card's host first; no time when it is not known). */
function answeredText(line) {
  const who = line.byYou && line.decision !== 'expired' ? ' by you' : '';
  return `${line.host}${line.words}${who}${line.at ? `, ${line.at}` : ''}`;
}

/** An answer's time as a line says it: hh:mm today, the day too before today. */
function answeredAt(iso) {
  const t = new Date(iso);
  if (!iso || Number.isNaN(t.getTime())) return '';
  const time = t.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
  return t.toDateString() === new Date().toDateString() ? time : `${t.toLocaleDateString([], { month: 'short', day: 'numeric' })} ${time}`;
}

/**
 * The cards answered before the page opened the chat, from the snapshot's
 * `answered` (chatd's newest 200, with when each was answered). An egress
 * card's row names no call of its own (its id stands in) and says its host
 * in its reason. Called by app.js when a chat opens or reloads.
 */
function loadAnswered(c, snapshot) {
  const cards = Array.isArray(snapshot && snapshot.answered) ? snapshot.answered : [];
  if (!c.answered) c.answered = new Map();
  for (const card of cards) {
    if (!card || !card.card_id || !card.decision || c.answered.has(card.card_id)) continue;
    const egress = card.name === 'egress';
    const host = egress ? String(card.reason || '').split(' ')[0].replace(/:\d+$/, '') : ''; // "host:port is not…"
    const line = {
      cardId: card.card_id,
      callId: cardCall(c, egress ? { ...card, call_id: null } : card),
      decision: card.decision,
      words: card.decision === 'always' ? alwaysWords(card) : ANSWER_WORDS[card.decision] || `Answered: ${card.decision}`,
      byYou: true,
      at: answeredAt(card.answered),
      host: host ? `${host}: ` : '',
    };
    c.answered.set(card.card_id, line);
    paintAnswered(c, line);
  }
}

function paintAnswered(c, line) {
  const call = line.callId && c.calls.get(line.callId);
  if (call) return refreshCall(c, call);
  // No call to go under (an egress card before the run's first call): under the last answer.
  const shown = $(`#messages .consent-line[data-card-id="${CSS.escape(line.cardId)}"]`);
  if (shown) return shown.replaceWith(answeredLine(line));
  const last = [...c.path].reverse().find((m) => m.role === 'assistant');
  const view = last && c.views.get(last.id);
  if (view) view.node.append(answeredLine(line));
}

/** One answered card's line; `name` is its call's tool ("web_fetch · 127.0.0.2: Allowed once by you, 14:02"). */
function answeredLine(line, name = '') {
  return el('p', {
    class: 'consent-line',
    'data-card-id': line.cardId,
    'data-call-id': line.callId || '',
    'data-decision': line.decision,
    text: `${name ? `${name} · ` : ''}${answeredText(line)}`,
  });
}

/**
 * The answered cards' lines of a call (app.js's fillCall): right under the
 * message's folded calls, so they are seen without unfolding them.
 */
function fillConsentLines(c, node, call) {
  const message = node.root.closest('.message');
  const tools = node.root.closest('details.tools');
  if (!message || !tools) return;
  const lines = c.answered ? [...c.answered.values()].filter((l) => l.callId === call.id) : [];
  let box = $(':scope > .consent-lines', message);
  if (!box) {
    if (!lines.length) return;
    tools.after(box = el('div', { class: 'consent-lines' }));
  }
  for (const old of [...box.children]) if (old.dataset.callId === call.id) old.remove();
  box.append(...lines.map((line) => answeredLine(line, call.name)));
  if (!box.children.length) box.remove();
}

/* -- init -- */

function initAround() {
  $('#export-md').addEventListener('click', () => exportChat('md'));
  $('#export-json').addEventListener('click', () => exportChat('json'));
  $('#copy-md').addEventListener('click', copyChat);
  $('#copy-dialog-close').addEventListener('click', () => $('#copy-dialog').close());
  $('#import-chat').addEventListener('click', () => $('#import-input').click());
  $('#import-input').addEventListener('change', (e) => {
    const [file] = e.target.files;
    e.target.value = ''; // the same file again is a change
    if (file) importFile(file);
  });
  $('#switcher-open').addEventListener('click', openSwitcher);
  $('#switcher-q').addEventListener('input', onSwitcherInput);
  $('#switcher-q').addEventListener('keydown', onSwitcherKey);
  $('#switcher').addEventListener('close', onSwitcherClosed);
  $('#switcher').addEventListener('click', (e) => { if (e.target === e.currentTarget) closeSwitcher(); }); // the backdrop
  document.addEventListener('keydown', (e) => {
    if ((e.ctrlKey || e.metaKey) && !e.altKey && e.key.toLowerCase() === 'k' && page.state === 'live') {
      e.preventDefault();
      openSwitcher();
    }
  }, true);
  document.addEventListener('click', (e) => { // a click elsewhere closes the header's menus
    for (const menu of $$('.head-menu')) if (menu.open && !menu.contains(e.target)) menu.open = false;
  });
}
