/*
 * tandem — the web page's skills (chatd's /skills routes; docs/api.md "Skills").
 *
 *   menu   "Skills" beside Context: a switch a skill name of the open chat
 *          (the serving layer's description and layer, "needs commands"),
 *          "N of M on", Select all, Disable all; from 9 names a search, whose
 *          buttons then change the shown ones. A change is one PUT …/skills
 *          {off} (a name off with each farther layer's id of it); a refusal
 *          shows under the list, the switches what chatd holds.
 *   panel  "Manage skills" or the sidebar's "Skills": the layers (the
 *          workspace's with a chat open), a skill behind a nearer one marked,
 *          folders that are no skill with why; yours New, Edit, Delete (asked
 *          first), a refusal under the field chatd names.
 */
'use strict';

const SKILL_LAYERS = [['workspace', 'Workspace'], ['owner', 'Yours'], ['builtin', 'Built-in']];
const SKILL_SEARCH_FROM = 9; // names from which the menu offers its search
const layerWord = (layer) => (SKILL_LAYERS.find((l) => l[0] === layer) || [0, layer])[1];
const needsExec = (s) => (s.requires || []).includes('exec');

/** view: the menu's chat's GET /skills; list: the panel's; queue: the menu's PUTs, one after another. */
const sk = { view: null, chatId: null, q: '', shown: [], queue: Promise.resolve(), list: null, inChat: false, editing: null, confirming: null, back: null };

function buildSkills() {
  const q = el('input', { id: 'skills-q', type: 'search', placeholder: 'Find a skill', 'aria-label': 'Find a skill', autocomplete: 'off' });
  q.addEventListener('input', () => { sk.q = q.value.trim().toLowerCase(); paintSkillsMenu(); });
  $('#skills-menu').replaceChildren(
    el('div', { class: 'sheet-head' },
      el('h2', { id: 'skills-menu-title', text: 'Skills in this chat' }),
      button('quiet', '✕', () => $('#skills-menu').close(), { 'aria-label': 'Close the skills' })),
    el('div', { class: 'sheet-body' },
      el('p', { id: 'skills-count', role: 'status' }),
      q,
      el('div', { class: 'mcp-actions' },
        button('', 'Select all', () => switchSkills(sk.shown, true), { id: 'skills-all' }),
        button('', 'Disable all', () => switchSkills(sk.shown, false), { id: 'skills-none' })),
      el('ul', { id: 'skills-rows', 'aria-label': 'Skills' }),
      el('p', { id: 'skills-error', class: 'inline-error', role: 'alert', hidden: true }),
      button('quiet', 'Manage skills', () => { $('#skills-menu').close(); openSkillsPanel($('#skills-open')); }, { id: 'skills-manage' })));

  const err = (id) => el('p', { id: `sk-${id}-error`, class: 'inline-error', role: 'alert', hidden: true });
  const field = (id, label, input, hint) => el('div', { class: 'field' }, el('label', { for: `sk-${id}`, text: label }), input,
    hint ? el('p', { id: `sk-${id}-hint`, class: 'hint muted', text: hint }) : null, err(id));
  const described = (id) => ({ id: `sk-${id}`, 'aria-describedby': `sk-${id}-hint sk-${id}-error` });
  const form = el('form', { id: 'sk-form', novalidate: true, hidden: true },
    el('h3', { id: 'sk-form-title' }),
    field('name', 'Name', el('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', ...described('name') }),
      'a-z, 0-9, - and _: /name runs it.'),
    field('description', 'Description', el('input', { type: 'text', autocomplete: 'off', ...described('description') }),
      'One line: when the model should use it.'),
    field('body', 'Procedure', el('textarea', { rows: '8', ...described('body') }), 'What the model does, step by step.'),
    el('div', { class: 'field' }, el('label', { class: 'skills-check' },
      el('input', { type: 'checkbox', id: 'sk-requires', 'aria-describedby': 'sk-requires-error' }),
      'Needs commands (it runs them: a chat without any cannot use it)'), err('requires')),
    err('form'),
    el('div', { class: 'sheet-foot' },
      button('quiet', 'Cancel', () => editSkill(), { id: 'sk-cancel' }),
      el('button', { type: 'submit', class: 'primary', id: 'sk-save', text: 'Save' })));
  form.addEventListener('submit', (e) => { e.preventDefault(); saveSkill(); });
  $('#skills-panel').replaceChildren(
    el('div', { class: 'sheet-head' },
      el('h2', { id: 'skills-title', text: 'Skills' }),
      button('quiet', '✕', () => $('#skills-panel').close(), { id: 'skills-close', 'aria-label': 'Close the skills' })),
    el('div', { class: 'sheet-body' },
      el('p', { class: 'muted', text: 'A skill teaches the model a job: it loads one whose description fits, or you run it with /name. The nearest layer wins a name.' }),
      el('div', { class: 'mcp-actions' }, button('', 'New skill', () => editSkill(null), { id: 'sk-new' })),
      el('p', { id: 'sk-status', class: 'muted', role: 'status' }),
      el('div', { id: 'sk-layers' }),
      form));
}

/* -- menu -- */

/** The view's skills a name each, by name: [name, its skills, nearest first]. */
function skillNames(view) {
  const by = new Map();
  for (const s of view.skills || []) by.set(s.name, [...(by.get(s.name) || []), s]);
  return [...by].sort((a, b) => (a[0] < b[0] ? -1 : 1));
}

function skillSwitch([name, all]) {
  const s = all.find((x) => x.on) || all[0];
  const box = el('input', { type: 'checkbox', id: `skill-on-${name}`, 'data-name': name });
  box.checked = all.some((x) => x.on);
  box.addEventListener('change', () => switchSkills([name], box.checked));
  const where = [layerWord(s.layer), needsExec(s) && 'needs commands'].filter(Boolean).join(' · ');
  return el('li', { title: s.description }, el('label', {}, box, el('span', {},
    el('strong', { text: name }), el('span', { class: 'skill-desc', text: s.description }),
    el('span', { class: 'muted skill-where', text: where }))));
}

function paintSkillsMenu() {
  const view = sk.view;
  if (!view) return;
  const names = skillNames(view);
  const q = $('#skills-q');
  q.hidden = names.length < SKILL_SEARCH_FROM;
  const words = q.hidden ? '' : sk.q;
  const shown = names.filter(([name, all]) => !words || name.includes(words)
    || all.some((s) => s.description.toLowerCase().includes(words)));
  sk.shown = shown.map(([name]) => name);
  $('#skills-count').textContent = `${view.on} of ${names.length} on`;
  $('#skills-all').textContent = words ? 'Select shown' : 'Select all';
  $('#skills-none').textContent = words ? 'Disable shown' : 'Disable all';
  const focused = document.activeElement && document.activeElement.id;
  $('#skills-rows').replaceChildren(...(shown.length ? shown.map(skillSwitch)
    : [el('li', { class: 'muted', text: names.length ? 'No skill matches.' : 'No skills.' })]));
  const again = focused && document.getElementById(focused); // a switch rebuilt keeps the focus
  if (again && again !== document.activeElement) again.focus();
}

async function loadSkillsMenu(c) {
  try {
    const view = await api('GET', `/skills?conversation_id=${enc(c.id)}`);
    if (chat === c) sk.view = view;
  } catch (error) {
    showError(error);
  }
}

/** Switches `names` on or off in the open chat: one PUT of the chat's whole list, once the one before answered. */
function switchSkills(names, on) {
  const c = chat;
  if (!c || !names.length) return;
  sk.queue = sk.queue.then(async () => {
    if (!sk.view || chat !== c) return;
    const skills = sk.view.skills || [];
    const of = (n) => skills.filter((s) => s.name === n);
    // A switch naming no skill now (its folder gone) would refuse the whole list: it goes.
    const known = (o) => skills.some((s) => s.name === o || s.id === o);
    const mine = (o) => names.some((n) => o === n || of(n).some((s) => s.id === o));
    const off = (sk.view.off || []).filter((o) => known(o) && !mine(o));
    if (!on) for (const n of names) off.push(n, ...of(n).slice(1).map((s) => s.id));
    $('#skills-error').hidden = true;
    try {
      const view = await api('PUT', `/conversations/${enc(c.id)}/skills`, { off });
      if (chat === c) sk.view = view;
    } catch (error) {
      if (error.lost || error.status === 401) showError(error);
      else showInlineError($('#skills-error'), error);
      await loadSkillsMenu(c); // the switches show what chatd holds
    }
    paintSkillsMenu();
  });
}

async function openSkillsMenu() {
  const c = chat;
  const dialog = $('#skills-menu');
  if (!c || dialog.open) return;
  Object.assign(sk, { view: null, chatId: c.id, q: '' });
  $('#skills-q').value = '';
  $('#skills-error').hidden = true;
  $('#skills-count').textContent = 'Loading…';
  $('#skills-rows').replaceChildren();
  dialog.showModal();
  await loadSkillsMenu(c);
  paintSkillsMenu();
}

/** The composer's Skills button follows the open chat (settings.js renderChatTools); the menu of another chat closes. */
function skillsFollow(c) {
  $('#skills-open').hidden = !c;
  if ((!c || c.id !== sk.chatId) && $('#skills-menu').open) $('#skills-menu').close();
}

function closeSkills() {
  for (const d of [$('#skills-menu'), $('#skills-panel')]) if (d.open) d.close();
}

/* -- panel -- */

async function loadSkillsPanel() {
  const c = chat;
  $('#sk-status').textContent = 'Loading…';
  try {
    sk.list = await api('GET', `/skills${c ? `?conversation_id=${enc(c.id)}` : ''}`);
    sk.inChat = !!c;
  } catch (error) {
    $('#sk-status').textContent = '';
    return showError(error);
  }
  $('#sk-status').textContent = '';
  paintSkillsPanel();
}

function skillItem(s) {
  const owner = s.layer === 'owner';
  const row = el('li', { class: 'mcp-row', 'data-id': s.id },
    el('div', { class: 'mcp-line' }, el('strong', { text: s.name }),
      el('span', { class: 'muted', text: [needsExec(s) && 'needs commands', s.files && `${s.files} file${s.files === 1 ? '' : 's'}`].filter(Boolean).join(' · ') }),
      s.shadowed_by ? el('span', { class: 'mcp-state', text: `behind ${s.shadowed_by}` }) : null),
    el('p', { class: 'ag-desc', text: s.description }),
    owner ? el('div', { class: 'mcp-actions' },
      button('quiet', 'Edit', () => editSkill(s), { 'aria-label': `Edit ${s.name}` }),
      button('quiet danger', 'Delete', () => { sk.confirming = s.name; paintSkillsPanel(); $('#sk-delete-no').focus(); },
        { 'aria-label': `Delete ${s.name}` })) : null);
  if (owner && sk.confirming === s.name) {
    row.append(el('div', { class: 'mcp-confirm', role: 'alertdialog', 'aria-label': `Delete ${s.name}?` },
      el('p', { text: `Delete ${s.name}? Its folder goes to the trash of your skills' folder.` }),
      button('danger', 'Delete', () => deleteSkill(s.name), { id: 'sk-delete-yes' }),
      button('', 'Cancel', () => { sk.confirming = null; paintSkillsPanel(); $('#sk-new').focus(); }, { id: 'sk-delete-no' })));
  }
  return row;
}

function paintSkillsPanel() {
  const all = sk.list.skills || [];
  const where = { workspace: "In the chat's .skills folder.", owner: `In ${sk.list.owner_dir}.`, builtin: 'Built into chatd.' };
  const layers = SKILL_LAYERS.filter(([layer]) => sk.inChat || layer !== 'workspace').map(([layer, word]) => {
    const mine = all.filter((s) => s.layer === layer);
    return el('section', { class: 'skills-layer', 'data-layer': layer, 'aria-labelledby': `sk-h-${layer}` },
      el('h3', { id: `sk-h-${layer}`, text: word }),
      el('p', { class: 'muted', text: where[layer] }),
      mine.length ? el('ul', { class: 'mcp-list' }, ...mine.map(skillItem)) : el('p', { class: 'muted', text: 'None.' }));
  });
  const problems = sk.list.problems || [];
  if (problems.length) {
    layers.push(el('section', { class: 'skills-problems', 'aria-labelledby': 'sk-h-problems' },
      el('h3', { id: 'sk-h-problems', text: 'Folders that are no skill' }),
      el('ul', {}, ...problems.map((p) => el('li', {}, el('strong', { text: `${layerWord(p.layer)} · ${p.folder}` }), `: ${p.why}`)))));
  }
  $('#sk-layers').replaceChildren(...layers);
}

function clearSkillErrors() {
  for (const line of $$('#sk-form .inline-error')) { line.hidden = true; line.textContent = ''; }
  for (const input of $$('#sk-form [aria-invalid]')) input.removeAttribute('aria-invalid');
}

/** The form for your skill `s`: null for a new one, undefined hides it. */
async function editSkill(s) {
  clearSkillErrors();
  sk.editing = s || null;
  $('#sk-form').hidden = s === undefined;
  if (s === undefined) return $('#sk-new').focus();
  let full = { name: '', description: '', body: '', requires: [] };
  if (s) {
    try {
      full = await api('GET', `/skills/${enc(s.name)}`);
    } catch (error) {
      $('#sk-form').hidden = true;
      return showError(error);
    }
  }
  $('#sk-form-title').textContent = s ? `Edit ${s.name}` : 'New skill';
  $('#sk-name').value = full.name;
  $('#sk-name').disabled = !!s; // a skill is not renamed
  $('#sk-description').value = full.description;
  $('#sk-body').value = full.body || '';
  $('#sk-requires').checked = needsExec(full);
  $(s ? '#sk-description' : '#sk-name').focus();
}

async function saveSkill() {
  clearSkillErrors();
  const s = sk.editing;
  const body = { description: $('#sk-description').value.trim(), body: $('#sk-body').value, requires: $('#sk-requires').checked ? ['exec'] : [] };
  if (!s) body.name = $('#sk-name').value.trim();
  $('#sk-save').disabled = true;
  try {
    await api(s ? 'PUT' : 'POST', s ? `/skills/${enc(s.name)}` : '/skills', body);
    editSkill();
    await loadSkillsPanel();
    $('#sk-status').textContent = s ? `Saved ${s.name}.` : `Added ${body.name}.`;
  } catch (error) {
    if (error.status === 401 || error.lost) return showError(error);
    const field = error.type === 'exists' ? 'name' : String((error.detail && error.detail.field) || 'form');
    showInlineError($(`#sk-${field}-error`) || $('#sk-form-error'), error);
    const input = $(`#sk-${field}`);
    if (input) { input.setAttribute('aria-invalid', 'true'); input.focus(); }
  } finally {
    $('#sk-save').disabled = false;
  }
}

async function deleteSkill(name) {
  sk.confirming = null;
  let said = `Deleted ${name}.`;
  try {
    await api('DELETE', `/skills/${enc(name)}`);
    if (sk.editing && sk.editing.name === name) editSkill();
  } catch (error) {
    said = '';
    showError(error);
  }
  await loadSkillsPanel();
  $('#sk-status').textContent = said;
  $('#sk-new').focus();
}

function openSkillsPanel(opener) {
  const dialog = $('#skills-panel');
  if (dialog.open) return;
  closeDrawer(); // on a phone the focus goes back to the menu button
  sk.back = opener || document.activeElement;
  sk.confirming = null;
  sk.editing = null;
  $('#sk-form').hidden = true;
  $('#sk-layers').replaceChildren();
  dialog.showModal();
  $('#skills-close').focus();
  loadSkillsPanel();
}

function initSkills() {
  buildSkills();
  $('#skills-open').addEventListener('click', openSkillsMenu);
  $('#skills-panel-open').addEventListener('click', (e) => openSkillsPanel(e.currentTarget));
  const menu = $('#skills-menu');
  const dialog = $('#skills-panel');
  menu.addEventListener('close', () => { if (!dialog.open && !$('#skills-open').hidden) $('#skills-open').focus(); });
  dialog.addEventListener('close', () => {
    sk.confirming = null;
    const back = sk.back;
    sk.back = null;
    if (back && back.isConnected && !back.hidden) back.focus();
  });
  for (const d of [menu, dialog]) d.addEventListener('click', (e) => { if (e.target === e.currentTarget) d.close(); }); // the backdrop
}
