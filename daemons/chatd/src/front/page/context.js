/*
 * tandem — the web page's MCP context: prompts and resources of the chat's
 * MCP servers put in front of a message (chatd's GET …/mcp/prompts,
 * …/mcp/resources; `context` on a send). Served by chatd's front at
 * /chat-app/context.js and loaded before app.js (classic scripts, one
 * global scope: this file uses app.js's $, el, api, button, chat… only when
 * called; app.js's init() calls initContext()).
 *
 *   pick     "Context" beside the attach button opens a list of the open
 *            chat's prompts and resources, by server; a prompt with
 *            arguments asks for them (the required ones first, marked).
 *            What is picked is a chip over the composer (✕ removes it),
 *            kept per chat while the page is open, sent with the next
 *            message and then cleared. A server that did not answer is
 *            named with its reason.
 *   sent     a message's context blocks (chatd put them in front of the
 *            typed text) fold under "Context: …" with the text they gave.
 */
'use strict';

const CONTEXT_HEAD = '[context from MCP connector ';
const MAX_CONTEXT_ITEMS = 8; // chatd's most prompts and resources a message

const contextPicks = new Map(); // chat id → [{item, label}]

/** The prompts and resources picked in the composer of `key`. */
function contextOf(key) {
  if (!contextPicks.has(key)) contextPicks.set(key, []);
  return contextPicks.get(key);
}

function paintContext() {
  const box = $('#context-chips');
  const key = compose.key || NEW_CHAT_KEY;
  const mine = contextOf(key);
  box.hidden = !mine.length;
  box.replaceChildren(...mine.map((pick, i) => el('div', { class: 'attach-chip context-chip', title: pick.label },
    el('span', { class: 'attach-icon', text: 'MCP', 'aria-hidden': 'true' }),
    el('span', { class: 'attach-name', text: pick.label }),
    button('attach-remove quiet', '✕', () => { mine.splice(i, 1); paintContext(); }, { 'aria-label': `Remove ${pick.label}` }))));
}

/** A prompt's label: its server, its name and the arguments given. */
function promptLabel(prompt, args) {
  const given = Object.entries(args).map(([k, v]) => `${k}: ${v}`).join(', ');
  return `${prompt.server} · ${prompt.name}${given ? ` (${given})` : ''}`;
}

function addPick(item, label) {
  const key = compose.key || NEW_CHAT_KEY;
  const mine = contextOf(key);
  if (mine.length >= MAX_CONTEXT_ITEMS) {
    showInlineError($('#context-error'), `At most ${MAX_CONTEXT_ITEMS} prompts and resources a message.`);
    return;
  }
  mine.push({ item, label });
  paintContext();
  $('#context-panel').close();
  $('#composer').focus();
}

/** The arguments form of a prompt: an input each, the required ones marked. */
function askArguments(prompt) {
  const list = $('#context-list');
  const args = prompt.arguments || [];
  const inputs = args.map((a, i) => {
    const id = `context-arg-${i}`;
    const input = el('input', { id, type: 'text', autocomplete: 'off', 'data-arg': a.name, required: !!a.required });
    return el('div', { class: 'field' },
      el('label', { for: id, text: `${a.name}${a.required ? ' (required)' : ''}` }),
      input,
      a.description ? el('p', { class: 'hint muted', text: a.description }) : null);
  });
  const form = el('form', { id: 'context-args', novalidate: true },
    el('h3', { text: `${prompt.server} · ${prompt.name}` }),
    ...inputs,
    el('div', { class: 'actions' },
      el('button', { type: 'submit', class: 'primary', text: 'Add' }),
      button('quiet', 'Back', () => fillContextList())));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const given = {};
    for (const input of form.querySelectorAll('input[data-arg]')) {
      if (input.value) given[input.dataset.arg] = input.value;
      else if (input.required) {
        showInlineError($('#context-error'), `${input.dataset.arg} is required.`);
        input.focus();
        return;
      }
    }
    addPick({ connector: prompt.connector, name: prompt.name, arguments: given }, promptLabel(prompt, given));
  });
  list.replaceChildren(form);
  const first = form.querySelector('input');
  if (first) first.focus();
}

/** The open chat's prompts and resources, by kind, each a button. */
async function fillContextList() {
  const list = $('#context-list');
  const status = $('#context-status');
  $('#context-error').hidden = true;
  list.replaceChildren();
  if (!chat) {
    status.textContent = 'Send a first message to open a chat: its MCP servers are listed here then.';
    return;
  }
  status.textContent = 'Asking the servers…';
  const id = chat.id;
  let prompts;
  let resources;
  try {
    [prompts, resources] = await Promise.all([
      api('GET', `/conversations/${enc(id)}/mcp/prompts`),
      api('GET', `/conversations/${enc(id)}/mcp/resources`),
    ]);
  } catch (error) {
    status.textContent = '';
    showInlineError($('#context-error'), error);
    return;
  }
  if (!chat || chat.id !== id) return;
  const rows = [];
  const group = (title, items) => {
    if (!items.length) return;
    rows.push(el('h3', { text: title }));
    rows.push(el('ul', { class: 'context-items' }, ...items));
  };
  group('Prompts', (prompts.prompts || []).map((p) => el('li', {},
    button('context-item', `${p.server} · ${p.title || p.name}`, () => {
      if ((p.arguments || []).length) askArguments(p);
      else addPick({ connector: p.connector, name: p.name }, promptLabel(p, {}));
    }, { title: p.description || p.name, 'data-prompt': p.name }))));
  group('Resources', (resources.resources || []).map((r) => el('li', {},
    button('context-item', `${r.server} · ${r.title || r.name || r.uri}`, () => {
      addPick({ connector: r.connector, uri: r.uri }, `${r.server} · ${r.uri}`);
    }, { title: r.description || r.uri, 'data-uri': r.uri }))));
  const away = [...(prompts.unavailable || []), ...(resources.unavailable || [])];
  const seen = new Set();
  for (const u of away) {
    if (seen.has(u.connector)) continue;
    seen.add(u.connector);
    rows.push(el('p', { class: 'muted', text: `${u.server} did not answer: ${u.reason}` }));
  }
  list.replaceChildren(...rows);
  status.textContent = rows.length ? '' : 'No prompts or resources from this chat\'s MCP servers.';
}

function openContextPanel() {
  const panel = $('#context-panel');
  if (!panel.open) panel.showModal();
  fillContextList();
}

/* ------------------------------------------------------------------ sent -- */

/**
 * Where the typed text of a message begins: after the context blocks chatd
 * put in front (mcp/context.rs: a head line, a fence, the text, the fence,
 * a blank line); 0 for none.
 */
function contextEnd(message) {
  const text = String((message && message.text) || '');
  const records = Array.isArray(message && message.attachments) ? message.attachments.filter((a) => a && a.kind === 'context') : [];
  let at = 0;
  for (let i = 0; i < records.length && text.startsWith(CONTEXT_HEAD, at); i += 1) {
    const head = text.indexOf('\n', at);
    const fenceEnd = head < 0 ? -1 : text.indexOf('\n', head + 1);
    if (fenceEnd < 0) break;
    const fence = text.slice(head + 1, fenceEnd);
    if (!/^`{3,}$/.test(fence)) break;
    const close = text.indexOf(`\n${fence}\n\n`, fenceEnd);
    if (close < 0) break;
    at = close + fence.length + 3;
  }
  return at;
}

/** A sent message's context, folded: "Context: Docs · review, …" and the text it gave. Null for none. */
function contextFold(message) {
  const records = Array.isArray(message && message.attachments) ? message.attachments.filter((a) => a && a.kind === 'context') : [];
  const end = contextEnd(message);
  if (!records.length || !end) return null;
  const names = records.map((r) => `${r.server} · ${r.prompt || r.uri}`).join(', ');
  return el('details', { class: 'context-fold' },
    el('summary', { text: `Context: ${names}` }),
    el('pre', { text: String(message.text).slice(0, end).trimEnd() }));
}

function initContext() {
  $('#context-add').addEventListener('click', openContextPanel);
  $('#context-close').addEventListener('click', () => $('#context-panel').close());
}
