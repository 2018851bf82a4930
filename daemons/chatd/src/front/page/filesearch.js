/*
 * tandem — the files pane's search box: words (all on one line) or a regular
 * expression over the chat's file names, text files and documents' text, from
 * chatd's index (GET …/files/search). Each hit names its file, its page or
 * sheet and its line, and opens the file's preview. While files are still
 * being indexed it says how many and looks again.
 */
'use strict';

const FOUND_AGAIN_MS = 2000; // files still being indexed: the next look
const FOUND_AGAIN_TIMES = 15; // … at most this many times for one search

const found = {
  ticket: 0,
  timer: null,
};

function initFileSearch() {
  $('#files-search').addEventListener('submit', (e) => {
    e.preventDefault();
    searchFiles(chat, 0);
  });
  $('#files-q').addEventListener('keydown', (e) => {
    // Esc in a box with words clears the search; in an empty one it closes the pane.
    if (e.key === 'Escape' && e.currentTarget.value) {
      e.preventDefault();
      e.currentTarget.value = '';
      clearFound();
    }
  });
}

/** Forgets the search shown (another chat, the pane closed, Esc). */
function clearFound() {
  found.ticket += 1;
  clearTimeout(found.timer);
  const box = $('#files-found');
  box.hidden = true;
  $('.found-note', box).textContent = '';
  $('ul.found', box).replaceChildren();
}

async function searchFiles(c, again) {
  const q = $('#files-q').value.trim();
  if (!c || !q) return clearFound();
  const regex = $('#files-regex').checked;
  const ticket = ++found.ticket;
  clearTimeout(found.timer);
  const box = $('#files-found');
  box.hidden = false;
  if (!again) $('.found-note', box).textContent = 'Searching…';
  let answer;
  try {
    answer = await api('GET', `/conversations/${enc(c.id)}/files/search?q=${enc(q)}${regex ? '&regex=1' : ''}`);
  } catch (error) {
    if (ticket !== found.ticket || c !== chat) return;
    $('.found-note', box).textContent = failureText(error);
    $('ul.found', box).replaceChildren();
    return;
  }
  if (ticket !== found.ticket || c !== chat || !pane.open) return;
  renderFound(answer || {});
  if (Number(answer && answer.pending) > 0 && again < FOUND_AGAIN_TIMES) {
    found.timer = setTimeout(() => searchFiles(c, again + 1), FOUND_AGAIN_MS);
  }
}

const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;

function renderFound(answer) {
  const box = $('#files-found');
  const hits = Array.isArray(answer.hits) ? answer.hits.filter((h) => h && typeof h.path === 'string') : [];
  const names = Array.isArray(answer.names) ? answer.names.filter((n) => typeof n === 'string') : [];
  const notes = [];
  if (!hits.length && !names.length) notes.push(`Nothing found in ${plural(Number(answer.files) || 0, 'file', 'files')}.`);
  else notes.push(`${answer.more_hits ? 'The first ' : ''}${plural(hits.length, 'line', 'lines')}${names.length ? `, ${plural(names.length, 'name', 'names')}` : ''}.`);
  const pending = Number(answer.pending) || 0;
  if (pending) notes.push(`${plural(pending, 'file is', 'files are')} still being indexed; looking again…`);
  const beyond = Number(answer.beyond) || 0;
  if (beyond) notes.push(`${plural(beyond, 'file was', 'files were')} past the search's limits.`);
  $('.found-note', box).textContent = notes.join(' ');
  $('ul.found', box).replaceChildren(
    ...names.map((path) => foundRow(path, 'file name', '')),
    ...hits.map((h) => foundRow(h.path, `${h.part ? `${h.part}, ` : ''}line ${Number(h.line) || 0}`, String(h.text || ''))));
}

/** One hit: its file and where in it (opens the preview), and the line's words as text, never HTML. */
function foundRow(path, where, text) {
  return el('li', { class: 'found-row' },
    button('file-open', path, () => previewFile(chat, path), { title: `Preview ${path}` }),
    el('span', { class: 'file-meta', text: where }),
    text ? el('p', { class: 'found-text', text }) : null);
}
