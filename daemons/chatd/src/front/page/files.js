/*
 * tandem — the web page's files: a tool line's change card (its files, Undo,
 * the refusal, Redo), chips under a turn's last answer for the files it made,
 * and the files pane (the list, a preview from a blob URL, Download, Delete;
 * the trash with Restore and Delete for good, each asked in place).
 */
'use strict';

/* -- files -- */

const FILE_OPS = { created: 'Created', changed: 'Changed', deleted: 'Deleted', moved: 'Moved' };
const UNDO_REFRESH_MS = 300; // the `files` events of one undo come together: one look at the list
const FETCH_FILE_MS = 60000; // a file's bytes may take longer than an API call
const PREVIEW_CHARS = 200000; // of a text file; the rest is in the download
const SNIFF_BYTES = 1024 * 1024; // an untyped file (a script, a log) up to this size is shown when it is UTF-8

const isFilesCard = (card) => !!card && typeof card === 'object' && card.kind === 'files_change' && Number.isFinite(Number(card.rev));
const cardFiles = (card) => (Array.isArray(card.files) ? card.files.filter((f) => f && typeof f.path === 'string') : []);
const baseName = (path) => String(path).split('/').pop() || 'file';

function formatBytes(n) {
  if (!(n >= 1024)) return `${Number(n) || 0} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

/* A tool line's change card: what the call changed, and Undo. */

/** Paints the card of a call that changed files; again only when the card or its undo state changed. */
function fillFilesCard(c, node, call) {
  const card = isFilesCard(call.card) ? call.card : null;
  const undo = card ? c.undo.get(Number(card.rev)) || {} : null;
  const key = card ? JSON.stringify([card.rev, undo]) : '';
  if (node.filesKey === key) return;
  node.filesKey = key;
  node.files.hidden = !card;
  if (!card) return node.files.replaceChildren();
  node.files.dataset.rev = String(card.rev);
  const files = cardFiles(card);
  node.files.replaceChildren(...[
    el('ul', { class: 'files-list' }, ...files.map((f) => el('li', { class: 'file-line', 'data-path': f.path, 'data-kind': f.kind },
      el('span', { class: 'op', text: FILE_OPS[f.op] || String(f.op) }), ' ',
      el('span', { class: 'path', text: f.path }),
      typeof f.from === 'string' ? el('span', { class: 'from', text: ` from ${f.from}` }) : null))),
    Number(card.files_more) > 0 ? el('p', { class: 'files-more', text: `+${Number(card.files_more)} more` }) : null,
    typeof card.note === 'string' ? el('p', { class: 'files-note', text: card.note }) : null,
    undoRow(c, card, undo)].filter(Boolean));
}

/**
 * Undo and what it did. `undo.state`: busy (asked), undone (`by`: the set that put the files
 * back, `skipped`), redone (`by`: the redo's set), conflict (`conflicts`: nothing was changed);
 * `error`: a refusal of another kind.
 */
function undoRow(c, card, undo) {
  const rev = Number(card.rev);
  const row = el('div', { class: 'files-undo-row' });
  if (undo.state === 'undone') {
    row.append(el('span', { class: 'files-state', text: undo.by ? `Undone (change set ${undo.by})` : 'Undone: the files already were as before' }));
    if (undo.by) row.append(button('files-redo', 'Redo', () => redoFiles(c, rev, undo.by), { disabled: undo.busy }));
    const skipped = Array.isArray(undo.skipped) ? undo.skipped : [];
    if (skipped.length) {
      row.append(el('p', { class: 'files-skipped' }, 'Left as they are: ',
        ...skipped.flatMap((s, i) => [i ? '; ' : '', el('span', { class: 'path', text: s.path }), ` ${s.reason}`])));
    }
  } else {
    row.append(button('files-undo', 'Undo', () => undoFiles(c, rev, false), { disabled: undo.state === 'busy' }));
    if (undo.state === 'redone') row.append(el('span', { class: 'files-state', text: `Redone (change set ${undo.by})` }));
  }
  if (undo.state === 'conflict') {
    const conflicts = undo.conflicts || [];
    const named = new Set(conflicts.map((x) => x.path));
    const rest = cardFiles(card).some((f) => !named.has(f.path)) || Number(card.files_more) > 0;
    row.append(el('div', { class: 'files-conflict', role: 'alert' },
      el('p', { class: 'conflict-head', text: 'Not undone: nothing was changed, because these files changed since:' }),
      el('ul', {}, ...conflicts.map((x) => el('li', { 'data-path': x.path }, el('span', { class: 'path', text: x.path }), ` ${x.reason}`))),
      rest ? button('files-undo-rest', 'Undo the rest', () => undoFiles(c, rev, true)) : null));
  }
  if (undo.error) row.append(el('p', { class: 'inline-error', text: undo.error }));
  return row;
}

/** The conflicts of a 409 `undo_conflict`: [{path, reason}]. */
function conflictsOf(error) {
  const list = error.detail && Array.isArray(error.detail.conflicts) ? error.detail.conflicts : [];
  return list.filter((x) => x && typeof x.path === 'string').map((x) => ({ path: x.path, reason: String(x.reason || 'changed since') }));
}

/** Sets what the page knows of change set `rev`'s undo and repaints its card and the chips. */
function setUndo(c, rev, state) {
  c.undo.set(rev, state);
  if (c !== chat) return;
  for (const call of c.calls.values()) if (isFilesCard(call.card) && Number(call.card.rev) === rev) refreshCall(c, call);
  renderChips(c);
}

const failureText = (error) => (error instanceof ApiError && !error.lost ? error.message : 'The chat service does not answer: try again.');

async function undoFiles(c, rev, skipConflicts) {
  setUndo(c, rev, { state: 'busy' });
  try {
    const answer = await api('POST', `/conversations/${enc(c.id)}/files/undo`, skipConflicts ? { rev, skip_conflicts: true } : { rev });
    setUndo(c, rev, { state: 'undone', by: (answer && answer.rev) || null, skipped: (answer && answer.skipped) || [] });
  } catch (error) {
    if (error instanceof ApiError && error.type === 'undo_conflict') setUndo(c, rev, { state: 'conflict', conflicts: conflictsOf(error) });
    else setUndo(c, rev, { error: failureText(error) });
  }
}

/** Redo: the undo's own set undone. */
async function redoFiles(c, rev, by) {
  const before = c.undo.get(rev) || {};
  setUndo(c, rev, { ...before, busy: true, error: undefined });
  try {
    const answer = await api('POST', `/conversations/${enc(c.id)}/files/undo`, { rev: by });
    setUndo(c, rev, { state: 'redone', by: (answer && answer.rev) || by });
  } catch (error) {
    setUndo(c, rev, { ...before, busy: false, error: failureText(error) });
  }
}

function refreshUndoSoon(c) {
  clearTimeout(c.undoTimer);
  c.undoTimer = setTimeout(() => loadUndoState(c), UNDO_REFRESH_MS);
}

/**
 * What the chat's history says was undone (another device's Undo, or this one's before a
 * reload): a set is undone while a set that undoes it is not undone itself.
 */
async function loadUndoState(c) {
  const revs = [...c.calls.values()].filter((call) => isFilesCard(call.card)).map((call) => Number(call.card.rev));
  if (!revs.length) return;
  let answer;
  try {
    answer = await api('GET', `/conversations/${enc(c.id)}/files/changes?limit=200`);
  } catch {
    return; // the cards keep their Undo; a refusal then says why
  }
  if (c !== chat) return;
  const undoers = new Map();
  const sets = (answer && answer.changes) || [];
  const pathsOf = (set) => new Set((Array.isArray(set.changes) ? set.changes : []).flatMap((x) => [x.path, x.from]).filter(Boolean));
  const touched = new Map(sets.map((set) => [set.rev, pathsOf(set)]));
  for (const set of sets) {
    const mine = touched.get(set.rev);
    for (const undone of set.undoes || []) { // a turn's undo names every set of the turn…
      // …a set whose every file Undo the rest left as it was among them: that one was not undone.
      const theirs = touched.get(undone);
      if (theirs && theirs.size && ![...theirs].some((p) => mine.has(p))) continue;
      if (!undoers.has(undone)) undoers.set(undone, []);
      undoers.get(undone).push(set.rev);
    }
  }
  const known = new Set(((answer && answer.changes) || []).map((set) => set.rev));
  const memo = new Map();
  const undoneBy = (rev) => {
    if (!memo.has(rev)) memo.set(rev, (undoers.get(rev) || []).find((u) => !undoneBy(u)) || null);
    return memo.get(rev);
  };
  for (const rev of revs) {
    const local = c.undo.get(rev) || {};
    const by = undoneBy(rev);
    // This page's word stands while the undo it saw stands.
    const stands = local.state === 'undone' && local.by && known.has(local.by) && !undoneBy(local.by);
    if (local.state === 'busy' || local.busy) continue;
    if (by && local.state !== 'undone') setUndo(c, rev, { state: 'undone', by });
    else if (!by && local.state === 'undone' && !stands) setUndo(c, rev, {});
  }
  for (const [run, turn] of [...c.turnUndo]) { // a turn's undo that was itself undone (a Redo elsewhere)
    if (turn.state === 'undone' && turn.by && undoneBy(turn.by)) setTurnUndo(c, run, null);
  }
}

/* Chips under a turn's last answer: the deliverable files the turn left made or changed. */

/**
 * Per run: `files` (path → {op, kind}, from its calls' cards in order; an undone card counts
 * for nothing) and `revs` (every card's change set).
 */
function turnFiles(c) {
  const turns = new Map();
  for (const call of c.calls.values()) {
    if (!isFilesCard(call.card)) continue;
    const run = ownerRun(c, call);
    if (!run) continue;
    if (!turns.has(run)) turns.set(run, { files: new Map(), revs: [] });
    turns.get(run).revs.push(Number(call.card.rev));
    if ((c.undo.get(Number(call.card.rev)) || {}).state === 'undone') continue;
    const { files } = turns.get(run);
    for (const f of cardFiles(call.card)) {
      const was = files.get(f.op === 'moved' && f.from ? f.from : f.path);
      if (f.op === 'moved' && f.from) files.delete(f.from);
      if (f.op === 'deleted') { files.delete(f.path); continue; }
      files.set(f.path, { op: was && was.op === 'created' ? 'created' : f.op, kind: f.kind });
    }
  }
  return turns;
}

function renderChips(c) {
  if (c !== chat) return;
  const turns = turnFiles(c);
  const last = new Map(); // run id → its last answer on the path
  for (const m of c.path) if (m.role === 'assistant' && m.run_id) last.set(m.run_id, m.id);
  for (const [id, view] of c.views) {
    const message = c.byId.get(id);
    if (!message || message.role !== 'assistant') continue;
    const turn = last.get(message.run_id) === id && turns.get(message.run_id);
    const files = turn ? [...turn.files].filter(([, f]) => f.kind === 'deliverable') : [];
    const revs = turn ? turn.revs : [];
    const where = files.map(([path]) => [chipPresence(c, path), c.chipNotes.get(path) || null]);
    const key = JSON.stringify([files, where, revs.map((rev) => (c.undo.get(rev) || {}).state), c.turnUndo.get(message.run_id)]);
    if (view.chipsKey === key) continue;
    view.chipsKey = key;
    if (view.chips) view.chips.remove();
    const chips = files.length ? el('div', { class: 'file-chips' }, ...files.map(([path, f]) => fileChip(c, path, f.op))) : null;
    const row = revs.length ? turnRow(c, message.run_id, revs) : null;
    view.chips = chips || row ? el('div', { class: 'turn-files' }, chips, row) : null;
    if (view.chips) view.node.append(view.chips);
  }
}

/** "Undo this turn" under its last answer: every change set of the run, newest first, in one undo. */
function turnRow(c, run, revs) {
  const undo = c.turnUndo.get(run) || {};
  const row = el('div', { class: 'turn-undo' });
  if (undo.state === 'undone') {
    row.append(el('span', { class: 'files-state', text: undo.by ? `Turn undone (change set ${undo.by})` : 'Turn undone: the files already were as before' }));
    if (undo.by) row.append(button('turn-redo', 'Redo', () => redoTurn(c, run, undo), { disabled: undo.busy }));
    const skipped = Array.isArray(undo.skipped) ? undo.skipped : [];
    if (skipped.length) {
      row.append(el('p', { class: 'files-skipped' }, 'Left as they are: ',
        ...skipped.flatMap((x, i) => [i ? '; ' : '', el('span', { class: 'path', text: x.path }), ` ${x.reason}`])));
    }
  } else if (revs.some((rev) => (c.undo.get(rev) || {}).state !== 'undone')) {
    row.append(button('turn-undo-button', 'Undo this turn', () => undoTurn(c, run, false), { disabled: undo.state === 'busy' }));
  }
  if (undo.state === 'conflict') {
    row.append(el('div', { class: 'files-conflict', role: 'alert' },
      el('p', { class: 'conflict-head', text: 'Not undone: nothing was changed, because these files changed since:' }),
      el('ul', {}, ...undo.conflicts.map((x) => el('li', { 'data-path': x.path }, el('span', { class: 'path', text: x.path }), ` ${x.reason}`))),
      button('turn-undo-rest', 'Undo the rest', () => undoTurn(c, run, true))));
  }
  if (undo.error) row.append(el('p', { class: 'inline-error', text: undo.error }));
  return row.childNodes.length ? row : null;
}

/** Repaints every change card and the chips: a turn's undo concerns several cards. */
function setTurnUndo(c, run, state) {
  if (state) c.turnUndo.set(run, state); else c.turnUndo.delete(run);
  if (c !== chat) return;
  for (const call of c.calls.values()) if (isFilesCard(call.card)) refreshCall(c, call);
  renderChips(c);
}

async function undoTurn(c, run, skipConflicts) {
  setTurnUndo(c, run, { state: 'busy' });
  try {
    const answer = await api('POST', `/conversations/${enc(c.id)}/files/undo`, skipConflicts ? { run, skip_conflicts: true } : { run });
    const by = (answer && answer.rev) || null;
    const skipped = Array.isArray(answer && answer.skipped) ? answer.skipped : [];
    // A tool line whose every file was left as it is was not undone.
    const left = new Set(skipped.map((x) => x.path));
    const cards = new Map([...c.calls.values()].filter((call) => isFilesCard(call.card)).map((call) => [Number(call.card.rev), call.card]));
    const whollyLeft = (card) => !!card && !(Number(card.files_more) > 0) && cardFiles(card).every((f) => left.has(f.path));
    const revs = (Array.isArray(answer && answer.undone) ? answer.undone.map(Number) : []).filter((rev) => !whollyLeft(cards.get(rev)));
    for (const rev of revs) c.undo.set(rev, { state: 'undone', by });
    setTurnUndo(c, run, { state: 'undone', by, revs, skipped });
  } catch (error) {
    if (error instanceof ApiError && error.type === 'undo_conflict') setTurnUndo(c, run, { state: 'conflict', conflicts: conflictsOf(error) });
    else setTurnUndo(c, run, { error: failureText(error) });
  }
}

async function redoTurn(c, run, undo) {
  setTurnUndo(c, run, { ...undo, busy: true, error: undefined });
  try {
    const answer = await api('POST', `/conversations/${enc(c.id)}/files/undo`, { rev: undo.by });
    for (const rev of undo.revs || []) c.undo.set(rev, { state: 'redone', by: (answer && answer.rev) || undo.by });
    setTurnUndo(c, run, null);
  } catch (error) {
    setTurnUndo(c, run, { ...undo, busy: false, error: failureText(error) });
  }
}

/** Where a chip's file is now: here, trashed (deleted, Restore can bring it back), or gone. */
function chipPresence(c, path) {
  if (!c.present || c.present.has(path)) return 'here';
  return c.trashed.has(path) ? 'trashed' : 'gone';
}

/**
 * A chip: `Created report.md · Open`; a file deleted since is struck through and says so (no
 * Open: its bytes are not there to show), with Restore while the chat's trash holds it.
 */
function fileChip(c, path, op) {
  const where = chipPresence(c, path);
  const text = el('span', { class: 'chip-text', text: `${FILE_OPS[op] || op} ${path}` });
  const sep = () => el('span', { class: 'chip-sep', text: '·', 'aria-hidden': 'true' });
  if (where === 'here') {
    return el('div', { class: 'file-chip', 'data-path': path }, text, sep(),
      button('chip-open', 'Open', () => openFilesPane(path), { 'aria-label': `Open ${path}` }));
  }
  const note = c.chipNotes.get(path) || {};
  return el('div', { class: 'file-chip deleted', 'data-path': path },
    el('s', {}, text), sep(), el('span', { class: 'chip-gone', text: 'deleted since' }),
    where === 'trashed' ? button('chip-restore', 'Restore', () => restoreChip(c, path),
      { 'aria-label': `Restore ${path} from the trash`, disabled: !!note.busy }) : null,
    note.error ? el('span', { class: 'inline-error chip-error', role: 'alert', text: note.error }) : null);
}

/** Which files are there now and which are in the trash: what the chips show. */
async function loadPresence(c) {
  let files;
  let trash;
  try {
    [files, trash] = await Promise.all([
      api('GET', `/conversations/${enc(c.id)}/files`),
      api('GET', `/conversations/${enc(c.id)}/files/trash`)]);
  } catch {
    return; // the chips stay as they were
  }
  if (c !== chat) return;
  const paths = (answer) => (Array.isArray(answer && answer.files) ? answer.files : [])
    .filter((f) => f && typeof f.path === 'string').map((f) => f.path);
  c.present = new Set(paths(files));
  c.trashed = new Set(paths(trash));
  renderChips(c);
}

function refreshPresenceSoon(c) {
  clearTimeout(c.presenceTimer);
  c.presenceTimer = setTimeout(() => { if (c === chat) loadPresence(c); }, UNDO_REFRESH_MS);
}

/** Restore on a deleted file's chip: the trash route; the chip is live again once the list has it. */
async function restoreChip(c, path) {
  c.chipNotes.set(path, { busy: true });
  renderChips(c);
  try {
    await api('POST', `/conversations/${enc(c.id)}/files/trash/restore`, { path });
    c.chipNotes.delete(path);
  } catch (error) {
    const conflict = error instanceof ApiError && error.type === 'restore_conflict';
    c.chipNotes.set(path, { error: conflict ? `Not restored: ${path} is there again; nothing was changed.`
      : error instanceof ApiError && error.status === 404 ? `${path} is not in the trash any more.` : failureText(error) });
  }
  await loadPresence(c);
  renderChips(c);
  reloadPane(c);
}

/* The files pane: the chat's files, one previewed. */

const pane = {
  open: false, items: null, ticket: 0, soon: null, path: null, url: null, frameUrl: null, previewTicket: 0,
  // A question asked in place before a delete: {what: delete | purge | empty, path}; one at a time.
  ask: null,
  askFresh: false,
  // What an action on a row answered, by path: {error} or {conflict} (a restore refused).
  notes: new Map(),
  busy: new Set(), // paths (and '*' for Empty trash) whose action is under way
  trash: null, // {files, days} as GET …/files/trash answered
  trashTicket: 0,
  freed: '', // what the last Delete for good freed, until the next action
};

function openFilesPane(path = null) {
  if (!chat) return;
  pane.open = true;
  $('#files-pane').hidden = false;
  $('#files-toggle').setAttribute('aria-expanded', 'true');
  document.body.classList.add('files-open');
  loadFiles(chat);
  if (path) previewFile(chat, path);
}

function closeFilesPane() {
  pane.open = false;
  $('#files-pane').hidden = true;
  $('#files-toggle').setAttribute('aria-expanded', 'false');
  document.body.classList.remove('files-open');
  clearFilesPane();
}

/** Files pressed: the pane opens with the focus in it (over the chat on a phone), or closes. */
function toggleFilesPane() {
  if (pane.open) return closeFilesPaneToToggle();
  openFilesPane();
  if (pane.open) $('#files-close').focus();
}

/** ✕ or Esc: the pane closes and the focus goes back on Files, not to the page's body. */
function closeFilesPaneToToggle() {
  closeFilesPane();
  $('#files-toggle').focus();
}

/** Empties the pane (another chat, or none): the list, the preview and its blob URL. */
function clearFilesPane() {
  pane.ticket += 1;
  pane.items = null;
  clearTimeout(pane.soon);
  for (const id of ['#files-made', '#files-given', '#files-working']) {
    $(id).hidden = true;
    $('ul.files', $(id)).replaceChildren();
  }
  $('#files-status').textContent = '';
  clearTrash();
  clearPreview();
  clearFound();
}

function clearPreview() {
  pane.previewTicket += 1;
  pane.path = null;
  if (pane.url) URL.revokeObjectURL(pane.url);
  if (pane.frameUrl) URL.revokeObjectURL(pane.frameUrl);
  pane.url = null;
  pane.frameUrl = null;
  const box = $('#file-preview');
  box.hidden = true;
  $('.preview-name', box).textContent = '';
  $('.preview-links', box).replaceChildren();
  $('.preview-body', box).replaceChildren();
}

function refreshFilesSoon(c) {
  clearTimeout(pane.soon);
  pane.soon = setTimeout(() => { if (pane.open && c === chat) loadFiles(c); }, UNDO_REFRESH_MS);
}

async function loadFiles(c) {
  loadTrash(c);
  const ticket = ++pane.ticket;
  if (!pane.items) $('#files-status').textContent = 'Loading…';
  let answer;
  try {
    answer = await api('GET', `/conversations/${enc(c.id)}/files`);
  } catch (error) {
    if (ticket === pane.ticket && c === chat) $('#files-status').textContent = failureText(error);
    return;
  }
  if (ticket !== pane.ticket || c !== chat || !pane.open) return;
  pane.items = Array.isArray(answer && answer.files) ? answer.files.filter((f) => f && typeof f.path === 'string') : [];
  renderFiles();
}

/** Deliverables first (made and changed, then given), working files folded under their count. */
function renderFiles() {
  const items = pane.items || [];
  const made = items.filter((f) => f.kind !== 'working' && (f.origin === 'tool' || f.origin === 'command'));
  const given = items.filter((f) => f.kind !== 'working' && !made.includes(f));
  const working = items.filter((f) => f.kind === 'working');
  for (const [id, files] of [['#files-made', made], ['#files-given', given], ['#files-working', working]]) {
    const group = $(id);
    group.hidden = !files.length;
    $('ul.files', group).replaceChildren(...files.map(fileRow));
  }
  $('summary', $('#files-working')).textContent = `Working files (${working.length})`;
  const trashed = pane.trash && pane.trash.files.length;
  $('#files-status').textContent = items.length ? ''
    : trashed ? 'No files here now: what was deleted is in the trash below.'
      : 'No files yet: what this chat is given, makes or changes is listed here.';
  markPreviewed();
}

function fileRow(f) {
  const asked = pane.ask && pane.ask.what === 'delete' && pane.ask.path === f.path;
  const note = pane.notes.get(f.path);
  return el('li', { class: 'file-row', 'data-path': f.path, 'data-kind': f.kind },
    button('file-open', f.path, () => previewFile(chat, f.path), { title: `Preview ${f.path}` }),
    el('span', { class: 'file-meta', text: formatBytes(f.size) }),
    button('file-delete', 'Delete', () => askFiles({ what: 'delete', path: f.path }),
      { 'aria-label': `Delete ${f.path}`, disabled: pane.busy.has(f.path) || asked }),
    asked ? askBox(`Move ${f.path} to the trash?`, '', 'Move to trash', () => deleteFile(chat, f.path)) : null,
    note && note.error ? el('p', { class: 'inline-error', text: note.error }) : null);
}

/* The trash: deleted files whose bytes are kept, Restore and Delete for good. */

const ORIGIN_BY = { user: 'by you', tool: 'by the model', command: 'by a command', outside: 'outside tandem' };

/** When, shortly: "just now", "5 min ago", "3 h ago", else the date. */
function whenText(iso) {
  const at = Date.parse(iso);
  if (!Number.isFinite(at)) return '';
  const s = (Date.now() - at) / 1000;
  if (s < 60) return 'just now';
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(at).toLocaleDateString();
}

function clearTrash() {
  pane.trashTicket += 1;
  Object.assign(pane, { trash: null, ask: null, freed: '' });
  pane.notes.clear();
  pane.busy.clear();
  const box = $('#files-trash');
  box.hidden = true;
  box.open = false;
  $('ul.files', box).replaceChildren();
  $('.trash-foot', box).replaceChildren();
  $('.trash-freed', box).textContent = '';
}

async function loadTrash(c) {
  const ticket = ++pane.trashTicket;
  let answer;
  try {
    answer = await api('GET', `/conversations/${enc(c.id)}/files/trash`);
  } catch {
    return; // the list above says what is wrong; the trash keeps what it showed
  }
  if (ticket !== pane.trashTicket || c !== chat || !pane.open) return;
  const files = Array.isArray(answer && answer.files) ? answer.files.filter((f) => f && typeof f.path === 'string') : [];
  pane.trash = { files, days: Number(answer && answer.days) || 0 };
  const listed = new Set(files.map((f) => f.path));
  const live = new Set((pane.items || []).map((f) => f.path));
  // A question or a note about a row that is gone goes with it.
  if (pane.ask && pane.ask.what !== 'delete' && pane.ask.path && !listed.has(pane.ask.path)) pane.ask = null;
  if (pane.ask && pane.ask.what === 'empty' && !files.length) pane.ask = null;
  for (const path of [...pane.notes.keys()]) if (!listed.has(path) && !live.has(path)) pane.notes.delete(path);
  paintPane();
}

/** "Trash (N)": folded, shown while it holds a file or has something to say. */
function renderTrash() {
  const box = $('#files-trash');
  const { files, days } = pane.trash || { files: [], days: 0 };
  box.hidden = !files.length && !pane.freed;
  $('summary', box).textContent = `Trash (${files.length})`;
  $('ul.files', box).replaceChildren(...files.map(trashRow));
  $('.trash-freed', box).textContent = pane.freed;
  const asked = pane.ask && pane.ask.what === 'empty';
  $('.trash-foot', box).replaceChildren(...(files.length ? [
    days ? el('p', { class: 'muted trash-days', text: `Deleted files are kept ${days} days, then deleted for good.` }) : null,
    button('trash-empty', 'Empty trash', () => askFiles({ what: 'empty' }), { disabled: pane.busy.has('*') || asked }),
    asked ? askBox(`Delete ${files.length === 1 ? 'the 1 file' : `all ${files.length} files`} in the trash for good?`,
      'This cannot be undone.', 'Empty trash', () => purgeTrash(chat, null)) : null,
  ].filter(Boolean) : []));
}

function trashRow(f) {
  const asked = pane.ask && pane.ask.what === 'purge' && pane.ask.path === f.path;
  const note = pane.notes.get(f.path) || {};
  const busy = pane.busy.has(f.path) || pane.busy.has('*');
  const meta = [formatBytes(f.size), whenText(f.deleted), ORIGIN_BY[f.origin] || ''].filter(Boolean).join(' · ');
  return el('li', { class: 'trash-row', 'data-path': f.path },
    el('div', { class: 'trash-line' },
      el('span', { class: 'path', text: f.path }),
      el('span', { class: 'file-meta', text: meta, title: String(f.deleted || '') })),
    el('div', { class: 'trash-buttons' },
      button('trash-restore', 'Restore', () => restoreFile(chat, f.path), { 'aria-label': `Restore ${f.path}`, disabled: busy }),
      button('trash-purge', 'Delete for good', () => askFiles({ what: 'purge', path: f.path }),
        { 'aria-label': `Delete ${f.path} for good`, disabled: busy || asked })),
    asked ? askBox(`Delete ${f.path} for good?`, 'This cannot be undone.', 'Delete for good', () => purgeTrash(chat, [f.path])) : null,
    note.conflict ? el('div', { class: 'files-conflict', role: 'alert' },
      el('p', {}, 'Not restored: ', el('span', { class: 'path', text: note.conflict }),
        ' is there again. Move or delete it first; nothing was changed.')) : null,
    note.error ? el('p', { class: 'inline-error', text: note.error }) : null);
}

/** A question asked in place (the page has no dialogs): the action, or Cancel. */
function askBox(question, warning, yes, onYes) {
  const box = el('div', { class: 'files-ask', role: 'group', 'aria-label': question },
    el('p', { class: 'ask-text' }, question, warning ? el('span', { class: 'ask-warning', text: ` ${warning}` }) : null),
    el('div', { class: 'ask-buttons' },
      button('ask-yes danger', yes, onYes),
      button('ask-no', 'Cancel', () => askFiles(null))));
  if (pane.askFresh) { // focus moves to a question once, when asked: a repaint must not take it from the composer
    pane.askFresh = false;
    requestAnimationFrame(() => { const b = $('.ask-yes', box); if (b && b.isConnected) b.focus(); });
  }
  return box;
}

function paintPane() {
  if (pane.items) renderFiles();
  renderTrash();
}

function askFiles(ask) {
  pane.ask = ask;
  pane.askFresh = !!ask;
  pane.freed = '';
  if (ask && ask.path) pane.notes.delete(ask.path);
  paintPane();
}

/** Marks `key` busy (or not) and repaints. */
function setBusy(key, on) {
  if (on) pane.busy.add(key); else pane.busy.delete(key);
  paintPane();
}

/** Reads the list and the trash again now (the `files` event comes too; this does not wait for it). */
function reloadPane(c) {
  if (c === chat) refreshPresenceSoon(c); // the chips too: a purge keeps no file from the list, yet its Restore goes
  if (pane.open && c === chat) loadFiles(c);
}

async function deleteFile(c, path) {
  if (!c) return;
  pane.ask = null;
  pane.notes.delete(path);
  setBusy(path, true);
  try {
    await api('DELETE', `/conversations/${enc(c.id)}/files?path=${enc(path)}`);
    if (pane.path === path) clearPreview();
  } catch (error) {
    pane.notes.set(path, { error: error instanceof ApiError && error.status === 404 ? `${path} is not there any more.` : failureText(error) });
  } finally {
    setBusy(path, false);
    reloadPane(c);
  }
}

async function restoreFile(c, path) {
  if (!c) return;
  pane.ask = null;
  pane.freed = '';
  pane.notes.delete(path);
  setBusy(path, true);
  try {
    await api('POST', `/conversations/${enc(c.id)}/files/trash/restore`, { path });
  } catch (error) {
    if (error instanceof ApiError && error.type === 'restore_conflict') {
      pane.notes.set(path, { conflict: (error.detail && typeof error.detail.path === 'string' && error.detail.path) || path });
    } else if (error instanceof ApiError && error.status === 404) {
      pane.notes.set(path, { error: `${path} is not in the trash any more.` });
    } else {
      pane.notes.set(path, { error: failureText(error) });
    }
  } finally {
    setBusy(path, false);
    reloadPane(c);
  }
}

/** Delete for good: `paths`, or the whole trash (null). Says what it freed. */
async function purgeTrash(c, paths) {
  if (!c) return;
  const key = paths ? paths[0] : '*';
  pane.ask = null;
  pane.freed = '';
  if (paths) pane.notes.delete(key);
  setBusy(key, true);
  try {
    const answer = await api('POST', `/conversations/${enc(c.id)}/files/trash/purge`, paths ? { paths } : {});
    const files = Number(answer && answer.files) || 0;
    const bytes = Number(answer && answer.bytes) || 0;
    const what = paths && files === 1 ? paths[0] : `${files} ${files === 1 ? 'file' : 'files'}`;
    pane.freed = bytes > 0 ? `Deleted ${what} for good. Freed ${formatBytes(bytes)}.`
      : `Deleted ${what} for good. Nothing was freed: other files still use the same bytes.`;
  } catch (error) {
    if (paths) pane.notes.set(key, { error: failureText(error) });
    else pane.freed = failureText(error);
  } finally {
    setBusy(key, false);
    reloadPane(c);
  }
}

function markPreviewed() {
  for (const row of document.querySelectorAll('#files-pane li.file-row')) row.classList.toggle('previewed', row.dataset.path === pane.path);
}

/** Fetches a file's bytes through the page's session and shows them: text, Markdown, an image; a Download always. */
async function previewFile(c, path) {
  if (!c) return;
  clearPreview();
  const ticket = pane.previewTicket;
  pane.path = path;
  markPreviewed();
  const box = $('#file-preview');
  box.hidden = false;
  $('.preview-name', box).textContent = path;
  const body = $('.preview-body', box);
  body.replaceChildren(el('p', { class: 'muted', text: 'Loading…' }));
  let blob;
  try {
    const res = await fetch(`${API}/conversations/${enc(c.id)}/files/content?path=${enc(path)}`,
      { cache: 'no-store', signal: AbortSignal.timeout(FETCH_FILE_MS) });
    if (!res.ok) throw await errorFrom(res);
    blob = await res.blob();
  } catch (error) {
    if (ticket !== pane.previewTicket) return;
    if (error instanceof ApiError && error.status === 401) return signedOut();
    body.replaceChildren(el('p', { class: 'inline-error', text: error instanceof ApiError ? error.message : 'The file could not be fetched.' }));
    return;
  }
  if (ticket !== pane.previewTicket || c !== chat) return;
  pane.url = URL.createObjectURL(blob);
  $('.preview-links', box).replaceChildren(
    el('a', { class: 'preview-download', href: pane.url, download: baseName(path), text: 'Download' }));
  const shown = await previewOf(blob, path, pane.url);
  if (ticket === pane.previewTicket) body.replaceChildren(shown);
}

/**
 * What a file shows as. A PDF shows in the browser's own viewer in a frame of the pane: the
 * page's CSP admits a frame of a blob URL (`frame-src blob:`), and the page makes such a URL
 * only of bytes it typed as a PDF itself (pdfUrl), so no frame ever runs a document of the
 * front's origin (an MCP App's page, the other frame, gets an opaque origin: apps.js).
 */
async function previewOf(blob, path, url) {
  if (hasDocPreview(path)) return docPreview(chat, path); // tables and documents: preview.js
  const type = (blob.type || '').split(';')[0].trim().toLowerCase();
  if (type.startsWith('image/') && type !== 'image/svg+xml') return el('img', { class: 'preview-image', src: url, alt: path });
  if (type === 'application/pdf') {
    return el('div', { class: 'preview-pdf' },
      el('iframe', { class: 'preview-frame', src: pdfUrl(blob), title: `${path} (PDF)` }),
      el('p', { class: 'muted' }, el('a', { class: 'preview-open', href: url, target: '_blank', rel: 'noopener', text: 'Open the PDF in a new tab' })));
  }
  const text = await textOf(blob, type);
  if (text == null) return el('p', { class: 'muted', text: 'No preview for this kind of file: Download it.' });
  const cut = text.length > PREVIEW_CHARS;
  const shown = cut ? text.slice(0, PREVIEW_CHARS) : text;
  const more = cut ? el('p', { class: 'muted', text: `… ${text.length - PREVIEW_CHARS} more characters in the download` }) : null;
  if (type === 'text/markdown' || /\.(md|markdown)$/i.test(path)) {
    return el('div', { class: 'preview-markdown body' }, md.render(shown), more);
  }
  return el('div', {}, el('pre', { class: 'preview-text', text: shown }), more);
}

/** A blob URL of the bytes typed application/pdf by the page itself: the only kind a frame shows. */
function pdfUrl(blob) {
  if (pane.frameUrl) URL.revokeObjectURL(pane.frameUrl);
  pane.frameUrl = URL.createObjectURL(new Blob([blob], { type: 'application/pdf' }));
  return pane.frameUrl;
}

/** A text type's text; an untyped small file's when it is UTF-8 without NULs (a script, a log); else null. */
async function textOf(blob, type) {
  const texty = type.startsWith('text/') || type === 'application/json';
  if (!texty && !((type === '' || type === 'application/octet-stream') && blob.size <= SNIFF_BYTES)) return null;
  try {
    const text = new TextDecoder('utf-8', { fatal: !texty }).decode(await blob.arrayBuffer());
    return texty || !text.includes('\u0000') ? text : null;
  } catch {
    return null;
  }
}
