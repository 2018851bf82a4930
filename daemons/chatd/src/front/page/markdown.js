/*
 * tandem — the web page's Markdown: md.render(text) → DOM nodes, md.renderLive
 * for a streaming answer.
 *
 * The model's text is never HTML: raw tags stay text, links are http(s)/mailto
 * only. Linear time: no backtracking pattern, closers found in one pass.
 */
'use strict';

/* -- markdown -- */

/**
 * Markdown → DOM nodes. Every piece of text becomes a text node; an href
 * comes only from a URL that parses with protocol http:, https: or mailto:.
 * Raw HTML in the text stays text.
 */
const md = (() => {
  // Block patterns run on every line, so none may backtrack over a long run of spaces (quadratic:
  // one long line froze the tab). Heading, rule and table-rule tails are read by hand, and the `s`
  // flag lets `.` take U+2028 too, so a trailing `(.*)$` never fails and retries.
  const FENCE = /^( {0,3})(`{3,}|~{3,})[ \t]*([^\s`]*)(.*)$/s;
  const HEADING = /^ {0,3}(#{1,6})(?=[ \t]|$)/;
  const RULE_MARK = /^ {0,3}([-*_])/;
  const QUOTE = /^ {0,3}> ?(.*)$/s;
  const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$/s;
  const RULE_CELL = /^:?-+:?$/;
  const ESCAPABLE = '\\`*_{}[]()#+-.!<>|~"\'';
  const SPECIAL = /[\n\\`*_[hH]/g;
  const BARE_URL = /^https?:\/\/[^\s<>"`]+/i;
  const MAX_DEPTH = 12;
  const MAX_SCAN = 4000; // how far away a closing `*`, `]` or `)` may be

  const normalize = (text) => String(text).replace(/\r\n?/g, '\n');

  function render(text) {
    const fragment = document.createDocumentFragment();
    blocks(normalize(text).split('\n'), fragment, 0);
    return fragment;
  }

  /**
   * Renders a text that is still growing (a streaming answer) into `box`, the same DOM as
   * render(text) but re-rendering only its last blocks. Text only grows at its last line, and no
   * block reads further than the line after the next block's first line, so a top-level block is
   * final once that line is complete: its DOM is kept. `live` ({done: the text of the final
   * blocks, kept: their node count}) goes from one call to the next; pass null to start over.
   */
  function renderLive(box, text, live) {
    text = normalize(text);
    if (!live || !text.startsWith(live.done)) { // not the same text grown: from scratch
      box.replaceChildren();
      live = { done: '', kept: 0 };
    }
    const lines = text.slice(live.done.length).split('\n');
    const starts = []; // each top-level block: its first line, the nodes made before it
    const fragment = document.createDocumentFragment();
    blocks(lines, fragment, 0, starts);
    let final = 0;
    while (final + 1 < starts.length && starts[final + 1].line + 1 < lines.length - 1) final += 1;
    while (box.childNodes.length > live.kept) box.lastChild.remove();
    box.append(fragment);
    if (final > 0) {
      live.kept += starts[final].nodes;
      live.done += `${lines.slice(0, starts[final].line).join('\n')}\n`;
    }
    return live;
  }

  const blank = (line) => !line.trim();
  const isSpace = (ch) => ch === ' ' || ch === '\t';
  const indentOf = (line) => line.length - line.trimStart().length;
  const ordered = (marker) => /\d/.test(marker);

  function fenceOpen(line) {
    const m = FENCE.exec(line);
    return m && !(m[2][0] === '`' && m[4].includes('`')) ? m : null; // ```a``` on one line is inline code
  }

  /** `## Title ##` → {level, text}, or null. */
  function headingOf(line) {
    const m = HEADING.exec(line);
    if (!m) return null;
    let start = m[0].length;
    let end = line.length;
    while (start < end && isSpace(line[start])) start += 1;
    while (end > start && isSpace(line[end - 1])) end -= 1;
    let hashes = end;
    while (hashes > start && line[hashes - 1] === '#') hashes -= 1;
    if (hashes < end && hashes > start && isSpace(line[hashes - 1])) { // a closing run of #
      end = hashes;
      while (end > start && isSpace(line[end - 1])) end -= 1;
    }
    return { level: m[1].length, text: line.slice(start, end) };
  }

  /** `---`, `* * *`, `___`: three or more of one mark and nothing else but spaces. */
  function isRule(line) {
    const m = RULE_MARK.exec(line);
    if (!m) return false;
    let marks = 0;
    for (let k = m[0].length - 1; k < line.length; k += 1) {
      if (line[k] === m[1]) marks += 1;
      else if (!isSpace(line[k])) return false;
    }
    return marks >= 3;
  }

  /** The `|---|:--:|` line under a table's head. */
  function isTableRule(line) {
    let t = line.trim();
    if (t.startsWith('|')) t = t.slice(1);
    if (t.endsWith('|')) t = t.slice(0, -1);
    return t.split('|').every((cell) => RULE_CELL.test(cell.trim()));
  }

  const isItem = (line) => ITEM.test(line) && !isRule(line);
  const startsBlock = (line) => !!fenceOpen(line) || HEADING.test(line) || isRule(line) || QUOTE.test(line) || isItem(line);
  const isTableStart = (lines, i) => lines[i].includes('|') && i + 1 < lines.length &&
    lines[i + 1].includes('|') && lines[i + 1].includes('-') && isTableRule(lines[i + 1]);

  /** Blocks of `lines` into `parent`; `starts` (top level) gets each block's first line and node count before it. */
  function blocks(lines, parent, depth, starts = null) {
    if (depth > MAX_DEPTH) return parent.append(el('p', { text: lines.join('\n') })); // absurd nesting: plain text
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (starts && !blank(line)) starts.push({ line: i, nodes: parent.childNodes.length });
      if (blank(line)) i += 1;
      else if ((m = fenceOpen(line))) i = fence(lines, i, m, parent);
      else if ((m = headingOf(line))) {
        parent.append(inline(m.text, el(`h${m.level}`)));
        i += 1;
      } else if (isRule(line)) { parent.append(el('hr')); i += 1; }
      else if (QUOTE.test(line)) i = quote(lines, i, parent, depth);
      else if (isItem(line)) i = list(lines, i, parent, depth);
      else if (isTableStart(lines, i)) i = table(lines, i, parent);
      else i = paragraph(lines, i, parent);
    }
  }

  /** ``` or ~~~ fences; one still open (streaming) runs to the end. */
  function fence(lines, start, m, parent) {
    const close = new RegExp(`^ {0,3}\\${m[2][0]}{${m[2].length},}[ \\t]*$`);
    const indent = new RegExp(`^ {0,${m[1].length}}`); // the fence's own indent goes from its lines
    const body = [];
    let i = start + 1;
    for (; i < lines.length && !close.test(lines[i]); i += 1) body.push(lines[i].replace(indent, ''));
    const code = el('code', { text: body.join('\n'), 'data-lang': m[3] });
    const copy = button('copy quiet', 'Copy', () => copyText(code, copy), { 'aria-label': 'Copy the code' });
    parent.append(el('div', { class: 'codeblock' },
      el('div', { class: 'code-head' }, el('span', { class: 'code-lang', text: m[3] || 'code' }), copy),
      el('pre', {}, code)));
    return i < lines.length ? i + 1 : i;
  }

  function quote(lines, i, parent, depth) {
    const inner = [];
    for (; i < lines.length; i += 1) {
      const m = QUOTE.exec(lines[i]);
      if (m) inner.push(m[1]);
      // A plain line right after quoted text continues it (a lazy line).
      else if (!blank(lines[i]) && inner.length && !blank(inner[inner.length - 1]) && !startsBlock(lines[i])) inner.push(lines[i]);
      else break;
    }
    const box = el('blockquote');
    blocks(inner, box, depth + 1);
    parent.append(box);
    return i;
  }

  function list(lines, i, parent, depth) {
    const first = ITEM.exec(lines[i]);
    const numbered = ordered(first[2]);
    const box = el(numbered ? 'ol' : 'ul');
    if (numbered && parseInt(first[2], 10) !== 1) box.setAttribute('start', String(parseInt(first[2], 10)));
    let loose = false;
    let more = true;
    while (more && i < lines.length) {
      const m = ITEM.exec(lines[i]);
      if (!m || isRule(lines[i]) || ordered(m[2]) !== numbered) break;
      const width = m[1].length + m[2].length + 1;
      const item = [m[3] || ''];
      for (i += 1; i < lines.length; i += 1) {
        const line = lines[i];
        if (blank(line)) {
          let j = i + 1;
          while (j < lines.length && blank(lines[j])) j += 1;
          if (j < lines.length && indentOf(lines[j]) >= 2) { // more of this item after a gap
            while (i < j - 1) { item.push(''); i += 1; }
            item.push('');
            loose = true;
            continue;
          }
          const next = j < lines.length && ITEM.exec(lines[j]);
          if (next && !isRule(lines[j]) && ordered(next[2]) === numbered) { loose = true; i = j; } else more = false;
          break;
        }
        if (indentOf(line) >= 2) item.push(line.slice(Math.min(indentOf(line), width)));
        else if (startsBlock(line)) break;
        else item.push(line); // a lazy line continues the item's paragraph
      }
      const li = el('li');
      blocks(item, li, depth + 1);
      box.append(li);
    }
    box.classList.toggle('tight', !loose);
    parent.append(box);
    return i;
  }

  function cells(line) {
    const text = line.trim().replace(/^\|/, '').replace(/(?<!\\)\|$/, '');
    return text.split(/(?<!\\)\|/).map((cell) => cell.trim().replace(/\\\|/g, '|'));
  }

  function table(lines, i, parent) {
    const head = cells(lines[i]);
    const aligns = cells(lines[i + 1]).map((r) => (r.endsWith(':') ? (r.startsWith(':') ? 'align-center' : 'align-right') : null));
    const row = (values, tag) => el('tr', {}, ...head.map((_, k) => inline(values[k] || '', el(tag, { class: aligns[k] }))));
    const body = el('tbody');
    for (i += 2; i < lines.length && !blank(lines[i]) && lines[i].includes('|'); i += 1) body.append(row(cells(lines[i]), 'td'));
    parent.append(el('div', { class: 'table-wrap' }, el('table', {}, el('thead', {}, row(head, 'th')), body)));
    return i;
  }

  function paragraph(lines, i, parent) {
    const text = [lines[i].trimStart()];
    for (i += 1; i < lines.length && !blank(lines[i]) && !startsBlock(lines[i]) && !isTableStart(lines, i); i += 1) {
      text.push(lines[i].trimStart());
    }
    parent.append(inline(text.join('\n'), el('p')));
    return i;
  }

  /**
   * Inline spans into `parent`: code, strong, em, links, bare URLs, line breaks; the rest is text.
   * `scan` keeps what was learnt about `src` (closers, unclosed runs), so no opener that stays
   * unclosed makes the scan read the rest of the text again: the work stays linear.
   */
  function inline(src, parent, inLink = false, depth = 0) {
    const scan = { src, pairs: null, closers: {}, unclosedTicks: new Set() };
    let text = '';
    const put = (node) => {
      if (text) parent.append(text);
      text = '';
      parent.append(node);
    };
    let i = 0;
    while (i < src.length) {
      SPECIAL.lastIndex = i;
      const hit = SPECIAL.exec(src);
      if (!hit) { text += src.slice(i); break; }
      text += src.slice(i, hit.index);
      i = hit.index;
      const c = src[i];
      let span = null;
      if (c === '\n') span = { node: el('br'), next: i + 1 };
      else if (c === '\\' && ESCAPABLE.includes(src[i + 1])) span = { text: src[i + 1], next: i + 2 };
      else if (c === '`') span = codeSpan(scan, i);
      else if ((c === '*' || c === '_') && depth < MAX_DEPTH) span = emphasis(scan, i, inLink, depth);
      else if (c === '[' && !inLink) span = mdLink(scan, i, depth);
      else if ((c === 'h' || c === 'H') && !inLink && !/[A-Za-z0-9]/.test(src[i - 1] || '')) span = bareUrl(src, i);
      if (!span) span = { text: c === '`' ? src.slice(i, i + runLength(src, i)) : c, next: i + (c === '`' ? runLength(src, i) : 1) };
      if (span.node) put(span.node); else text += span.text;
      i = span.next;
    }
    if (text) parent.append(text);
    return parent;
  }

  function runLength(src, i) {
    let j = i;
    while (src[j] === src[i]) j += 1;
    return j - i;
  }

  /** A run of backticks up to the next run of the same length; a length found unclosed stays so further on. */
  function codeSpan(scan, i) {
    const { src } = scan;
    const run = runLength(src, i);
    if (scan.unclosedTicks.has(run)) return null;
    const ticks = '`'.repeat(run);
    let j = src.indexOf(ticks, i + run);
    while (j !== -1 && src[j + run] === '`') j = src.indexOf(ticks, j + runLength(src, j));
    if (j === -1) { scan.unclosedTicks.add(run); return null; }
    let content = src.slice(i + run, j).replace(/\n/g, ' ');
    // One space goes from each end when both have one and there is more than spaces.
    if (content.length > 2 && content[0] === ' ' && content[content.length - 1] === ' ' && /\S/.test(content)) content = content.slice(1, -1);
    return { node: el('code', { text: content }), next: j + run };
  }

  /**
   * Where `delim` (`*`, `**`, `_` or `__`) can close, in order. Whether a place closes does not
   * depend on the opener, so one pass finds them all, the first time an opener needs them.
   */
  function closers(scan, delim) {
    if (scan.closers[delim]) return scan.closers[delim];
    const { src } = scan;
    const c = delim[0];
    const found = [];
    for (let j = src.indexOf(delim); j !== -1; j = src.indexOf(delim, j + 1)) {
      if (/\s/.test(src[j - 1])) continue;
      if (delim.length === 1 && src[j + 1] === c) { j += 1; continue; } // part of a ** run
      if (c === '_' && /[A-Za-z0-9]/.test(src[j + delim.length] || '')) continue;
      found.push(j);
    }
    return (scan.closers[delim] = found);
  }

  /** The first of the sorted `places` at or after `from`, or -1 (a binary search). */
  function firstFrom(places, from) {
    let lo = 0;
    let hi = places.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (places[mid] < from) lo = mid + 1; else hi = mid;
    }
    return lo < places.length ? places[lo] : -1;
  }

  function emphasis(scan, i, inLink, depth) {
    const { src } = scan;
    const c = src[i];
    const delim = src[i + 1] === c ? c + c : c;
    const open = i + delim.length;
    if (open >= src.length || /\s/.test(src[open])) return null;
    if (c === '_' && /[A-Za-z0-9]/.test(src[i - 1] || '')) return null; // snake_case stays text
    const j = firstFrom(closers(scan, delim), open + 1);
    if (j === -1 || j >= open + MAX_SCAN) return null;
    return { node: inline(src.slice(open, j), el(delim.length === 2 ? 'strong' : 'em'), inLink, depth + 1), next: j + delim.length };
  }

  /**
   * Each `[` and `(` with the place of its closing `]` / `)` (-1: none), found in one pass: a `(`
   * closes on its own line only, a backslash hides the next character.
   */
  function pairs(scan) {
    if (scan.pairs) return scan.pairs;
    const { src } = scan;
    const close = new Int32Array(src.length).fill(-1);
    const brackets = [];
    const parens = [];
    for (let k = 0; k < src.length; k += 1) {
      const ch = src[k];
      if (ch === '\\') k += 1;
      else if (ch === '[') brackets.push(k);
      else if (ch === ']') { if (brackets.length) close[brackets.pop()] = k; }
      else if (ch === '(') parens.push(k);
      else if (ch === ')') { if (parens.length) close[parens.pop()] = k; }
      else if (ch === '\n') parens.length = 0;
    }
    return (scan.pairs = close);
  }

  /** [label](url): a link when the URL is safe, else the whole of it as text. */
  function mdLink(scan, i, depth) {
    const { src } = scan;
    const close = pairs(scan);
    const limit = Math.min(src.length, i + MAX_SCAN);
    const k = close[i];
    if (k === -1 || k >= limit || src[k + 1] !== '(') return null;
    const p = close[k + 1];
    if (p === -1 || p >= limit) return null;
    const label = src.slice(i + 1, k);
    let target = src.slice(k + 2, p).trim();
    target = (/^(\S+)\s+(?:"[^"]*"|'[^']*')$/.exec(target) || [null, target])[1]; // drop a "title"
    if (target.startsWith('<') && target.endsWith('>')) target = target.slice(1, -1);
    const href = safeHref(target);
    if (!href || !label.trim()) return { text: src.slice(i, p + 1), next: p + 1 };
    return { node: inline(label, linkTo(href), true, depth + 1), next: p + 1 };
  }

  function bareUrl(src, i) {
    const m = BARE_URL.exec(src.slice(i, i + 2048));
    if (!m) return null;
    let url = m[0];
    // Trailing punctuation belongs to the sentence, an unmatched ) to the text around.
    let opens = 0;
    let closes = 0;
    for (const ch of url) { if (ch === '(') opens += 1; else if (ch === ')') closes += 1; }
    for (;;) {
      const last = url[url.length - 1];
      if (".,;:!?*_~']".includes(last)) url = url.slice(0, -1);
      else if (last === ')' && opens < closes) { url = url.slice(0, -1); closes -= 1; }
      else break;
    }
    const href = safeHref(url);
    return href ? { node: linkTo(href, url), next: i + url.length } : null;
  }

  function safeHref(url) {
    try {
      const parsed = new URL(url);
      return ['http:', 'https:', 'mailto:'].includes(parsed.protocol) ? parsed.href : null;
    } catch {
      return null; // relative or malformed: shown as text
    }
  }

  const linkTo = (href, text) => el('a', { href, rel: 'noopener noreferrer nofollow', target: '_blank', text });

  return { render, renderLive };
})();

/** Copies a code block: navigator.clipboard when the page may use it, else selects it for Ctrl+C. */
async function copyText(code, target) {
  try {
    await navigator.clipboard.writeText(code.textContent);
    target.textContent = 'Copied';
  } catch {
    // Plain http on a LAN has no clipboard API.
    getSelection().selectAllChildren(code);
    target.textContent = 'Selected: Ctrl+C';
  }
  setTimeout(() => { target.textContent = 'Copy'; }, 1500);
}
