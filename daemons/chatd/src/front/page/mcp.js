/*
 * tandem — the web page's MCP servers: the owner's MCP connectors (chatd's
 * /mcp-connectors routes).
 *
 *   panel    one dialog (a sheet on a phone), opened from the sidebar's
 *            "MCP servers": each connector with its state in words, where
 *            it points (the host only), why its last test failed, its tools
 *            with their descriptions, a switch, Test and Remove (asked
 *            first: it forgets the saved token and headers).
 *   add      name, then an address with a token (a password field) and
 *            other headers (one `Name: value` a line), or a command (run in
 *            each chat's sandbox) with its arguments (one a line) and its
 *            environment (`NAME=value` lines). "Save and test" saves it switched off,
 *            tests it, and offers "Turn on" when the server connected. A
 *            refusal is shown under the field chatd names; nothing is kept.
 *            The token and headers are sent once and never shown again.
 *   chat     the chat's settings panel (settings.js) holds a switch per
 *            connector for that chat alone (GET …/tools, PUT …/mcp on Save)
 *            and the opt-in "Saved agents" (PUT …/builtins);
 *            a connector off for the whole box or not named by the chat's
 *            agent shows why, unswitchable.
 */
'use strict';

const MCP_STATES = {
  connected: 'Connected',
  needs_sign_in: 'Needs sign-in',
  cant_connect: "Can't connect",
  untested: 'Not tested',
  off: 'Off',
};

const mcp = { list: [], back: null, busy: false, confirming: null, offered: null };

/** The panel's frame, made once: the list, then the add form. */
function buildMcp() {
  const field = (id, label, input, hint) => el('div', { class: 'field', 'data-field': id },
    el('label', { for: `mcp-${id}`, text: label }),
    input,
    hint ? el('p', { id: `mcp-${id}-hint`, class: 'hint muted', text: hint }) : null,
    el('p', { id: `mcp-${id}-error`, class: 'inline-error', role: 'alert', hidden: true }));
  const described = (id) => ({ 'aria-describedby': `mcp-${id}-hint mcp-${id}-error` });
  const form = el('form', { id: 'mcp-form', novalidate: true },
    el('h3', { text: 'Add a server' }),
    field('name', 'Name', el('input', { id: 'mcp-name', type: 'text', autocomplete: 'off', maxlength: '60', ...described('name') }),
      'Unique among your servers, 60 characters at most.'),
    field('transport', 'Kind', el('select', { id: 'mcp-transport', ...described('transport') },
      el('option', { value: 'http', text: 'A remote server, by its address' }),
      el('option', { value: 'stdio', text: 'A command, run for each chat' })),
    'A command runs without a shell, in each chat\'s sandbox or (with none) through hostexecd, out of the chat\'s files\' and commands\' reach.'),
    field('command', 'Command', el('input', { id: 'mcp-command', type: 'text', autocomplete: 'off', spellcheck: 'false',
      placeholder: 'npx', ...described('command') }), 'One program: a name on the sandbox\'s (or hostexecd\'s) PATH, or a path.'),
    field('args', 'Arguments', el('textarea', { id: 'mcp-args', rows: '2', spellcheck: 'false',
      placeholder: '-y\n@modelcontextprotocol/server-everything', ...described('args') }), 'One a line.'),
    field('env', 'Environment', el('textarea', { id: 'mcp-env', rows: '2', spellcheck: 'false',
      placeholder: 'API_KEY=…', ...described('env') }), 'One NAME=value a line. Stored sealed, never shown again.'),
    field('url', 'Address', el('input', { id: 'mcp-url', type: 'url', autocomplete: 'off', spellcheck: 'false',
      placeholder: 'https://mcp.example.com/mcp', ...described('url') }),
    'http:// or https://, no user name or password. Public addresses only, unless the box allows private ones.'),
    field('token', 'Token', el('input', { id: 'mcp-token', type: 'password', autocomplete: 'off', ...described('token') }),
      'Sent as Authorization: Bearer. Stored sealed, never shown again.'),
    field('headers', 'Other headers', el('textarea', { id: 'mcp-headers', rows: '2', spellcheck: 'false',
      placeholder: 'X-Team: blue', ...described('headers') }), 'One Name: value a line. Stored sealed, never shown again.'),
    el('p', { id: 'mcp-form-error', class: 'inline-error', role: 'alert', hidden: true }),
    el('div', { class: 'sheet-foot' },
      el('button', { type: 'submit', class: 'primary', id: 'mcp-save', text: 'Save and test' })));
  form.addEventListener('submit', (e) => { e.preventDefault(); addMcp(); });
  form.querySelector('#mcp-transport').addEventListener('change', () => showMcpKind());
  $('#mcp-panel').replaceChildren(
    el('div', { class: 'sheet-head' },
      el('h2', { id: 'mcp-title', text: 'MCP servers' }),
      button('quiet', '✕', () => closeMcp(), { id: 'mcp-close', 'aria-label': 'Close the MCP servers' })),
    el('div', { class: 'sheet-body' },
      el('p', { class: 'muted', text: 'Tool servers for your chats. A server\'s token and headers are sealed on the box and never shown again.' }),
      el('p', { id: 'mcp-status', class: 'muted', role: 'status' }),
      el('ul', { id: 'mcp-list', class: 'mcp-list', 'aria-label': 'Your MCP servers' }),
      form));
}

async function openMcp(opener) {
  const dialog = $('#mcp-panel');
  if (dialog.open) return;
  mcp.back = opener || document.activeElement;
  dialog.showModal();
  $('#mcp-close').focus();
  await loadMcp();
}

function closeMcp() {
  const dialog = $('#mcp-panel');
  if (dialog.open) dialog.close();
}

async function loadMcp() {
  $('#mcp-status').textContent = 'Loading…';
  try {
    const answer = await api('GET', '/mcp-connectors');
    mcp.list = (answer && answer.connectors) || [];
    $('#mcp-status').textContent = mcp.list.length ? '' : 'No servers yet: add one below.';
  } catch (error) {
    $('#mcp-status').textContent = '';
    return showError(error);
  }
  renderMcp();
}

/** Shows the add form's fields of the kind picked, hides the others'. */
function showMcpKind() {
  const stdio = $('#mcp-transport').value === 'stdio';
  for (const id of ['url', 'token', 'headers']) $(`#mcp-form [data-field="${id}"]`).hidden = stdio;
  for (const id of ['command', 'args', 'env']) $(`#mcp-form [data-field="${id}"]`).hidden = !stdio;
}

/** One row per connector. */
function renderMcp() {
  $('#mcp-list').replaceChildren(...mcp.list.map(mcpRow));
}

function mcpRow(c) {
  const id = c.id;
  const saved = [c.has_token && 'token', c.has_headers && 'headers', c.has_env && 'environment'].filter(Boolean);
  // Where it points: an address's host, or a command line.
  const where = c.transport === 'stdio' ? [c.command, ...(c.args || [])].join(' ') : c.host;
  const tools = Array.isArray(c.tools) ? c.tools : [];
  const row = el('li', { class: `mcp-row state-${c.state}`, 'data-id': id },
    el('div', { class: 'mcp-line' },
      el('strong', { class: 'mcp-name', text: c.name }),
      el('span', { class: 'mcp-host muted', text: where }),
      el('span', { class: 'mcp-state', text: MCP_STATES[c.state] || c.state })),
    c.reason ? el('p', { class: 'mcp-reason', text: c.reason }) : null,
    el('p', { class: 'muted mcp-saved', text: saved.length ? `Saved: ${saved.join(' and ')}` : 'No secrets saved' }));
  if (tools.length) {
    row.append(el('details', { class: 'mcp-tools' },
      el('summary', { text: `${tools.length} tool${tools.length === 1 ? '' : 's'}` }),
      el('ul', {}, ...tools.map((t) => el('li', {},
        el('code', { text: t.name }), t.description ? ` ${t.description}` : '')))));
  }
  const toggle = el('input', { type: 'checkbox', role: 'switch', id: `mcp-on-${id}` });
  toggle.checked = !!c.enabled;
  toggle.addEventListener('change', () => switchMcp(id, toggle.checked));
  const actions = el('div', { class: 'mcp-actions' },
    el('label', { class: 'mcp-switch', for: `mcp-on-${id}` }, toggle, ` On`),
    button('quiet', 'Test', () => testMcp(id), { 'aria-label': `Test ${c.name}` }),
    button('quiet danger', 'Remove', () => askRemove(id), { 'aria-label': `Remove ${c.name}` }));
  if (mcp.offered === id && !c.enabled) {
    actions.append(button('primary', 'Turn on', () => switchMcp(id, true), { id: 'mcp-turn-on' }));
  }
  row.append(actions);
  if (mcp.confirming === id) {
    row.append(el('div', { class: 'mcp-confirm', role: 'alertdialog', 'aria-label': `Remove ${c.name}?` },
      el('p', { text: `Remove ${c.name}? Its saved secrets are forgotten.` }),
      button('danger', 'Remove', () => removeMcp(id), { id: 'mcp-remove-yes' }),
      button('', 'Cancel', () => { mcp.confirming = null; renderMcp(); }, { id: 'mcp-remove-no' })));
  }
  return row;
}

/** Replaces one connector in the list by chatd's answer. */
function putMcp(c) {
  const at = mcp.list.findIndex((x) => x.id === c.id);
  if (at >= 0) mcp.list[at] = c; else mcp.list.push(c);
  renderMcp();
}

async function switchMcp(id, on) {
  try {
    putMcp(await api('POST', `/mcp-connectors/${enc(id)}/${on ? 'enable' : 'disable'}`));
    mcp.offered = null;
    renderMcp();
  } catch (error) {
    showError(error);
    await loadMcp(); // the switch shows what chatd holds
  }
}

async function testMcp(id) {
  const row = $(`#mcp-list [data-id="${CSS.escape(id)}"]`);
  if (row) row.setAttribute('aria-busy', 'true');
  $('#mcp-status').textContent = 'Connecting to the server…';
  try {
    const tested = await api('POST', `/mcp-connectors/${enc(id)}/test`);
    // The row first, then the line that says so: both tell the same test.
    putMcp(await api('GET', `/mcp-connectors/${enc(id)}`));
    $('#mcp-status').textContent = tested && tested.ok
      ? `Connected: ${tested.tools.length} tools.`
      : `Not connected: ${(tested && tested.reason) || 'no reason given'}`;
    return tested;
  } catch (error) {
    $('#mcp-status').textContent = '';
    showError(error);
    return null;
  } finally {
    if (row) row.removeAttribute('aria-busy');
  }
}

function askRemove(id) {
  mcp.confirming = id;
  renderMcp();
  $('#mcp-remove-no').focus();
}

async function removeMcp(id) {
  mcp.confirming = null;
  try {
    await api('DELETE', `/mcp-connectors/${enc(id)}`);
    mcp.list = mcp.list.filter((c) => c.id !== id);
    renderMcp();
    $('#mcp-status').textContent = 'Removed.';
  } catch (error) {
    showError(error);
  }
}

/** `Name: value` (or `NAME=value`) lines → an object; an unreadable line
 *  is named, never its value. */
function mcpPairs(text, sep = ':') {
  const out = {};
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i += 1) {
    const line = lines[i].trim();
    if (!line) continue;
    const at = line.indexOf(sep);
    if (at < 1) throw new Error(`Line ${i + 1} is not Name${sep === ':' ? ': ' : '='}value.`);
    out[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return out;
}

function clearMcpErrors() {
  for (const line of $$('#mcp-form .inline-error')) { line.hidden = true; line.textContent = ''; }
  for (const input of $$('#mcp-form [aria-invalid]')) input.removeAttribute('aria-invalid');
}

/** Shows a refusal under the field chatd names, else under the form. */
function mcpFieldError(field, error) {
  const line = $(`#mcp-${field}-error`) || $('#mcp-form-error');
  showInlineError(line, error);
  const input = $(`#mcp-${field}`);
  if (input) { input.setAttribute('aria-invalid', 'true'); input.focus(); }
}

async function addMcp() {
  if (mcp.busy) return;
  clearMcpErrors();
  const transport = $('#mcp-transport').value;
  const body = { name: $('#mcp-name').value.trim(), transport, enabled: false };
  if (transport === 'stdio') {
    body.command = $('#mcp-command').value.trim();
    body.args = $('#mcp-args').value.split('\n').map((a) => a.trim()).filter(Boolean);
    try {
      const env = mcpPairs($('#mcp-env').value, '=');
      if (Object.keys(env).length) body.env = env;
    } catch (error) {
      return mcpFieldError('env', error.message);
    }
  } else {
    body.url = $('#mcp-url').value.trim();
    const token = $('#mcp-token').value.trim();
    if (token) body.token = token;
    try {
      const headers = mcpPairs($('#mcp-headers').value);
      if (Object.keys(headers).length) body.headers = headers;
    } catch (error) {
      return mcpFieldError('headers', error.message);
    }
  }
  mcp.busy = true;
  $('#mcp-save').disabled = true;
  try {
    const made = await api('POST', '/mcp-connectors', body);
    // The secrets leave the page's fields once chatd has them.
    $('#mcp-form').reset();
    showMcpKind();
    putMcp(made);
    const tested = await testMcp(made.id);
    if (tested && tested.ok) {
      // It connected: offer to turn it on, where the focus is.
      mcp.offered = made.id;
      renderMcp();
      $('#mcp-turn-on').focus();
    }
  } catch (error) {
    if (error.status === 401 || error.lost) return showError(error);
    const field = String((error.detail && error.detail.field) || 'form');
    return mcpFieldError(field, error);
  } finally {
    mcp.busy = false;
    $('#mcp-save').disabled = false;
  }
}

/* -- init -- */

function initMcp() {
  buildMcp();
  showMcpKind();
  $('#mcp-open').addEventListener('click', (e) => openMcp(e.currentTarget));
  const dialog = $('#mcp-panel');
  dialog.addEventListener('close', () => {
    $('#mcp-form').reset(); // a token typed and not saved leaves with the panel
    showMcpKind();
    clearMcpErrors();
    mcp.confirming = null;
    mcp.offered = null;
    const back = mcp.back;
    mcp.back = null;
    if (back && back.isConnected && typeof back.focus === 'function') back.focus();
  });
  dialog.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape' || e.isComposing) return;
    e.preventDefault();
    e.stopPropagation();
    closeMcp();
  });
  dialog.addEventListener('cancel', (e) => { e.preventDefault(); closeMcp(); });
  dialog.addEventListener('click', (e) => { if (e.target === e.currentTarget) closeMcp(); }); // the backdrop
}

/* -- one chat's servers -- */

/** The settings panel's fieldset for the chat's MCP servers, empty until filled. */
function chatMcpBox() {
  return el('fieldset', { id: 'set-mcp', class: 'field', hidden: true, 'aria-describedby': 'set-mcp-error' },
    el('legend', { text: 'Tools in this chat' }),
    el('div', { id: 'set-mcp-rows' }),
    el('p', { id: 'set-mcp-error', class: 'inline-error', role: 'alert', hidden: true }));
}

/** Fills the fieldset for chat `id` (hidden for the defaults or a box without connectors). */
async function fillChatMcp(id) {
  const box = $('#set-mcp');
  box.hidden = true;
  $('#set-mcp-rows').replaceChildren();
  if (!id) return;
  const view = await api('GET', `/conversations/${enc(id)}/tools`);
  const servers = (view && view.mcp) || [], opts = (view && view.opt_in) || [];
  if (!servers.length && !opts.length) return;
  $('#set-mcp-rows').replaceChildren(...opts.map((g) => {
    const box = el('input', { type: 'checkbox', 'data-opt': g.name });
    box.checked = g.on;
    return el('label', { class: 'mode-row' }, box, el('span', {}, el('strong', { text: 'Saved agents' }), ` ${g.reason || 'the model may start them (/agent name task)'}`));
  }), ...servers.map((c) => {
    const fixed = c.reason && c.on; // off for the box or by the agent: not this chat's to switch
    const box = el('input', { type: 'checkbox', 'data-connector': c.id });
    box.checked = c.on && !fixed;
    box.disabled = fixed;
    const why = c.reason || MCP_STATES[c.state] || c.state;
    return el('label', { class: 'mode-row' }, box, el('span', {}, el('strong', { text: c.name }), ` ${why}`));
  }));
  box.hidden = false;
}

/** Saves the chat's switches when the fieldset was shown; throws chatd's refusal. */
async function saveChatMcp(id) {
  if ($('#set-mcp').hidden) return;
  const off = $$('#set-mcp-rows input[data-connector]')
    .filter((b) => !b.disabled && !b.checked)
    .map((b) => b.dataset.connector);
  await api('PUT', `/conversations/${enc(id)}/mcp`, { off });
  const on = $$('#set-mcp-rows input[data-opt]').filter((b) => b.checked).map((b) => b.dataset.opt);
  await api('PUT', `/conversations/${enc(id)}/builtins`, { on });
}
