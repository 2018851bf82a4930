/*
 * tandem — the web page's status line, context meter and failure banner.
 *
 *   words    what the open chat is doing, as one word or a tool step as a
 *            verb with its object ("Reading notes.md", "Running `cargo test`"),
 *            Paused · after N steps, Stopped, Failed, Interrupted.
 *   meter    a bar with 80 % and 90 % ticks, used / limit, tokens left, the
 *            speed; `≈` while an answer streams (estimated from its text until
 *            the request's `usage` comes). Its button opens the details: tokens
 *            in and out, time to first token (measured here, from the request's
 *            start to its first delta), prompt time, speed, and the average of
 *            the chat's last requests (kept in this page, never on the server).
 *   banner   "The reply failed": the last run's `failure` cause in plain words,
 *            what to do, Retry, the technical detail folded, ✕. Shown again
 *            after a reload for a day after the run ended, unless dismissed
 *            (localStorage, per chat and run); a new run takes it away.
 */
'use strict';

/* -- words -- */

function setStatus(c, state, detail = '') {
  if (c.status.state === state && c.status.detail === detail) return;
  c.status = { state, detail };
  if (c === chat) renderStatus();
}

const STATUS_KIND = { Ready: 'idle', Stopped: 'idle', Paused: 'attention', 'Waiting for you': 'attention', Interrupted: 'bad', Failed: 'bad' };

function renderStatus() {
  const status = chat ? chat.status : { state: 'Ready', detail: '' };
  $('#status .state').textContent = status.state;
  $('#status .state').title = status.state;
  $('#status .detail').textContent = status.detail;
  $('#status').dataset.kind = STATUS_KIND[status.state] || 'working';
  renderFailure(); // a run that starts takes the banner away
}

/** [state, detail] of the status line for a run (none yet: Ready). */
function runStatusLabel(c, run) {
  switch (run && run.status) {
    case 'queued': return ['Queued', run.position ? `number ${run.position} in line` : ''];
    case 'running': {
      const step = runningCall(c, run);
      if (step) return [toolStep(step.name, step.summary), ''];
      const message = run.message_id && c.byId.get(run.message_id);
      return [message && message.status === 'streaming' && message.text ? 'Answering' : 'Thinking', ''];
    }
    case 'waiting': return ['Waiting for you', ''];
    case 'failed': return ['Failed', causeShort(run)];
    case 'interrupted': return ['Interrupted', causeShort(run)];
    case 'paused': return ['Paused', run.steps ? `after ${run.steps} steps` : 'at the step limit: Continue goes on'];
    case 'stopped': return ['Stopped', ''];
    default: return ['Ready', ''];
  }
}

/** A call of `run` still running (a page opened in the middle of a tool step). */
function runningCall(c, run) {
  return [...c.calls.values()].reverse().find((call) => call.status === 'running' && ownerRun(c, call) === run.id);
}

const STEP_CHARS = 48;
const cut = (text, n = STEP_CHARS) => (text.length > n ? `${text.slice(0, n - 1)}…` : text);

/**
 * A tool step as a verb and its object, from the call's name and its summary
 * (`tool.started`'s "read_file notes.md (from line 5)", or the snapshot's
 * "notes.md" taken from the arguments).
 */
function toolStep(name, summary) {
  let rest = oneLine(summary);
  if (rest === name) rest = '';
  else if (rest.startsWith(`${name} `)) rest = rest.slice(name.length + 1);
  const file = () => cut(baseName(rest.replace(/ \((?:all|from line .*|line .*)\)$/, '')));
  switch (name) {
    case 'read_file':
    case 'read_document': return rest ? `Reading ${file()}` : 'Reading a file';
    case 'write_file': return rest ? `Writing ${file()}` : 'Writing a file';
    case 'edit_file': return rest ? `Editing ${file()}` : 'Editing a file';
    case 'delete_file': return rest ? `Deleting ${file()}` : 'Deleting a file';
    case 'move_file': {
      const [from, to] = rest.split(' to ');
      return to ? `Moving ${cut(baseName(from))} to ${cut(baseName(to))}` : 'Moving a file';
    }
    case 'list_files': return `Listing ${cut(rest.replace(/^\*\*\/\* in /, '')) || 'files'}`;
    case 'search_files':
    case 'grep': return rest ? `Searching for ${cut(rest)}` : 'Searching the files';
    case 'todo_write': return 'Planning';
    case 'web_search': return 'Searching the web';
    case 'web_fetch': {
      let host = '';
      try { host = new URL(rest).host; } catch { host = cut(rest); }
      return host ? `Fetching ${host}` : 'Fetching a page';
    }
    case 'bash': return rest ? `Running \`${cut(rest)}\`` : 'Running a command';
    default: return `Running ${cut(name)}`;
  }
}

/* -- meter -- */

/** 12.3k from 12345; plain below 1000. */
const formatTokens = (n) => (n >= 1000 ? `${(n / 1000).toFixed(1)}k` : String(Math.round(n)));

/** Chat id → the figures of its last requests seen by this page ({ttft, prompt, speed, in, out}). */
const requestFigures = new Map();
const FIGURES_KEPT = 10;

/**
 * Per chat, the request being answered now: when it began (run.started, or
 * the tool results that send the next one), its first delta, and the
 * characters streamed since (the estimate until its `usage` comes).
 */
const live = new Map();

function liveOf(c) {
  let now = live.get(c.id);
  if (!now) live.set(c.id, now = { began: null, ttft: null, first: null, chars: 0 });
  return now;
}

/** A request starts: at run.started, and after a call's result (the next request follows). */
function requestBegins(c) {
  Object.assign(liveOf(c), { began: performance.now(), ttft: null, first: null, chars: 0 });
}

/** A text or reasoning delta: its first one sets the time to first token. */
function noteDelta(c, text) {
  const now = liveOf(c);
  const at = performance.now();
  if (now.first == null) {
    now.first = at;
    if (now.began != null) now.ttft = at - now.began;
  }
  now.chars += String(text || '').length;
  if (c === chat) renderMeterSoon();
}

/** While an answer streams, the meter is painted a few times a second, not at every delta. */
let meterLater = null;

function renderMeterSoon() {
  if (meterLater) return;
  meterLater = setTimeout(() => { meterLater = null; renderMeter(); }, 250);
}

/** A request's `usage`: the meter's exact figures, and one more request for the average. */
function noteUsage(c, d) {
  c.usage = d;
  const now = liveOf(c);
  const figures = requestFigures.get(c.id) || [];
  figures.push({
    ttft: now.ttft,
    prompt: Number(d.prompt_ms) > 0 ? Number(d.prompt_ms) : null,
    speed: Number(d.tokens_per_second) > 0 ? Number(d.tokens_per_second) : null,
    in: (Number(d.used) || 0) - (Number(d.completion) || 0),
    out: Number(d.completion) || 0,
  });
  requestFigures.set(c.id, figures.slice(-FIGURES_KEPT));
  Object.assign(now, { began: null, first: null, chars: 0 });
  if (c === chat) renderMeter();
}

/** What the meter shows: the last usage, or while an answer streams an estimate over it. */
function meterFigures(c) {
  const usage = (c && c.usage) || {};
  let used = Number(usage.used);
  const limit = Number(usage.limit);
  let speed = Number(usage.tokens_per_second); // 0 for a step that only called tools: not shown
  const now = c && live.get(c.id);
  const streaming = !!(now && now.first != null && now.chars > 0 && isRunActive(c));
  if (streaming) {
    // About 4 characters a token, on top of what the last request held and wrote (`used` counts both).
    const written = now.chars / 4;
    used = (Number.isFinite(used) ? used : 0) + written;
    const seconds = (performance.now() - now.first) / 1000;
    speed = seconds > 0.2 ? written / seconds : 0;
  }
  return { used, limit, speed, streaming, known: Number.isFinite(used) && used > 0 };
}

function renderMeter() {
  const { used, limit, speed, streaming, known } = meterFigures(chat);
  const bounded = known && limit > 0;
  const ratio = bounded ? used / limit : 0;
  const about = streaming ? '≈' : '';
  const meter = $('#context-meter');
  meter.textContent = !known ? '' : bounded ? `${about}${formatTokens(used)} / ${formatTokens(limit)} tokens` : `${about}${formatTokens(used)} tokens`;
  meter.classList.toggle('red', bounded && ratio >= 0.9);
  meter.classList.toggle('amber', bounded && ratio >= 0.8 && ratio < 0.9);
  $('#meter').hidden = !known;
  $('#meter').dataset.level = ratio >= 0.9 ? 'red' : ratio >= 0.8 ? 'amber' : 'ok';
  $('#meter-bar').hidden = !bounded;
  $('#meter-bar .fill').style.width = `${Math.min(100, ratio * 100).toFixed(1)}%`;
  $('#meter-percent').textContent = bounded ? `${about}${Math.round(ratio * 100)} %` : '';
  $('#tokens-left').textContent = bounded ? `${about}${formatTokens(Math.max(0, limit - used))} left` : '';
  $('#tps').textContent = speed > 0 ? `${about}${speed.toFixed(1)} tok/s` : '';
  if (!$('#meter-details').hidden) fillDetails();
}

const seconds = (ms) => (ms == null ? '—' : ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${Math.round(ms)} ms`);
const speedText = (v) => (v == null ? '—' : `${v.toFixed(1)} tok/s`);

/** The mean of the figures that are known; null when none is. */
function mean(values) {
  const known = values.filter((v) => v != null && Number.isFinite(v));
  return known.length ? known.reduce((a, b) => a + b, 0) / known.length : null;
}

function fillDetails() {
  const usage = (chat && chat.usage) || {};
  const { used, limit, streaming, known } = meterFigures(chat);
  const figures = (chat && requestFigures.get(chat.id)) || [];
  const last = figures[figures.length - 1] || {};
  const row = (name, value, key) => el('div', { class: 'detail-row', 'data-figure': key }, el('dt', { text: name }), el('dd', { text: value }));
  const about = streaming ? '≈' : '';
  const rows = [
    row('Context', !known ? '—' : limit > 0 ? `${about}${formatTokens(used)} of ${formatTokens(limit)} tokens, ${formatTokens(Math.max(0, limit - used))} left` : `${about}${formatTokens(used)} tokens`, 'context'),
    row('Model', usage.model || '—', 'model'),
    row('Tokens in', usage.used != null ? String(Number(usage.used) - (Number(usage.completion) || 0)) : '—', 'in'),
    row('Tokens out', usage.completion != null ? String(usage.completion) : '—', 'out'),
    row('Time to first token', seconds(last.ttft), 'ttft'),
    row('Prompt time', seconds(last.prompt), 'prompt'),
    row('Speed', speedText(last.speed), 'speed'),
  ];
  const n = figures.length;
  const average = n > 1
    ? [row(`Average of the last ${n} requests`, '', 'average-head'),
      row('Time to first token', seconds(mean(figures.map((f) => f.ttft))), 'average-ttft'),
      row('Prompt time', seconds(mean(figures.map((f) => f.prompt))), 'average-prompt'),
      row('Speed', speedText(mean(figures.map((f) => f.speed))), 'average-speed')]
    : [];
  $('#meter-details dl').replaceChildren(...rows, ...average);
  $('#meter-details .meter-note').textContent = figures.length
    ? 'Near the limit chatd compacts the older part of the chat. These figures are kept by this page only.'
    : 'No request seen by this page yet: the figures come with the next answer.';
}

function openDetails() {
  fillDetails();
  $('#meter-details').hidden = false;
  $('#meter').setAttribute('aria-expanded', 'true');
  $('#meter-close').focus();
}

function closeDetails(focusBack) {
  if ($('#meter-details').hidden) return;
  $('#meter-details').hidden = true;
  $('#meter').setAttribute('aria-expanded', 'false');
  if (focusBack) $('#meter').focus();
}

/* -- banner -- */

/** Each cause: what happened, in plain words, and what to do. */
const CAUSES = {
  engine_unreachable: ['The engine could not be reached.', 'Check that the engine runs (tandem status names it), then Retry.'],
  model_not_found: ['The engine does not serve this chat\'s model.', 'Pick another model for this chat, then Retry.'],
  over_context: ['The chat is longer than the model\'s context window, even compacted.', 'Compact the chat or start a new one (Branch keeps what you need), or pick a model with a larger window.'],
  engine_memory: ['The engine ran out of memory.', 'Retry with a shorter chat or a smaller model, or once fewer replies run at once.'],
  timeout: ['The engine took too long to answer.', 'Retry; if it happens again, the engine may be overloaded.'],
  engine_busy: ['The engine was busy.', 'Retry in a moment.'],
  engine_error: ['The engine reported an error.', 'Retry; the engine\'s log says more.'],
  refused: ['The engine refused the request.', 'The technical detail says why: often a setting of this chat out of its range.'],
  stopped: ['The reply was stopped.', 'Retry goes on from where it stopped.'],
  chatd_stopped: ['chatd stopped or restarted during the reply.', 'Retry goes on from where it stopped.'],
  other: ['Something went wrong.', 'The technical detail says what; Retry may help.'],
};

/** A few words for the status line's detail. */
const CAUSE_SHORT = {
  engine_unreachable: 'engine unreachable', model_not_found: 'model not found', over_context: 'over the context window',
  engine_memory: 'engine out of memory', timeout: 'timeout', engine_busy: 'engine busy', engine_error: 'engine error',
  refused: 'refused by the engine', chatd_stopped: 'chatd restarted',
};

function causeShort(run) {
  const cause = run.failure && run.failure.cause;
  return CAUSE_SHORT[cause] || oneLine(run.error) || (run.status === 'failed' ? 'the run failed' : '');
}

const BANNER_DAY_MS = 24 * 3600 * 1000;
const DISMISSED_PREFIX = 'tandem.failure-dismissed.'; // + chat id → the run id dismissed

/** A run ended: its failure (if any) and when, for the banner. */
function noteFinished(c, run, d) {
  run.ended = new Date().toISOString();
  if (d.failure) run.failure = d.failure;
  else delete run.failure;
  if (c === chat) renderFailure();
}

/** The run the banner is about: the chat's last, ended with a failure, within a day, not dismissed. */
function failedRun(c) {
  const run = c && c.lastRun;
  if (!run || !run.failure || !['failed', 'interrupted', 'stopped'].includes(run.status)) return null;
  const ended = Date.parse(run.ended || '');
  if (Number.isFinite(ended) && Date.now() - ended > BANNER_DAY_MS) return null;
  try { if (localStorage.getItem(DISMISSED_PREFIX + c.id) === run.id) return null; } catch { /* no storage: shown */ }
  return run;
}

function renderFailure() {
  const box = $('#failure');
  const run = failedRun(chat);
  if (!run) {
    box.hidden = true;
    box.replaceChildren();
    delete box.dataset.runId;
    return;
  }
  if (box.dataset.runId === run.id && !box.hidden) return; // already shown: keep its fold as it is
  const cause = CAUSES[run.failure.cause] ? run.failure.cause : 'other';
  const [what, todo] = CAUSES[cause];
  const detail = String(run.failure.detail || run.error || '');
  const retry = button('failure-retry primary', 'Retry', (e) => retryRun(e.currentTarget, run));
  box.replaceChildren(
    el('div', { class: 'failure-head' },
      el('strong', { class: 'failure-title', text: 'The reply failed' }),
      button('failure-dismiss quiet', '✕', () => dismissFailure(chat, run), { 'aria-label': 'Dismiss this message', title: 'Dismiss' })),
    el('p', { class: 'failure-cause', text: what }),
    el('p', { class: 'failure-todo', text: todo }),
    el('div', { class: 'failure-actions' }, retry),
    detail ? el('details', { class: 'failure-detail' }, el('summary', { text: 'Technical detail' }), el('pre', { text: detail })) : null);
  box.dataset.runId = run.id;
  box.dataset.cause = cause;
  box.hidden = false;
}

function dismissFailure(c, run) {
  try { localStorage.setItem(DISMISSED_PREFIX + c.id, run.id); } catch { /* this page only */ }
  renderFailure();
  $('#composer').focus();
}

/** Retry: Continue an answer that has something to go on from, else answer the question again. */
function retryRun(target, run) {
  const c = chat;
  if (!c) return;
  const answer = (run.message_id && c.byId.get(run.message_id))
    || [...c.path].reverse().find((m) => m.role === 'assistant' && m.run_id === run.id); // a run heard of by events only
  const started = answer && (answer.text || (Array.isArray(answer.tool_calls) && answer.tool_calls.length));
  runAction(target, run.status !== 'failed' && started ? 'continue' : 'regenerate');
}

/* -- init -- */

function initStatus() {
  $('#meter').addEventListener('click', () => ($('#meter-details').hidden ? openDetails() : closeDetails(true)));
  $('#meter-close').addEventListener('click', () => closeDetails(true));
  $('.meter-box').addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && !$('#meter-details').hidden) { e.preventDefault(); e.stopPropagation(); closeDetails(true); }
  });
  document.addEventListener('click', (e) => {
    if (!e.target.closest('#meter-details, #meter')) closeDetails(false);
  });
}
