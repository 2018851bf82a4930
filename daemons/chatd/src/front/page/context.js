/*
 * tandem — the web page's MCP context: prompts and resources of the chat's
 * MCP servers put in front of a message (chatd's GET …/mcp/prompts,
 * …/mcp/resources; `context` on a send).
 *
 *   pick     "Context" lists the chat's prompts, resources and resource
 *            templates by server (one that did not answer, with its reason);
 *            a prompt asks for its arguments, a template for each variable
 *            (its URI filled in as RFC 6570 says). A pick is a chip over the
 *            composer, kept per chat, sent with the next message.
 *   preview  a chip's Preview shows, folded, the text the model will read
 *            (POST …/mcp/prompts, …/mcp/resources/read), or chatd's refusal.
 *   sent     a message's context blocks fold under "Context: …".
 *
 * What a server says goes in through textContent only.
 */
'use strict';

const CONTEXT_HEAD = '[context from MCP connector ';
const MAX_CONTEXT_ITEMS = 8; // chatd's most prompts and resources a message
const CONTEXT_PREVIEW_CHARS = 20000; // a preview's characters shown (chatd sends up to 256 KiB)
const CONTEXT_MS = 150000; // chatd bounds each server's wait itself (30 s, after an opening)

const contextPicks = new Map(); // chat id → [{item, label}]
let contextView = 0; // the panel's latest view: an answer for an older one is dropped

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
    button('context-preview-open quiet', 'Preview', () => previewPick(pick), { 'aria-label': `Preview ${pick.label}` }),
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

/** One request of this panel: api()'s, waiting CONTEXT_MS, quiet (app.js). */
const contextRequest = (method, path, body) => api(method, path, body, { ms: CONTEXT_MS, quiet: true });

/* -- templates -- */

// RFC 6570's operators: what an expression starts with, joins its values with, whether it
// names them, and whether reserved characters pass (`+`, `#`).
const TEMPLATE_OPS = {
  '': { first: '', sep: ',', named: false, ifemp: '', reserved: false },
  '+': { first: '', sep: ',', named: false, ifemp: '', reserved: true },
  '#': { first: '#', sep: ',', named: false, ifemp: '', reserved: true },
  '.': { first: '.', sep: '.', named: false, ifemp: '', reserved: false },
  '/': { first: '/', sep: '/', named: false, ifemp: '', reserved: false },
  ';': { first: ';', sep: ';', named: true, ifemp: '', reserved: false },
  '?': { first: '?', sep: '&', named: true, ifemp: '=', reserved: false },
  '&': { first: '&', sep: '&', named: true, ifemp: '=', reserved: false },
};

/**
 * A URI template's parts (RFC 6570): literal strings and expressions
 * {op, vars: [{name, prefix}]}; null when it is not one (a brace unclosed, an
 * operator the RFC keeps for later, a bad variable).
 */
function parseTemplate(template) {
  const parts = [];
  let at = 0;
  for (;;) {
    const open = template.indexOf('{', at);
    const literal = template.slice(at, open < 0 ? template.length : open);
    if (literal.includes('}')) return null;
    parts.push(literal);
    if (open < 0) return parts;
    const close = template.indexOf('}', open);
    if (close < 0) return null;
    const body = template.slice(open + 1, close);
    const op = '+#./;?&'.includes(body[0]) ? body[0] : '';
    const vars = [];
    for (const spec of body.slice(op.length).split(',')) {
      const m = /^((?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})(?:\.?(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2}))*)(\*|:([1-9][0-9]{0,3}))?$/.exec(spec);
      if (!m) return null;
      vars.push({ name: m[1], prefix: m[3] ? Number(m[3]) : 0 });
    }
    parts.push({ op, vars });
    at = close + 1;
  }
}

/** The variables of a template's parts, each once, in their order. */
const templateVariables = (parts) => [...new Set(parts.flatMap((p) => (typeof p === 'string' ? [] : p.vars.map((v) => v.name))))];

/** `value` percent-encoded as UTF-8, but the unreserved characters (and with `reserved`, the reserved ones and %XX). */
function pctEncode(value, reserved) {
  const pattern = reserved ? /%[0-9A-Fa-f]{2}|[^A-Za-z0-9\-._~:\/?#[\]@!$&'()*+,;=]/gu : /[^A-Za-z0-9\-._~]/gu;
  return value.replace(pattern, (c) => (c.length === 3 ? c
    : [...new TextEncoder().encode(c)].map((b) => `%${b.toString(16).toUpperCase().padStart(2, '0')}`).join('')));
}

/** A template's URI with `values` (a string for every variable) filled in. */
function expandTemplate(parts, values) {
  return parts.map((part) => {
    if (typeof part === 'string') return part;
    const op = TEMPLATE_OPS[part.op];
    const each = part.vars.map((v) => {
      const value = v.prefix ? [...values[v.name]].slice(0, v.prefix).join('') : values[v.name];
      if (!op.named) return pctEncode(value, op.reserved);
      return value ? `${v.name}=${pctEncode(value, op.reserved)}` : `${v.name}${op.ifemp}`;
    });
    return op.first + each.join(op.sep);
  }).join('');
}

/* -- pick -- */

/**
 * A small form in the panel: `title`, a line `about` it, an input per field
 * (name, description, required), the required ones marked and refused in
 * words until given; `add` gets {name: value} of the fields given.
 */
function askFields(title, about, fields, add) {
  contextView += 1;
  $('#context-error').hidden = true;
  $('#context-status').textContent = '';
  const inputs = fields.map((a, i) => {
    const id = `context-arg-${i}`;
    const input = el('input', { id, type: 'text', autocomplete: 'off', 'data-arg': a.name, required: !!a.required });
    return el('div', { class: 'field' },
      el('label', { for: id, text: `${a.name}${a.required ? ' (required)' : ''}` }),
      input,
      a.description ? el('p', { class: 'hint muted', text: a.description }) : null);
  });
  const form = el('form', { id: 'context-args', novalidate: true },
    el('h3', { text: title }),
    about ? el('p', { class: 'hint muted', text: about }) : null,
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
    add(given);
  });
  $('#context-list').replaceChildren(form);
  const first = form.querySelector('input');
  if (first) first.focus();
}

/** A prompt's arguments asked for, then the prompt picked with them. */
function askArguments(prompt) {
  askFields(`${prompt.server} · ${prompt.name}`, prompt.description, prompt.arguments || [],
    (given) => addPick({ connector: prompt.connector, name: prompt.name, arguments: given }, promptLabel(prompt, given)));
}

/** A template's variables asked for (every one required), then the resource its URI names picked. */
function askTemplate(template) {
  const parts = parseTemplate(template.uri_template);
  if (!parts) {
    showInlineError($('#context-error'), `${template.uri_template} is not a URI template the page can fill in.`);
    return;
  }
  const pick = (values) => {
    const uri = expandTemplate(parts, values);
    addPick({ connector: template.connector, uri }, `${template.server} · ${uri}`);
  };
  const names = templateVariables(parts);
  if (!names.length) return pick({});
  const fields = names.map((name) => ({ name, required: true }));
  askFields(`${template.server} · ${template.title || template.name}`, `Fills in ${template.uri_template}`, fields, pick);
}

/** The open chat's prompts, resources and templates, by server, each a button. */
async function fillContextList() {
  const view = ++contextView;
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
      contextRequest('GET', `/conversations/${enc(id)}/mcp/prompts`),
      contextRequest('GET', `/conversations/${enc(id)}/mcp/resources`),
    ]);
  } catch (error) {
    if (view !== contextView) return;
    status.textContent = '';
    showInlineError($('#context-error'), error);
    return;
  }
  if (!chat || chat.id !== id || view !== contextView) return;
  const servers = new Map(); // connector → {server, prompts, resources, templates}: the lists' order
  const of = (entry) => {
    if (!servers.has(entry.connector)) servers.set(entry.connector, { server: entry.server, prompts: [], resources: [], templates: [] });
    return servers.get(entry.connector);
  };
  for (const p of prompts.prompts || []) of(p).prompts.push(el('li', {},
    button('context-item', p.title || p.name, () => {
      if ((p.arguments || []).length) askArguments(p);
      else addPick({ connector: p.connector, name: p.name }, promptLabel(p, {}));
    }, { title: p.description || p.name, 'data-prompt': p.name })));
  for (const r of resources.resources || []) of(r).resources.push(el('li', {},
    button('context-item', r.title || r.name || r.uri, () => {
      addPick({ connector: r.connector, uri: r.uri }, `${r.server} · ${r.uri}`);
    }, { title: r.description || r.uri, 'data-uri': r.uri })));
  for (const t of resources.templates || []) of(t).templates.push(el('li', {},
    button('context-item', `${t.title || t.name} (${t.uri_template})`, () => askTemplate(t),
      { title: t.description || t.uri_template, 'data-template': t.uri_template })));
  const rows = [];
  for (const s of servers.values()) {
    rows.push(el('h3', { text: s.server }));
    for (const [title, items] of [['Prompts', s.prompts], ['Resources', s.resources], ['Resource templates', s.templates]]) {
      if (!items.length) continue;
      rows.push(el('h4', { class: 'context-kind', text: title }));
      rows.push(el('ul', { class: 'context-items' }, ...items));
    }
  }
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

/* -- preview -- */

/** A preview's answer folded: what the model will read, its first CONTEXT_PREVIEW_CHARS characters. */
function previewBlock(answer) {
  const text = typeof answer.text === 'string' ? answer.text : '';
  const shown = text.length > CONTEXT_PREVIEW_CHARS ? text.slice(0, CONTEXT_PREVIEW_CHARS).replace(/[\uD800-\uDBFF]$/, '') : text;
  const facts = [`${Number(answer.chars || 0).toLocaleString()} characters`];
  if (answer.cut) facts.push('cut at 256 KiB, as the message will be');
  if (answer.left_out) facts.push(`${answer.left_out} binary part${answer.left_out === 1 ? '' : 's'} left out`);
  const more = text.length - shown.length;
  return el('details', { class: 'context-fold context-preview', open: true },
    el('summary', { text: `What the model will read: ${facts.join(', ')}` }),
    el('pre', { text: shown }),
    more > 0 ? el('p', { class: 'muted', text: `… and ${more.toLocaleString()} more characters, sent but not shown here.` }) : null);
}

/** A picked prompt or resource as chatd would put it in front of the message, in the panel. */
async function previewPick(pick) {
  const panel = $('#context-panel');
  if (!panel.open) panel.showModal();
  const view = ++contextView;
  const status = $('#context-status');
  const error = $('#context-error');
  const body = el('div', { id: 'context-preview' });
  error.hidden = true;
  $('#context-list').replaceChildren(el('h3', { text: `Preview: ${pick.label}` }), body,
    el('div', { class: 'actions' }, button('quiet', 'Back to the list', () => fillContextList())));
  if (!chat) {
    status.textContent = '';
    showInlineError(error, 'Open the chat first: a preview asks its MCP servers.');
    return;
  }
  status.textContent = 'Asking the server…';
  const kind = pick.item.uri === undefined ? 'prompts' : 'resources/read';
  let answer;
  try {
    answer = await contextRequest('POST', `/conversations/${enc(chat.id)}/mcp/${kind}`, pick.item);
  } catch (failure) {
    if (view !== contextView) return;
    status.textContent = '';
    showInlineError(error, failure);
    return;
  }
  if (view !== contextView) return;
  status.textContent = '';
  body.replaceChildren(previewBlock(answer || {}));
}

/* -- sent -- */

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
