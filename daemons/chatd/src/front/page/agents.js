/*
 * tandem — the web page's saved agents (chatd's /agents routes), a dialog
 * from the sidebar's "Agents": each agent with its folder, network and the
 * chats it ran (read when opened); Chat with it, Edit, Export (a link: the
 * session cookie is its auth), Delete (asked first); the form (on edit an
 * untouched folder is not sent, so kept); Import with its warnings;
 * Templates (shown while there is no agent).
 */
'use strict';

const ag = { list: [], editing: null, back: null, confirming: null };
const agPanel = () => $('#agents-panel');

function buildAgents() {
  const err = (id) => el('p', { id: `ag-${id}-error`, class: 'inline-error', role: 'alert', hidden: true });
  const field = (id, label, ...inputs) => el('div', { class: 'field' },
    el('label', { for: `ag-${id}`, text: label }), ...inputs, err(id));
  const input = (id, more = {}) => el('input', { id: `ag-${id}`, type: 'text', autocomplete: 'off',
    spellcheck: 'false', 'aria-describedby': `ag-${id}-error`, ...more });
  const select = (id, pairs, more = {}) => el('select', { id: `ag-${id}`, ...more },
    ...pairs.map(([value, text]) => el('option', { value, text })));
  const form = el('form', { id: 'ag-form', novalidate: true },
    el('h3', { id: 'ag-form-title', text: 'Add an agent' }),
    field('name', 'Name', input('name', { maxlength: '100' })),
    field('description', 'Description', input('description', { maxlength: '1000' })),
    field('instructions', 'Instructions', el('textarea', { id: 'ag-instructions', rows: '4', 'aria-describedby': 'ag-instructions-error' })),
    field('model', 'Model', input('model', { placeholder: "empty: chatd's default" })),
    field('tools', 'Tools', select('tools-mode', [['all', 'Every tool'], ['list', 'Only these']], { 'aria-label': 'Which tools' }),
      input('tools', { placeholder: 'read_file, web_search', 'aria-label': 'Tools, comma-separated' })),
    field('folder', 'Folder', input('folder', { placeholder: 'empty: no folder' }),
      select('folder-mode', [['read', 'Read only'], ['write', 'Read and write'], ['none', 'No folder']], { 'aria-label': 'Folder mode' })),
    field('network', 'Network', select('network', [['', 'Default'], ['off', 'Off'], ['registries', 'Package registries'], ['all', 'All']])),
    err('form'),
    el('div', { class: 'sheet-foot' },
      button('quiet', 'Cancel', () => editAgent(null), { id: 'ag-cancel' }),
      el('button', { type: 'submit', class: 'primary', id: 'ag-save', text: 'Save' })));
  form.addEventListener('submit', (e) => { e.preventDefault(); saveAgent(); });
  const file = el('input', { id: 'ag-import-input', type: 'file', accept: '.json,application/json', hidden: true });
  file.addEventListener('change', () => { if (file.files[0]) importAgent(file.files[0]); file.value = ''; });
  agPanel().replaceChildren(
    el('div', { class: 'sheet-head' },
      el('h2', { id: 'agents-title', text: 'Agents' }),
      button('quiet', '✕', () => agPanel().close(), { id: 'agents-close', 'aria-label': 'Close the agents' })),
    el('div', { class: 'sheet-body' },
      el('div', { class: 'mcp-actions' },
        button('', 'New agent', () => editAgent(null, true), { id: 'ag-new' }),
        button('quiet', 'Templates', () => showTemplates(true), { id: 'ag-templates-open' }),
        button('quiet', 'Import', () => file.click(), { id: 'ag-import', 'aria-label': 'Import an agent file' }), file),
      el('p', { id: 'ag-status', class: 'muted', role: 'status' }),
      el('ul', { id: 'ag-warnings', 'aria-label': 'Warnings', hidden: true }),
      el('section', { id: 'ag-templates', 'aria-label': 'Templates', hidden: true }),
      el('ul', { id: 'ag-list', class: 'mcp-list', 'aria-label': 'Your agents' }),
      form));
}

async function loadAgents() {
  $('#ag-status').textContent = 'Loading…';
  try {
    ag.list = (await api('GET', '/agents')).agents || [];
  } catch (error) {
    $('#ag-status').textContent = '';
    return showError(error);
  }
  $('#ag-status').textContent = ag.list.length ? '' : 'No agents yet: add one below, or start from a template.';
  $('#ag-list').replaceChildren(...ag.list.map(agentRow));
  if (!ag.list.length) showTemplates();
}

const folderText = (f) => (!f ? 'No folder'
  : f.state === 'ok' ? `Folder: ${f.path} · ${f.mode === 'write' ? 'read and write' : 'read only'}`
    : `Folder missing${f.path ? `: ${f.path}` : ''}`);

function agentRow(a) {
  const runs = el('details', { class: 'ag-runs' }, el('summary', { text: 'Chats it ran' }), el('ul', { class: 'ag-run-list' }));
  runs.addEventListener('toggle', () => { if (runs.open) loadRuns(a.id, $('ul', runs)); });
  const row = el('li', { class: 'mcp-row ag-row', 'data-id': a.id },
    el('div', { class: 'mcp-line' }, el('strong', { class: 'ag-name', text: a.name }),
      el('span', { class: 'muted ag-network', text: `Network: ${a.network || 'default'}` })),
    a.description ? el('p', { class: 'ag-desc', text: a.description }) : null,
    el('p', { class: `ag-folder${a.folder && a.folder.state !== 'ok' ? ' inline-error' : ' muted'}`, text: folderText(a.folder) }),
    runs,
    el('div', { class: 'mcp-actions' },
      button('primary ag-chat', 'Chat with it', (e) => chatWith(a, e.currentTarget), { 'aria-label': `Chat with it: ${a.name}` }),
      button('quiet ag-edit', 'Edit', () => editAgent(a), { 'aria-label': `Edit ${a.name}` }),
      el('a', { class: 'ag-export', href: `${API}/agents/${enc(a.id)}/export`, download: '', text: 'Export', 'aria-label': `Export ${a.name}` }),
      button('quiet danger ag-delete', 'Delete', () => { ag.confirming = a.id; loadAgents().then(() => $('#ag-delete-no')?.focus()); },
        { 'aria-label': `Delete ${a.name}` })),
    el('p', { class: 'inline-error ag-error', role: 'alert', hidden: true }));
  if (ag.confirming === a.id) {
    row.append(el('div', { class: 'mcp-confirm', role: 'alertdialog', 'aria-label': `Delete ${a.name}?` },
      el('p', { text: `Delete ${a.name}? Its chats stay, without it.` }),
      button('danger', 'Delete', () => deleteAgent(a.id), { id: 'ag-delete-yes' }),
      button('', 'Cancel', () => { ag.confirming = null; loadAgents(); }, { id: 'ag-delete-no' })));
  }
  return row;
}

async function loadRuns(id, box) {
  box.replaceChildren(el('li', { class: 'muted', text: 'Loading…' }));
  try {
    const runs = (await api('GET', `/agents/${enc(id)}/runs`)).runs || [];
    box.replaceChildren(...(runs.length ? runs.map((r) => el('li', {},
      el('a', { href: chatHref(r.conversation_id), class: 'ag-run', onclick: () => agPanel().close(), text: r.title || 'New chat' }),
      el('span', { class: 'muted', text: ` · ${r.origin}${r.running ? ' · running' : ''}` })))
      : [el('li', { class: 'muted', text: 'No chats yet.' })]));
  } catch (error) {
    box.replaceChildren(el('li', { class: 'inline-error', text: error.message }));
  }
}

async function chatWith(a, target) {
  const line = $('.ag-error', target.closest('li'));
  target.disabled = true;
  try {
    const made = await api('POST', '/conversations', { agent_id: a.id });
    list.items.unshift(made);
    renderList();
    agPanel().close();
    navigate(made.id);
  } catch (error) {
    if (error.type === 'agent_folder_missing') showInlineError(line, `${error.message} Edit the agent to choose its folder again.`);
    else if (error.status >= 400 && !error.lost) showInlineError(line, error);
    else showError(error);
  } finally {
    target.disabled = false;
  }
}

/** The form for agent `a` (null: a new one); `focus`: the name gets the focus. */
function editAgent(a, focus) {
  ag.editing = a;
  clearAgentErrors();
  const f = (a && a.folder) || null;
  const set = (id, value) => { $(`#ag-${id}`).value = value; };
  set('name', a ? a.name : '');
  set('description', a ? a.description || '' : '');
  set('instructions', a ? a.instructions || '' : '');
  set('model', a ? a.model || '' : '');
  set('tools-mode', a && Array.isArray(a.tools) ? 'list' : 'all');
  set('tools', a && Array.isArray(a.tools) ? a.tools.join(', ') : '');
  set('folder', f ? f.path || '' : '');
  set('folder-mode', f ? f.mode || 'read' : 'read');
  set('network', a ? a.network || '' : '');
  $('#ag-form-title').textContent = a ? `Edit ${a.name}` : 'Add an agent';
  if (a || focus) $('#ag-name').focus();
}

function clearAgentErrors() {
  for (const line of $$('#ag-form .inline-error')) { line.hidden = true; line.textContent = ''; }
  for (const input of $$('#ag-form [aria-invalid]')) input.removeAttribute('aria-invalid');
}

async function saveAgent() {
  clearAgentErrors();
  const a = ag.editing;
  const v = (id) => $(`#ag-${id}`).value.trim();
  const body = { name: v('name'), description: v('description'), instructions: $('#ag-instructions').value, model: v('model') };
  if (v('tools-mode') === 'list') body.tools = v('tools').split(',').map((t) => t.trim()).filter(Boolean);
  if (v('network')) body.network = v('network');
  if (a && a.settings) body.settings = a.settings;
  const path = v('folder-mode') === 'none' ? '' : $('#ag-folder').value;
  const was = a && a.folder ? [a.folder.path || '', a.folder.mode] : ['', 'read'];
  if (!a ? path : path !== was[0] || (path && v('folder-mode') !== was[1])) {
    body.folder = path ? { path, mode: v('folder-mode') } : { path: '' };
  }
  $('#ag-save').disabled = true;
  try {
    await api(a ? 'PUT' : 'POST', a ? `/agents/${enc(a.id)}` : '/agents', body);
    editAgent(null);
    await loadAgents();
    $('#ag-status').textContent = a ? 'Saved.' : 'Added.';
  } catch (error) {
    if (error.status === 401 || error.lost) return showError(error);
    const field = String((error.detail && error.detail.field) || 'form').split('.')[0];
    const line = $(`#ag-${field}-error`) || $('#ag-form-error');
    showInlineError(line, error);
    const input = $(`#ag-${field}`);
    if (input) { input.setAttribute('aria-invalid', 'true'); input.focus(); }
  } finally {
    $('#ag-save').disabled = false;
  }
}

async function deleteAgent(id) {
  ag.confirming = null;
  try {
    await api('DELETE', `/agents/${enc(id)}`);
    if (ag.editing && ag.editing.id === id) editAgent(null);
  } catch (error) {
    showError(error);
  }
  await loadAgents();
  $('#ag-new').focus();
}

/** chatd's warnings of an import or a template, one line each. */
function agentWarnings(made, what) {
  const lines = (made && made.warnings) || [];
  $('#ag-warnings').replaceChildren(...lines.map((w) => el('li', { text: w })));
  $('#ag-warnings').hidden = !lines.length;
  return loadAgents().then(() => { $('#ag-status').textContent = `${what}: ${made.agent.name}.`; });
}

async function importAgent(file) {
  let body;
  try {
    body = JSON.parse(await file.text());
  } catch {
    return showInlineError($('#ag-form-error'), `${file.name} is not an agent file: it is not JSON.`);
  }
  try {
    await agentWarnings(await api('POST', '/agents/import', body), 'Imported');
  } catch (error) {
    showInlineError($('#ag-form-error'), error);
  }
}

async function showTemplates(focus) {
  const box = $('#ag-templates');
  box.hidden = false;
  try {
    const all = (await api('GET', '/agents/templates')).templates || [];
    box.replaceChildren(el('h3', { text: 'Templates' }), el('ul', { class: 'mcp-list' }, ...all.map((t) => el('li', { class: 'mcp-row ag-template' },
      el('div', { class: 'mcp-line' }, el('strong', { text: t.name }),
        button('quiet', 'Add', () => addTemplate(t.id), { 'aria-label': `Add ${t.name}`, 'data-template': t.id })),
      el('p', { class: 'muted', text: t.description })))));
    if (focus) $('button', box).focus();
  } catch (error) {
    showError(error);
  }
}

async function addTemplate(id) {
  try {
    await agentWarnings(await api('POST', `/agents/templates/${enc(id)}/create`, {}), 'Added');
  } catch (error) {
    showError(error);
  }
}

function initAgents() {
  buildAgents();
  const dialog = agPanel();
  $('#agents-open').addEventListener('click', () => {
    if (dialog.open) return;
    closeDrawer(); // on a phone the focus goes back to the menu button
    ag.back = document.activeElement;
    $('#ag-warnings').hidden = true;
    $('#ag-templates').hidden = true;
    editAgent(null);
    dialog.showModal();
    $('#agents-close').focus();
    loadAgents();
  });
  dialog.addEventListener('close', () => {
    ag.confirming = null;
    if (ag.back && ag.back.isConnected) ag.back.focus();
  });
  dialog.addEventListener('click', (e) => { if (e.target === e.currentTarget) dialog.close(); }); // the backdrop
}
