/*
 * tandem — the web page's model and settings (chat.js's renderTitle() calls
 * renderChatTools()).
 *
 *   model     the open chat's model, picked in its header from the models
 *             the engine serves (capabilities' engine.models), each with its
 *             window and what it reads (images) and does (tools). Picking
 *             one PATCHes the chat; while a run works chatd answers 409 and
 *             the old choice stays, with a line saying why. A model the
 *             engine no longer lists stays in the list as "not served".
 *   panel     one dialog (a sheet on a phone) for a chat's settings and for
 *             the defaults of new chats: system prompt, temperature, top P,
 *             top K, reasoning effort, context size, max tokens, the
 *             permission mode and Agents mode (sent when switched). An empty field is unset (null to chatd: what
 *             stands under it holds). chatd checks every value; its 400
 *             names the field and the page shows it there; nothing is kept.
 *             Yolo asks to be confirmed. Esc or Cancel closes the panel and
 *             the focus goes back to what opened it. A chat's panel also
 *             holds its MCP servers' switches (mcp.js).
 *   policies  the panel's Tool permissions: per built-in tool Always, Ask,
 *             Never or none (the mode decides); the chat's own over the
 *             box's ("Box: ask"), or the box's for the defaults. Saved with
 *             the panel, one PUT of the whole map when it changed.
 */
'use strict';

const MODELS_FRESH_MS = 30000; // the engine's models are asked again when older than this

const SETTING_FIELDS = [
  { name: 'system_prompt', label: 'System prompt', kind: 'text', hint: 'Said to the model first, in every request (at most 32 KiB).' },
  { name: 'temperature', label: 'Temperature', kind: 'number', hint: '0 to 2: higher answers vary more.' },
  { name: 'top_p', label: 'Top P', kind: 'number', hint: 'Above 0, at most 1.' },
  { name: 'top_k', label: 'Top K', kind: 'number', hint: 'A whole number, 1 or more.' },
  { name: 'reasoning_effort', label: 'Reasoning effort', kind: 'choice', hint: 'How hard a reasoning model thinks before it answers.',
    choices: ['none', 'minimal', 'low', 'medium', 'high'] },
  { name: 'context_size', label: 'Context size', kind: 'number', hint: 'The window, in tokens, the chat plans its compaction with (1,024 or more).' },
  { name: 'max_tokens', label: 'Max tokens', kind: 'number', hint: 'The longest answer, in tokens (1 or more).' },
];

const MODES = [
  ['plan', 'Plan', 'the read tools only: the model looks and writes a plan, and changes nothing.'],
  ['ask', 'Ask', 'asks before every write and command; reads run.'],
  ['auto', 'Auto', "runs what stays in the chat's workspace; asks for what leaves it."],
  ['yolo', 'Yolo', 'runs every tool and command without asking (a deny rule still refuses).'],
];

const models = { list: null, at: 0, loading: null };
const tools = { chatId: null, shown: '' }; // the chat the header shows; the options it was filled with
const panel = { target: null, back: null, savedMode: null, busy: false, agents: false, policies: {} };

/* -- model -- */

/** Asks chatd for the engine's models when the list is older than MODELS_FRESH_MS. */
function loadModels() {
  if (models.loading || (models.list && Date.now() - models.at < MODELS_FRESH_MS)) return;
  models.at = Date.now(); // a failure waits as long as a success before asking again
  models.loading = api('GET', '/capabilities')
    .then((caps) => {
      const list = caps && caps.engine && Array.isArray(caps.engine.models) ? caps.engine.models : [];
      models.list = list.filter((m) => m && typeof m.id === 'string');
    })
    .catch(() => {}) // the banner or the sign-in card says why; the chat's own model stays shown
    .finally(() => {
      models.loading = null;
      renderChatTools();
    });
}

/** 32768 → "32K": a window as a person reads it. */
function windowText(tokens) {
  const n = Number(tokens) || 0;
  return n >= 1024 ? `${Math.round(n / 1024)}K` : String(n);
}

/** What a model reads and does, as short words: its window, images, tools; or "not served". */
function modelMarks(model) {
  if (!model) return ['not served'];
  const marks = [`${windowText(model.context_window)} window`];
  if (model.vision) marks.push('images');
  if (model.tools) marks.push('tools');
  return marks;
}

/** The header's picker, marks and settings button follow the open chat. */
function renderChatTools() {
  const box = $('#chat-tools');
  const c = chat;
  if (panel.target && panel.target.kind === 'chat' && (!c || c.id !== panel.target.id)) closePanel();
  box.hidden = !c;
  skillsFollow(c); // skills.js: the composer's Skills button
  if (!c) { tools.chatId = null; return; }
  if (tools.chatId !== c.id) {
    tools.chatId = c.id;
    hideModelNote();
  }
  loadModels();
  const current = c.conversation.model || '';
  const served = models.list || [];
  const rows = served.map((m) => [m.id, modelMarks(m)]);
  if (current && !served.some((m) => m.id === current)) rows.push([current, modelMarks(null)]);
  const shown = JSON.stringify(rows);
  const select = $('#model-pick');
  if (shown !== tools.shown) { // options built again only when they change: never under a choice being made
    tools.shown = shown;
    select.replaceChildren(...rows.map(([id, marks]) => el('option', { value: id, text: [id, ...marks].join(' · ') })));
  }
  select.value = current;
  const model = served.find((m) => m.id === current);
  $('#model-marks').replaceChildren(...modelMarks(model).map((word) =>
    el('span', { class: word === 'not served' ? 'mark gone' : 'mark', text: word })));
  select.title = model ? `${current}: ${modelMarks(model).join(', ')}` : `${current} is not served by the engine now`;
  const mode = c.conversation.permission_mode || 'auto';
  $('#settings-open .mode-badge').textContent = mode;
  $('#settings-open').title = `This chat's model settings and permission mode (now ${mode})`; // its name is its text
}

async function pickModel(event) {
  const select = event.currentTarget;
  const c = chat;
  if (!c) return;
  const was = c.conversation.model;
  const wanted = select.value;
  if (wanted === was) return;
  hideModelNote();
  try {
    const updated = await api('PATCH', `/conversations/${enc(c.id)}`, { model: wanted });
    if (chat !== c || !updated) return;
    c.conversation = updated;
    renderTitle();
    updateListItem(updated);
  } catch (error) {
    if (chat !== c) return;
    select.value = c.conversation.model; // the old choice stays
    if (error.status === 401) return;
    showModelNote(error.status === 409
      ? 'A run is working in this chat: the model can change once it ends (stop it or wait).'
      : error.message);
  }
}

function showModelNote(text) {
  const note = $('#model-note');
  note.textContent = text;
  note.hidden = false;
}

function hideModelNote() {
  const note = $('#model-note');
  note.hidden = true;
  note.textContent = '';
}

/* -- panel -- */

/** The panel's form, made once: a field, its hint and its error line for each setting, and the modes. */
function buildPanel() {
  const fields = SETTING_FIELDS.map((f) => {
    const id = `set-${f.name}`;
    const described = `${id}-hint ${id}-error`;
    let input;
    if (f.kind === 'text') {
      input = el('textarea', { id, rows: '4', spellcheck: 'true', 'aria-describedby': described });
    } else if (f.kind === 'choice') {
      input = el('select', { id, 'aria-describedby': described },
        el('option', { value: '', text: 'Not set' }), ...f.choices.map((c) => el('option', { value: c, text: c })));
    } else {
      input = el('input', { id, type: 'text', inputmode: 'decimal', autocomplete: 'off', spellcheck: 'false', placeholder: 'Not set', 'aria-describedby': described });
    }
    return el('div', { class: `field field-${f.kind}`, 'data-field': f.name },
      el('label', { for: id, text: f.label }),
      input,
      el('p', { id: `${id}-hint`, class: 'hint muted', text: f.hint }),
      el('p', { id: `${id}-error`, class: 'inline-error', role: 'alert', hidden: true }));
  });
  const modes = MODES.map(([word, name, line]) => el('label', { class: 'mode-row' },
    el('input', { type: 'radio', name: 'set-mode', value: word }),
    el('span', {}, el('strong', { text: name }), ` ${line}`)));
  const sure = el('label', { id: 'set-yolo-confirm', class: 'yolo-confirm', hidden: true },
    el('input', { type: 'checkbox', id: 'set-yolo-sure' }),
    el('span', { id: 'set-yolo-words' }));
  const modeBox = el('fieldset', { id: 'set-mode', class: 'field', 'aria-describedby': 'set-mode-error' },
    el('legend', { text: 'Permission mode' }), ...modes, sure,
    el('p', { id: 'set-mode-error', class: 'inline-error', role: 'alert', hidden: true }));
  const agents = el('div', { class: 'field' }, el('label', { class: 'mode-row' },
    el('input', { type: 'checkbox', role: 'switch', id: 'set-agents', 'aria-describedby': 'set-agents-error' }),
    el('span', {}, el('strong', { text: 'Agents mode' }), ' The chat plans and hands writes and builds to workers.')),
  el('p', { id: 'set-agents-error', class: 'inline-error', role: 'alert', hidden: true }));
  const form = el('form', { id: 'settings-form', novalidate: true },
    el('div', { class: 'sheet-head' },
      el('h2', { id: 'settings-title', text: 'Settings' }),
      el('p', { id: 'settings-sub', class: 'muted' })),
    el('div', { class: 'sheet-body' },
      el('p', { class: 'muted', text: 'An empty field is not set: the saved agent\'s value or the engine\'s own default holds. Changes apply from the next request.' }),
      ...fields, modeBox, policiesBox(), agents, chatMcpBox()),
    el('p', { id: 'settings-error', class: 'inline-error', role: 'alert', hidden: true }),
    el('div', { class: 'sheet-foot' },
      button('', 'Cancel', () => closePanel(), { id: 'settings-cancel' }),
      el('button', { type: 'submit', class: 'primary', id: 'settings-save', text: 'Save' })));
  form.addEventListener('submit', (e) => { e.preventDefault(); savePanel(); });
  form.addEventListener('change', (e) => { if (e.target.name === 'set-mode') paintYolo(); });
  $('#settings-panel').replaceChildren(form);
}

/** The chosen mode's word, or null. */
const chosenMode = () => { const r = $('#set-mode input[name="set-mode"]:checked'); return r ? r.value : null; };

/** Yolo over another saved mode asks for the tick. */
function paintYolo() {
  const asks = chosenMode() === 'yolo' && panel.savedMode !== 'yolo';
  $('#set-yolo-confirm').hidden = !asks;
  if (!asks) $('#set-yolo-sure').checked = false;
}

/** Opens the panel for the open chat or for the defaults, filled with what chatd holds now. */
async function openPanel(kind, opener) {
  const dialog = $('#settings-panel');
  if (dialog.open || panel.busy) return;
  const c = chat;
  if (kind === 'chat' && !c) return;
  panel.busy = true;
  let settings;
  let mode;
  try {
    if (kind === 'chat') {
      // The settings as the chat's events keep them; the mode asked afresh.
      const held = await api('GET', `/conversations/${enc(c.id)}/permission-mode`);
      settings = c.conversation.settings || {};
      mode = (held && held.mode) || c.conversation.permission_mode;
      await Promise.all([fillChatMcp(c.id), fillPolicies(c.id)]);
    } else {
      await Promise.all([fillChatMcp(null), fillPolicies(null)]);
      const defaults = await api('GET', '/defaults');
      settings = (defaults && defaults.settings) || {};
      mode = defaults && defaults.permission_mode;
    }
  } catch (error) {
    return showError(error);
  } finally {
    panel.busy = false;
  }
  if (kind === 'chat' && chat !== c) return; // another chat was opened meanwhile
  panel.target = kind === 'chat' ? { kind, id: c.id } : { kind };
  panel.back = opener || document.activeElement;
  panel.savedMode = mode || 'auto';
  $('#settings-title').textContent = kind === 'chat' ? 'Settings for this chat' : 'Defaults for new chats';
  $('#settings-sub').textContent = kind === 'chat'
    ? `${titleOf(c.conversation)} · ${c.conversation.model}`
    : 'A new chat starts with these (a chat made with a saved agent takes the agent\'s).';
  fillPanel(settings);
  closeChatMenu();
  dialog.showModal();
  $('#set-system_prompt').focus();
}

function fillPanel(settings) {
  clearPanelErrors();
  for (const f of SETTING_FIELDS) {
    const value = settings[f.name];
    $(`#set-${f.name}`).value = value == null ? '' : String(value);
  }
  const context = $('#set-context_size-hint');
  const model = panel.target.kind === 'chat' && chat && (models.list || []).find((m) => m.id === chat.conversation.model);
  const base = SETTING_FIELDS.find((f) => f.name === 'context_size').hint;
  context.textContent = model ? `${base} At most ${Number(model.context_window).toLocaleString('en')} for ${model.id}.` : base;
  for (const radio of $$('#set-mode input[name="set-mode"]')) radio.checked = radio.value === panel.savedMode;
  $('#set-agents').checked = panel.agents = settings.agents === true;
  $('#set-yolo-words').textContent = panel.target.kind === 'chat'
    ? 'Yes, run everything in this chat without asking'
    : 'Yes, new chats run everything without asking';
  paintYolo();
}

function clearPanelErrors() {
  for (const line of $$('#settings-panel .inline-error')) { line.hidden = true; line.textContent = ''; }
  for (const input of $$('#settings-panel [aria-invalid]')) input.removeAttribute('aria-invalid');
}

/** A field's value for chatd: null when empty (unset), a number when it reads as one, else the text (chatd names it). */
function fieldValue(f) {
  const raw = $(`#set-${f.name}`).value;
  const text = raw.trim();
  if (!text) return null;
  if (f.kind === 'text') return raw;
  if (f.kind === 'choice') return text;
  return /^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i.test(text) ? Number(text) : text;
}

/** Shows a refusal by the field it names (`settings.temperature`, `mode`), else under the form. */
function showPanelError(error) {
  const field = String((error.detail && error.detail.field) || '');
  const name = field.startsWith('settings.') ? field.slice('settings.'.length)
    : (field === 'mode' || field === 'permission_mode') ? 'mode' : /^policies\b/.test(field) ? 'pol' : null;
  const line = name && $(`#set-${name}-error`);
  if (!line) return showInlineError($('#settings-error'), error);
  showInlineError(line, error);
  if (name === 'pol') $('#set-pol-list').open = true;
  const input = name === 'mode' ? $('#set-mode input[name="set-mode"]:checked')
    : name === 'pol' ? document.getElementById(`set-pol-${field.slice(9)}`) || $('#set-pol select') : $(`#set-${name}`);
  if (input) {
    if (name !== 'mode') input.setAttribute('aria-invalid', 'true');
    input.focus();
  }
  line.scrollIntoView({ block: 'nearest' }); // the words under the field are seen too
}

async function savePanel() {
  const target = panel.target;
  if (!target || panel.busy) return;
  clearPanelErrors();
  const settings = Object.fromEntries(SETTING_FIELDS.map((f) => [f.name, fieldValue(f)]));
  const mode = chosenMode() || panel.savedMode;
  const agents = $('#set-agents').checked;
  if (agents !== panel.agents) settings.agents = agents; // else what stands under it (a saved agent's) holds
  if (mode === 'yolo' && panel.savedMode !== 'yolo' && !$('#set-yolo-sure').checked) {
    showInlineError($('#set-mode-error'), 'Yolo runs everything without asking: tick the box to confirm.');
    $('#set-yolo-sure').focus();
    return $('#set-mode-error').scrollIntoView({ block: 'nearest' });
  }
  panel.busy = true;
  $('#settings-save').disabled = true;
  try {
    if (target.kind === 'chat') {
      const updated = await api('PATCH', `/conversations/${enc(target.id)}`, { settings });
      const shown = chat && chat.id === target.id && updated;
      if (shown) { chat.conversation = updated; renderTitle(); }
      if (mode !== panel.savedMode) {
        await thenSave('The settings were', 'the mode was', () => api('PUT', `/conversations/${enc(target.id)}/permission-mode`, { mode }));
        if (shown) { chat.conversation = Object.assign(chat.conversation, { permission_mode: mode }); renderTitle(); }
      }
      await thenSave('The settings were', 'the MCP switches were', () => saveChatMcp(target.id));
      await thenSave('The settings were', 'the tool permissions were', () => savePolicies(target.id));
    } else {
      await api('PATCH', '/defaults', { settings, permission_mode: mode });
      await thenSave('The defaults were', 'the tool permissions were', () => savePolicies(null));
    }
  } catch (error) {
    if (error.status === 401 || error.lost) return showError(error);
    return showPanelError(error);
  } finally {
    panel.busy = false;
    $('#settings-save').disabled = false;
  }
  closePanel();
  showToast(target.kind === 'chat' ? 'Saved: the chat uses these from its next request.' : 'Saved: new chats start with these.');
}

/** A later route of the save, one after the other: its refusal says which half was kept. */
async function thenSave(kept, what, step) {
  try {
    await step();
  } catch (error) {
    if (!error.lost && error.status !== 401) error.message = `${kept} saved; ${what} not: ${error.message}`;
    throw error;
  }
}

/* -- tool permissions -- */

/** The panel's fieldset for the tool policies, its rows in a disclosure (filled when the panel opens). */
function policiesBox() {
  return el('fieldset', { id: 'set-pol', class: 'field', 'aria-describedby': 'set-pol-hint set-pol-error' },
    el('legend', { text: 'Tool permissions' }),
    el('p', { id: 'set-pol-hint', class: 'hint muted', text: 'Always runs the tool without asking; Ask asks before each call in every mode (a trigger\'s or bot\'s run is refused it); Never takes it away. Else the permission mode decides.' }),
    el('details', { id: 'set-pol-list' }, el('summary'), el('div', { id: 'set-pol-rows' })),
    el('p', { id: 'set-pol-error', class: 'inline-error', role: 'alert', hidden: true }));
}

/** A tool's description as a short line: its first sentence, cut at 80 characters. */
function shortLine(text) {
  const line = String(text || '').split(/(?<=\.)\s/)[0];
  return line.length > 80 ? `${line.slice(0, 79)}…` : line;
}

/** Fills the rows for chat `id` (null: the defaults, the box's own): each built-in tool with its choice. */
async function fillPolicies(id) {
  const at = id ? `/conversations/${enc(id)}` : '';
  const [view, held] = await Promise.all([api('GET', id ? `${at}/tools` : '/draft/tools'), api('GET', `${at}/tools/policies`)]);
  const own = panel.policies = (held && held.policies) || {};
  const box = (id && held && held.box) || {};
  const builtins = ((view && view.tools) || []).filter((t) => t.source === 'builtin');
  $('#set-pol-rows').replaceChildren(...builtins.map((t) => {
    const sid = `set-pol-${t.name}`;
    const select = el('select', { id: sid, 'data-tool': t.name },
      el('option', { value: '', text: box[t.name] ? `Box: ${box[t.name]}` : 'Mode decides' }),
      ...['always', 'ask', 'never'].map((p) => el('option', { value: p, text: p[0].toUpperCase() + p.slice(1) })));
    select.value = own[t.name] || '';
    return el('div', { class: 'mode-row' }, el('label', { for: sid, title: t.description }, el('strong', { text: t.name }), ` ${shortLine(t.description)}`), select);
  }));
  const set = builtins.filter((t) => own[t.name] || box[t.name]).length;
  $('#set-pol-list summary').textContent = `${builtins.length} built-in tools${set ? ` · ${set} set` : ''}`;
  $('#set-pol-list').open = set > 0; // what holds is seen; else the list stays folded
}

/** PUTs the rows' choices (over the entries not shown, an MCP tool's) when they changed; throws chatd's refusal. */
async function savePolicies(id) {
  const rows = $$('#set-pol-rows select');
  const shown = new Set(rows.map((s) => s.dataset.tool));
  const next = Object.fromEntries(Object.entries(panel.policies).filter(([tool]) => !shown.has(tool)));
  for (const s of rows) if (s.value) next[s.dataset.tool] = s.value;
  const key = (map) => JSON.stringify(Object.entries(map).sort());
  if (key(next) === key(panel.policies)) return;
  await api('PUT', `${id ? `/conversations/${enc(id)}` : ''}/tools/policies`, { policies: next });
  panel.policies = next;
}

function closePanel() {
  const dialog = $('#settings-panel');
  if (dialog.open) dialog.close();
}

/** The dialog closed (Cancel, Esc, Save, the backdrop): the focus goes back to what opened it. */
function onPanelClosed() {
  panel.target = null;
  const back = panel.back;
  panel.back = null;
  if (back && back.isConnected && typeof back.focus === 'function') back.focus();
}

/* -- init -- */

function initSettings() {
  buildPanel();
  $('#model-pick').addEventListener('change', pickModel);
  $('#settings-open').addEventListener('click', (e) => openPanel('chat', e.currentTarget));
  $('#defaults-open').addEventListener('click', (e) => openPanel('defaults', e.currentTarget));
  const dialog = $('#settings-panel');
  dialog.addEventListener('close', onPanelClosed);
  // Esc is the panel's alone: the drawer under it (app.js closes it on Esc) keeps the button focus goes back to.
  dialog.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape' || e.isComposing) return;
    e.preventDefault();
    e.stopPropagation();
    closePanel();
  });
  dialog.addEventListener('cancel', (e) => { e.preventDefault(); closePanel(); });
  dialog.addEventListener('click', (e) => { if (e.target === e.currentTarget) closePanel(); }); // the backdrop
}
