/*
 * tandem — the web page's previews of tables and documents in the files pane:
 * a workbook or a CSV/TSV file as tables, a tab per sheet (its first 200 rows,
 * and a line saying how many it has when that is more); a Word file as its
 * headings, paragraphs, lists and tables; a slide deck slide by slide with its
 * notes. The JSON comes from chatd's `…/files/preview`, made by its reader
 * process; every text goes in as textContent. files.js's previewOf() calls
 * docPreview() for these files.
 */
'use strict';

const DOC_PREVIEW_NAMES = /\.(xlsx|xlsm|xls|ods|csv|tsv|tab|docx|pptx)$/i;
const DOC_PREVIEW_MS = 75000; // the reader may take its 60 s on a large file
const SHEET_COLUMNS = 50; // chatd's bound of a sheet's columns shown
let sheetViews = 0; // each sheets view's own ids: a tab names its panel

const hasDocPreview = (path) => DOC_PREVIEW_NAMES.test(String(path));
const counted = (n) => (Number(n) || 0).toLocaleString('en-US');

/** The pane's view of a table or document file, or one line saying why there is none. */
async function docPreview(c, path) {
  let answer;
  try {
    const res = await fetch(`${API}/conversations/${enc(c.id)}/files/preview?path=${enc(path)}`,
      { cache: 'no-store', headers: { accept: 'application/json' }, signal: AbortSignal.timeout(DOC_PREVIEW_MS) });
    if (!res.ok) throw await errorFrom(res);
    answer = await res.json();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) signedOut();
    return el('p', { class: 'inline-error', text: error instanceof ApiError ? error.message : 'The preview could not be fetched.' });
  }
  const view = answer && answer.view;
  const body = view === 'sheets' ? sheetsView(path, answer.sheets)
    : view === 'document' ? documentView(answer.blocks)
      : view === 'slides' ? slidesView(answer.slides)
        : el('p', { class: 'muted', text: 'No preview for this kind of file: Download it.' });
  const notes = Array.isArray(answer && answer.notes) ? answer.notes : [];
  return el('div', { class: 'doc-preview', 'data-view': String(view) }, body,
    ...notes.map((note) => el('p', { class: 'muted preview-note', text: String(note) })));
}

/* Sheets: one table, or a tablist with a tab per sheet over one panel. */

function sheetsView(path, sheets) {
  const list = (Array.isArray(sheets) ? sheets : []).filter((s) => s && typeof s === 'object');
  if (!list.length) return el('p', { class: 'muted', text: 'This workbook has no sheets.' });
  const name = (s, i) => String(s.name || '') || (list.length === 1 ? baseName(path) : `Sheet ${i + 1}`);
  // The panel scrolls a wide sheet: it takes the focus so a keyboard can scroll it too.
  const panel = el('div', { class: 'sheet-panel', tabindex: '0' });
  if (list.length === 1) {
    panel.setAttribute('role', 'group');
    panel.setAttribute('aria-label', name(list[0], 0));
    panel.append(...sheetBody(list[0]));
    return panel;
  }
  const base = `sheets-${++sheetViews}`;
  panel.id = `${base}-panel`;
  panel.setAttribute('role', 'tabpanel');
  const tabs = list.map((s, i) => el('button', {
    type: 'button', role: 'tab', class: 'sheet-tab', id: `${base}-tab-${i}`, 'aria-controls': panel.id, text: name(s, i),
  }));
  const select = (i, focus) => {
    tabs.forEach((tab, j) => {
      tab.setAttribute('aria-selected', String(i === j));
      tab.tabIndex = i === j ? 0 : -1; // one stop in the tab order; arrows move between tabs
    });
    panel.setAttribute('aria-labelledby', tabs[i].id);
    panel.dataset.sheet = String(i);
    panel.replaceChildren(...sheetBody(list[i]));
    panel.scrollTo(0, 0);
    if (focus) tabs[i].focus();
  };
  tabs.forEach((tab, i) => tab.addEventListener('click', () => select(i, false)));
  const tablist = el('div', { class: 'sheet-tabs', role: 'tablist', 'aria-label': `Sheets of ${baseName(path)}` }, ...tabs);
  tablist.addEventListener('keydown', (e) => {
    const at = tabs.indexOf(document.activeElement);
    const to = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: tabs.length - 1 }[e.key];
    if (at < 0 || to === undefined) return;
    e.preventDefault();
    select((to + tabs.length) % tabs.length, true);
  });
  select(0, false);
  return el('div', { class: 'sheets' }, tablist, panel);
}

/** A sheet's table and, when the preview is not all of it, a line saying what it shows. */
function sheetBody(sheet) {
  const rows = (Array.isArray(sheet.rows) ? sheet.rows : []).map((r) => (Array.isArray(r) ? r : []));
  const total = Number(sheet.total_rows) || 0;
  const columns = Number(sheet.total_columns) || 0;
  const shown = [];
  if (total > rows.length) shown.push(`the first ${counted(rows.length)} of its ${counted(total)} rows`);
  if (columns > SHEET_COLUMNS) shown.push(`${shown.length ? '' : 'the first '}${SHEET_COLUMNS} of its ${counted(columns)} columns`);
  const line = shown.length ? `Showing ${shown.join(' and ')}: the whole sheet is in the download.`
    : sheet.cut ? 'Long cells are cut short here: the whole sheet is in the download.' : null;
  return [
    rows.length ? tableOf(rows) : el('p', { class: 'muted', text: 'This sheet is empty.' }),
    line ? el('p', { class: 'muted sheet-cut', text: line }) : null,
  ].filter(Boolean);
}

/** Rows of cells as a table, every row as wide as the widest. */
function tableOf(rows) {
  const width = rows.reduce((w, r) => Math.max(w, r.length), 0);
  return el('table', { class: 'preview-table' },
    el('tbody', {}, ...rows.map((r) => el('tr', {},
      ...Array.from({ length: width }, (_, i) => el('td', { text: r[i] == null ? '' : String(r[i]) }))))));
}

/* A Word document: headings, paragraphs, lists and tables in reading order. */

function documentView(blocks) {
  const out = [];
  let list = null; // the list the items in a row go into
  let tables = 0;
  for (const b of Array.isArray(blocks) ? blocks : []) {
    if (!b || typeof b !== 'object') continue;
    const text = String(b.text == null ? '' : b.text);
    if (b.type === 'list_item') {
      if (!list) out.push(list = el('ul', { class: 'doc-list' }));
      list.append(el('li', { class: 'doc-item', 'data-level': String(Math.min(8, Number(b.level) || 0)), text }));
      continue;
    }
    list = null;
    if (b.type === 'heading') out.push(el(`h${Math.min(6, 3 + (Number(b.level) || 1))}`, { class: 'doc-heading', text }));
    else if (b.type === 'paragraph') out.push(el('p', { class: 'doc-paragraph', text }));
    else if (b.type === 'table' && Array.isArray(b.rows)) {
      tables += 1;
      const rows = b.rows.map((r) => (Array.isArray(r) ? r : []));
      out.push(el('div', { class: 'doc-table', role: 'group', 'aria-label': `Table ${tables}`, tabindex: '0' }, tableOf(rows)));
    }
  }
  return out.length ? el('div', { class: 'doc-blocks' }, ...out) : el('p', { class: 'muted', text: 'This document has no text.' });
}

/* A slide deck: each slide's title, text and notes. */

function slidesView(slides) {
  const list = (Array.isArray(slides) ? slides : []).filter((s) => s && typeof s === 'object');
  if (!list.length) return el('p', { class: 'muted', text: 'This deck has no slides.' });
  return el('div', { class: 'doc-slides' }, ...list.map((s, i) => {
    const number = Number(s.number) || i + 1;
    return el('section', { class: 'doc-slide', 'data-slide': String(number) },
      el('h4', { class: 'slide-title', text: s.title ? `Slide ${number}: ${s.title}` : `Slide ${number}` }),
      s.text ? el('p', { class: 'slide-text', text: String(s.text) }) : null,
      s.notes ? el('p', { class: 'slide-notes' }, el('span', { class: 'slide-notes-label', text: 'Notes: ' }), String(s.notes)) : null);
  }));
}
