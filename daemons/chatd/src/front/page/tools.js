/*
 * tandem — the web page's Tools menu (docs/api.md "Tool switches").
 *
 *   menu   "Tools" beside Skills: a switch a tool group and a connector of the
 *          open chat (one that cannot serve it off, disabled, with why), "N of
 *          M on", Select all (never the opt-in saved agents), Disable all;
 *          from 9 rows a search, whose buttons change the shown ones. A change
 *          is one PUT …/builtins {off, on}; a refusal shows under the list,
 *          the switches what chatd holds.
 *   draft  the start screen's switches (GET /draft/tools), sent with the
 *          new chat's POST /conversations.
 */
'use strict';

const TOOL_SEARCH_FROM = 9; // rows from which there is a search
const MCP_ROW = 'mcp:';
const isConnector = (g) => g.name.startsWith(MCP_ROW);

/** view: GET …/tools or /draft/tools; chatId: its chat (null: the draft); draft: its {off, on}; queue: the PUTs in turn. */
const tl = { view: null, chatId: null, q: '', shown: [], queue: Promise.resolve(), draft: null };

function buildTools() {
  const q = el('input', { id: 'tools-q', type: 'search', placeholder: 'Find a tool', 'aria-label': 'Find a tool', autocomplete: 'off' });
  q.addEventListener('input', () => { tl.q = q.value.trim().toLowerCase(); paintToolsMenu(); });
  const names = (on) => tl.shown.filter((g) => g.usable && !(on && g.opt_in)).map((g) => g.name);
  $('#tools-menu').replaceChildren(
    el('div', { class: 'sheet-head' },
      el('h2', { id: 'tools-menu-title', text: 'Tools in this chat' }),
      button('quiet', '✕', () => $('#tools-menu').close(), { 'aria-label': 'Close the tools' })),
    el('div', { class: 'sheet-body' },
      el('p', { id: 'tools-count', role: 'status' }),
      q,
      el('div', { class: 'mcp-actions' },
        button('', 'Select all', () => switchTools(names(true), true), { id: 'tools-all' }),
        button('', 'Disable all', () => switchTools(names(false), false), { id: 'tools-none' })),
      el('div', { id: 'tools-rows' }),
      el('p', { id: 'tools-error', class: 'inline-error', role: 'alert', hidden: true })));
}

/** Where commands run, as the shell tool's description says. */
function shellWhere() {
  const bash = (tl.view.tools || []).find((t) => t.group === 'shell');
  const said = bash ? bash.description : '';
  if (/sandbox/i.test(said)) return "Commands run in this chat's sandbox.";
  return /on this machine/i.test(said) ? 'Commands run on this machine, not isolated.' : '';
}

function toolSwitch(g) {
  const box = el('input', { type: 'checkbox', role: 'switch', id: `tool-on-${g.name.replace(/[^\w-]/g, '-')}`, 'data-name': g.name, disabled: !g.usable });
  box.checked = g.usable && g.on;
  box.addEventListener('change', () => switchTools([g.name], box.checked));
  const say = g.usable ? (g.name === 'shell' ? shellWhere() : '') : g.reason;
  return el('li', {}, el('label', {}, box, el('span', {},
    el('strong', { text: g.label }), say ? el('span', { class: 'muted tool-say', text: say }) : null)));
}

function paintToolsMenu() {
  if (!tl.view) return;
  const rows = tl.view.groups || [];
  const q = $('#tools-q');
  q.hidden = rows.length < TOOL_SEARCH_FROM;
  const words = q.hidden ? '' : tl.q;
  tl.shown = rows.filter((g) => !words || [g.name, g.label, ...(g.tools || [])].some((w) => w.toLowerCase().includes(words)));
  const usable = rows.filter((g) => g.usable);
  $('#tools-count').textContent = `${usable.filter((g) => g.on).length} of ${usable.length} on`;
  $('#tools-all').textContent = words ? 'Select shown' : 'Select all';
  $('#tools-none').textContent = words ? 'Disable shown' : 'Disable all';
  const part = (id, title, list) => (list.length ? [el('section', { 'aria-labelledby': id },
    el('h3', { id, text: title }), el('ul', {}, ...list.map(toolSwitch)))] : []);
  const focused = document.activeElement && document.activeElement.id;
  $('#tools-rows').replaceChildren(
    ...part('tools-h-builtin', 'Built-in tools', tl.shown.filter((g) => !isConnector(g))),
    ...part('tools-h-mcp', 'Your connectors', tl.shown.filter(isConnector)),
    ...(tl.shown.length ? [] : [el('p', { class: 'muted', text: 'No tool matches.' })]));
  const again = focused && document.getElementById(focused); // a switch rebuilt keeps the focus
  if (again && again !== document.activeElement) again.focus();
}

/** The whole lists {off, on}, `names` switched `on` (never an unusable one). */
function toolLists(view, names, on) {
  const lists = { off: [], on: [] };
  for (const g of view.groups || []) {
    const want = g.usable && names.includes(g.name) ? on : g.on;
    if (g.opt_in ? want : !want) lists[g.opt_in ? 'on' : 'off'].push(g.name);
  }
  return lists;
}

/** The draft's switches over chatd's defaults. */
function markDraft(view, lists) {
  for (const g of view.groups || []) g.on = g.opt_in ? lists.on.includes(g.name) : !lists.off.includes(g.name);
}

async function loadToolsMenu(c) {
  try {
    const view = await api('GET', c ? `/conversations/${enc(c.id)}/tools` : '/draft/tools');
    if (chat !== c) return;
    if (!c && tl.draft) markDraft(view, tl.draft);
    tl.view = view;
  } catch (error) {
    showError(error);
  }
}

/** Switches the rows `names`: one PUT of the whole lists once the one before answered. */
function switchTools(names, on) {
  const c = chat;
  if (!names.length || tl.chatId !== (c ? c.id : null)) return;
  tl.queue = tl.queue.then(async () => {
    if (!tl.view || chat !== c) return;
    const lists = toolLists(tl.view, names, on);
    $('#tools-error').hidden = true;
    if (!c) {
      tl.draft = lists;
      markDraft(tl.view, lists);
    } else {
      try {
        const view = await api('PUT', `/conversations/${enc(c.id)}/builtins`, lists);
        if (chat === c) tl.view = view;
      } catch (error) {
        if (error.lost || error.status === 401) showError(error);
        else showInlineError($('#tools-error'), error);
        await loadToolsMenu(c); // the switches show what chatd holds
      }
    }
    paintToolsMenu();
  });
}

async function openToolsMenu() {
  const c = chat;
  const dialog = $('#tools-menu');
  if (dialog.open || (!c && wantedChatId())) return; // a chat still opening
  Object.assign(tl, { view: null, chatId: c ? c.id : null, q: '' });
  $('#tools-q').value = '';
  $('#tools-error').hidden = true;
  $('#tools-menu-title').textContent = c ? 'Tools in this chat' : 'Tools of the new chat';
  $('#tools-count').textContent = 'Loading…';
  $('#tools-rows').replaceChildren();
  dialog.showModal();
  await loadToolsMenu(c);
  paintToolsMenu();
}

/** composer.js startChat: the new chat, with the draft's switches. */
async function newChatWithTools() {
  const d = tl.draft;
  const mcp = (d ? d.off : []).filter((o) => o.startsWith(MCP_ROW));
  const made = await api('POST', '/conversations', d ? { switches: {
    builtins_off: d.off.filter((o) => !mcp.includes(o)), builtins_on: d.on, mcp_off: mcp.map((o) => o.slice(MCP_ROW.length)) } } : {});
  tl.draft = null;
  return made;
}

/** On leaving and when the open chat changes (app.js). */
function closeTools() {
  if ($('#tools-menu').open) $('#tools-menu').close();
}

function initTools() {
  buildTools();
  $('#tools-open').addEventListener('click', openToolsMenu);
  const menu = $('#tools-menu');
  menu.addEventListener('close', () => { if (!$('#tools-open').hidden) $('#tools-open').focus(); });
  menu.addEventListener('click', (e) => { if (e.target === e.currentTarget) menu.close(); }); // the backdrop
}
