/*
 * tandem — the web page's composer: what you type and attach, and how it is
 * sent (app.js's init() calls initComposer()).
 *
 *   files    the attach button, a paste and a drop on the chat put files in
 *            the composer of the open chat (kept per chat while the page is
 *            open): a chip each with its name, size, a thumbnail for an
 *            image, the tokens of a text, and "as a file" when chatd will not
 *            put it in the message (a text over ~32k tokens, anything that is
 *            not text, an image over the 50 MiB a model is shown (smaller ones are scaled to fit)). ✕ removes it.
 *   send     text alone: the JSON send, as before. With files: one
 *            multipart/form-data POST through XMLHttpRequest, whose
 *            upload.onprogress drives the bar; Cancel (or Esc) aborts it and
 *            chatd takes back what it wrote. A refusal (413 over a limit, 400)
 *            is shown under the composer in chatd's own words. During a run
 *            the message waits over the composer, as a JSON send does.
 *   sent     a message's `attachments` records become chips under it that
 *            open the file in the files pane; the text chatd added for the
 *            model (the files' descriptions and inlined text) is not shown.
 *   drafts   the text, per chat, in localStorage; cleared when sent.
 *   /goal    `/goal <text>` sets the chat's goal, sends no message (subagents.js);
 *   /loop    `/loop 5m <prompt>` makes a loop, `list`, `stop [id]` (subagents.js).
 *   /        a `/` at the start lists chatd's commands (GET /commands, docs/api.md
 *            "Slash commands"; the start screen's `home` ones), filtered as
 *            you type, then the argument's choices after `/name `: Up/Down
 *            pick, Enter runs a command without argument or completes, Tab
 *            completes, Esc closes. A command sent is no message: its answer's
 *            text shows under the composer; /new opens the new chat, /attach
 *            the file picker.
 *   keys     Enter sends, Shift+Enter a new line, Esc stops the run (or
 *            cancels an upload), Up in an empty box edits the last waiting
 *            message.
 */
'use strict';

const INLINE_TOKENS = 32000; // chatd's most tokens of text a message's files put inline
/** Documents chatd reads into text (docs/api.md "Documents"): their start goes into the message. */
const DOCUMENT = /\.(pdf|xlsx|xlsm|xls|ods|docx|pptx|epub)$/i;
/** Voice notes chatd has the engine transcribe (docs/api.md "Voice notes"): their words go into the message. */
const AUDIO = /\.(wav|mp3|m4a|ogg|oga|opus|webm|flac)$/i;
const MODEL_IMAGE_BYTES = 50 * 1024 * 1024; // a larger image is kept but not shown to a model (chatd scales the rest)
const TEXT_READ_BYTES = 1024 * 1024; // chatd judges text on this much of a file
const DRAFT_PREFIX = 'tandem.draft.';
const NEW_CHAT_KEY = 'new'; // the start screen's composer (its first send makes the chat)
const MAX_FILES = 20; // chatd's most files a message (it would refuse the 21st only once the rest went up)

const compose = {
  key: null, // the chat id the composer is for (NEW_CHAT_KEY on the start screen)
  files: new Map(), // key → [{id, file, thumb, kind: image|text|document|audio|binary|null, tokens}]
  next: 1,
  upload: null, // {xhr, key, sent, total} while a message's files go up
};

/** The files attached in the composer of `key`. */
function attachedOf(key) {
  if (!compose.files.has(key)) compose.files.set(key, []);
  return compose.files.get(key);
}

/* -- drafts -- */

function draftGet(key) {
  try { return localStorage.getItem(DRAFT_PREFIX + key) || ''; } catch { return ''; }
}

function draftSet(key, text) {
  try {
    if (text.trim()) localStorage.setItem(DRAFT_PREFIX + key, text);
    else localStorage.removeItem(DRAFT_PREFIX + key);
  } catch { /* no storage (a private window): the draft lives as long as the page */ }
}

/** The composer follows the open chat: its draft and its files. Called on every route. */
function switchComposer() {
  const key = wantedChatId() || NEW_CHAT_KEY;
  if (compose.key === key) return;
  compose.key = key;
  const box = $('#composer');
  box.value = draftGet(key);
  fitComposer();
  $('#composer-error').hidden = true;
  $('#command-note').hidden = true;
  closeMenu();
  paintAttached();
}

function onComposerInput() {
  fitComposer();
  onCommandInput();
  if (compose.key) draftSet(compose.key, $('#composer').value);
}

/* -- files -- */

/** Adds files (a FileList or an array) to the open chat's composer. */
function attachFiles(list) {
  const files = [...(list || [])].filter((f) => f instanceof File);
  if (!files.length) return;
  const key = compose.key || NEW_CHAT_KEY;
  const mine = attachedOf(key);
  const left = files.splice(Math.max(0, MAX_FILES - mine.length));
  for (const file of files) {
    const image = (file.type || '').startsWith('image/');
    const item = { id: compose.next++, file, thumb: null, kind: image ? 'image' : null, tokens: null };
    // A thumbnail from the file itself (img-src blob:); an SVG is a document, not a picture.
    if (image && file.type !== 'image/svg+xml') item.thumb = URL.createObjectURL(file);
    mine.push(item);
    if (!image) measure(key, item);
  }
  if (left.length) {
    showInlineError($('#composer-error'), `A message carries at most ${MAX_FILES} files: ${left.map((f) => f.name).join(', ')} ${left.length === 1 ? 'was' : 'were'} not added.`);
  } else $('#composer-error').hidden = true;
  paintAttached();
}

/** Text or not, and its tokens, judged as chatd judges them (attachments/mod.rs). */
async function measure(key, item) {
  const { file } = item;
  let text = null;
  try {
    const bytes = await file.slice(0, TEXT_READ_BYTES).arrayBuffer();
    const whole = file.size <= TEXT_READ_BYTES;
    // A character cut by the read's end is not a fault of the file: stream mode leaves it out.
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes, { stream: !whole });
    if (text.includes('\u0000')) text = null;
  } catch {
    text = null;
  }
  if (text == null) item.kind = DOCUMENT.test(file.name) ? 'document' : AUDIO.test(file.name) ? 'audio' : 'binary';
  else {
    item.kind = 'text';
    const chars = file.size <= TEXT_READ_BYTES ? [...text].length : file.size; // past the read: bytes stand for characters
    item.tokens = Math.ceil((Math.floor(chars / 4) + 1) * 1.15);
  }
  if (compose.key === key) paintAttached();
}

/** Whether chatd will name the file in the message instead of putting it in. */
function goesAsFile(item) {
  if (item.kind === 'binary') return true;
  if (item.kind === 'image') return item.file.size > MODEL_IMAGE_BYTES;
  return item.kind === 'text' && item.tokens > INLINE_TOKENS;
}

function removeAttached(key, id) {
  const mine = attachedOf(key);
  const at = mine.findIndex((item) => item.id === id);
  if (at === -1) return;
  const [item] = mine.splice(at, 1);
  if (item.thumb) URL.revokeObjectURL(item.thumb);
  paintAttached();
  $('#composer').focus();
}

/** A file's kind at a glance, where an image has its thumbnail: PDF, TXT, BIN… */
const extensionOf = (name) => ((/\.([A-Za-z0-9]{1,4})$/.exec(name) || [null, 'file'])[1]).toUpperCase();

/** ≈1.2k tokens */
const tokensText = (n) => `≈${formatTokens(n)} tokens`;

function paintAttached() {
  const box = $('#attachments');
  const key = compose.key || NEW_CHAT_KEY;
  const mine = attachedOf(key);
  const busy = !!compose.upload && compose.upload.key === key;
  box.hidden = !mine.length;
  box.replaceChildren(...mine.map((item) => {
    const { file } = item;
    const note = item.kind === 'text' ? tokensText(item.tokens) : item.kind === 'document' ? 'read as text' : item.kind === 'audio' ? 'transcribed' : '';
    const meta = [formatBytes(file.size), note].filter(Boolean).join(' · ');
    return el('div', { class: 'attach-chip', 'data-name': file.name, 'data-kind': item.kind || 'pending' },
      item.thumb ? el('img', { class: 'attach-thumb', src: item.thumb, alt: '' }) : el('span', { class: 'attach-icon', text: extensionOf(file.name), 'aria-hidden': 'true' }),
      el('span', { class: 'attach-name', text: file.name, title: file.name }),
      el('span', { class: 'attach-meta', text: meta }),
      item.kind && goesAsFile(item) ? el('span', {
        class: 'attach-asfile',
        text: 'as a file',
        title: 'Too big or not text: the model gets its name and reads it with its tools',
      }) : null,
      button('attach-remove quiet', '✕', () => removeAttached(key, item.id), { 'aria-label': `Remove ${file.name}`, disabled: busy }));
  }));
  paintUpload();
  paintContext(); // context.js: the picked prompts and resources of this composer
}

function paintUpload() {
  const box = $('#upload');
  const up = compose.upload;
  const shown = !!up && up.key === (compose.key || NEW_CHAT_KEY);
  box.hidden = !shown;
  if (!shown) return;
  const percent = up.total > 0 ? Math.min(100, Math.floor((up.sent / up.total) * 100)) : 0;
  const bar = $('#upload-bar');
  bar.max = 100;
  bar.value = percent;
  bar.setAttribute('aria-valuetext', `${percent} %`);
  $('.upload-text', box).textContent = up.sent >= up.total && up.total > 0
    ? `Uploaded ${formatBytes(up.total)}: saving…`
    : `Uploading ${formatBytes(up.sent)} of ${formatBytes(up.total)} (${percent} %)`;
}

function cancelUpload() {
  if (compose.upload) compose.upload.xhr.abort();
}

/**
 * One message with its files as multipart/form-data: `text` first, then each file. The answer
 * is a JSON send's ({message_id, run_id} or {pending_id}); a refusal is an ApiError in chatd's words.
 */
function uploadMessage(c, key, text, items, context) {
  return new Promise((resolve, reject) => {
    const form = new FormData();
    form.append('text', text);
    if (context.length) form.append('context', JSON.stringify(context));
    for (const item of items) form.append('file', item.file, item.file.name);
    const xhr = new XMLHttpRequest();
    const total = items.reduce((n, item) => n + item.file.size, 0);
    compose.upload = { xhr, key, sent: 0, total };
    const done = () => { compose.upload = null; paintAttached(); };
    xhr.open('POST', `${API}/conversations/${enc(c.id)}/messages`);
    xhr.setRequestHeader('accept', 'application/json');
    xhr.upload.onprogress = (e) => {
      if (!compose.upload || compose.upload.xhr !== xhr) return;
      compose.upload.sent = e.loaded;
      if (e.lengthComputable) compose.upload.total = e.total;
      paintUpload();
    };
    xhr.onload = () => {
      done();
      if (xhr.status >= 200 && xhr.status < 300) {
        link.requestOk();
        try { resolve(xhr.responseText ? JSON.parse(xhr.responseText) : null); } catch { resolve(null); }
        return;
      }
      const refused = refusalOf(xhr);
      if (refused.status === 401) signedOut();
      else if (refused.lost) link.requestFailed();
      reject(refused);
    };
    xhr.onerror = () => {
      done();
      reject(new ApiError(0, 'network', 'The upload was cut: the chat service did not answer. Nothing was kept; send it again.'));
    };
    xhr.onabort = () => {
      done();
      reject(new ApiError(0, 'canceled', 'Upload canceled: nothing was sent.'));
    };
    xhr.send(form);
    paintAttached();
  });
}

/** An ApiError from a refused upload (app.js's refusal(), as for a fetch). */
const refusalOf = (xhr) => refusal(xhr.status, xhr.responseText);

/* -- send -- */

async function sendComposer() {
  const box = $('#composer');
  const error = $('#composer-error');
  const key = compose.key || NEW_CHAT_KEY;
  const items = attachedOf(key).slice();
  const picked = contextOf(key).slice(); // context.js
  const context = picked.map((p) => p.item);
  const typed = box.value;
  if ((!typed.trim() && !items.length && !picked.length) || page.sending) return;
  error.hidden = true;
  if (!chat && wantedChatId()) return showInlineError(error, 'The chat is still loading: try again in a moment.');
  const cmd = /^\/(goal|loop)(?:\s+([\s\S]*))?$/.exec(typed.trim()); // subagents.js: the chat's goal or loops, not a message
  if (cmd && (items.length || picked.length)) return showInlineError(error, `A ${cmd[1]} is words only: send the files and the context as a message.`);
  if (cmd) return (cmd[1] === 'goal' ? goalCommand : loopCommand)(typed, (cmd[2] || '').trim());
  const named = COMMAND_TEXT.exec(typed.trim());
  if (named && (items.length || picked.length) && named[1].toLowerCase() !== 'attach') return showInlineError(error, 'A command takes no files: send them as a message.');
  if (named) return chatCommand(typed, named[1].toLowerCase());
  // chatd wants some text: files alone are named.
  const text = typed.trim() ? typed
    : items.length ? `Attached: ${items.map((item) => item.file.name).join(', ')}`
      : `Context: ${picked.map((p) => p.label).join(', ')}`;
  page.sending = true;
  box.value = '';
  fitComposer();
  let sentKey = key;
  try {
    const c = chat || await startChat();
    if (!c) throw new Error('the new chat did not open');
    sentKey = c.id;
    const answer = await startingRun(c, async () => {
      await nameChat(c, text);
      if (items.length) return uploadMessage(c, sentKey, text, items, context);
      return api('POST', `/conversations/${enc(c.id)}/messages`, context.length ? { text, context } : { text });
    });
    // What was picked goes with this message only (a pick made meanwhile stays).
    contextPicks.set(sentKey, contextOf(sentKey).filter((p) => !picked.includes(p)));
    // Its pending.added event may have come first, with what chatd stored (the MCP context in front).
    if (answer && answer.pending_id && !c.pending.has(answer.pending_id)) addPending(c, { id: answer.pending_id, text, state: 'waiting' });
    // What was typed in this chat while the upload ran is the new draft.
    draftSet(sentKey, compose.key === sentKey ? $('#composer').value : '');
    const sent = new Set(items.map((item) => item.id));
    const left = attachedOf(sentKey);
    for (const item of left) if (sent.has(item.id) && item.thumb) URL.revokeObjectURL(item.thumb);
    compose.files.set(sentKey, left.filter((item) => !sent.has(item.id)));
    paintAttached();
    keepBottom(true);
    refreshListSoon();
  } catch (failure) {
    if (!box.value && compose.key === sentKey) { box.value = typed; fitComposer(); }
    if (failure.type === 'canceled') showToast(failure.message);
    else if (failure.status !== 401) showInlineError(error, failure);
  } finally {
    page.sending = false;
  }
}

/** The start screen's first message: a new chat, opened (its files and draft go with it), then the send. */
async function startChat() {
  const conversation = await newChatWithTools(); // tools.js: with its switches
  compose.files.set(conversation.id, attachedOf(NEW_CHAT_KEY));
  compose.files.delete(NEW_CHAT_KEY);
  contextPicks.set(conversation.id, contextOf(NEW_CHAT_KEY));
  contextPicks.delete(NEW_CHAT_KEY);
  draftSet(NEW_CHAT_KEY, '');
  if (compose.upload && compose.upload.key === NEW_CHAT_KEY) compose.upload.key = conversation.id;
  compose.key = conversation.id; // the box keeps what it holds: the route does not load a draft over it
  location.hash = chatHref(conversation.id);
  await openChat(conversation.id);
  return chat && chat.id === conversation.id ? chat : null;
}

/** A chat without a title is named after its first message, before the run (a run locks the title). */
async function nameChat(c, text) {
  if (c.conversation.title || c.path.length || isRunActive(c)) return;
  let title = oneLine(text).replace(/[\u0000-\u001f\u007f\s]+/g, ' ').trim();
  if (!title) return;
  if (title.length > 60) title = `${title.slice(0, 60).replace(/\s+\S*$/, '')}…`;
  try {
    const updated = await api('PATCH', `/conversations/${enc(c.id)}`, { title });
    c.conversation = updated;
    if (c === chat) renderTitle();
    updateListItem(updated);
  } catch { /* the chat works without a title */ }
}

function fitComposer() {
  const box = $('#composer');
  box.style.height = 'auto';
  box.style.height = `${Math.min(box.scrollHeight, Math.round(window.innerHeight * 0.4))}px`;
}

/* -- sent -- */

/** A message's (or a waiting one's) file records, as chatd keeps them. */
const attachmentsOf = (message) => (Array.isArray(message && message.attachments)
  ? message.attachments.filter((a) => a && typeof a.path === 'string') : []);

/**
 * Where the text chatd added for the model begins: its description of the first file
 * ("\n\n[attached file uploads/…" or "…image uploads/…"); -1 for none.
 */
function addedTextAt(message) {
  const files = attachmentsOf(message);
  const text = String((message && message.text) || '');
  if (!files.length) return -1;
  const first = files[0].path;
  const from = contextEnd(message); // context.js: the MCP context chatd put in front
  const at = [`\n\n[attached file ${first}`, `\n\n[attached image ${first}`].map((s) => text.indexOf(s, from)).filter((i) => i >= 0);
  return at.length ? Math.min(...at) : -1;
}

/** What the person typed: the message's text without what chatd added for the model (in front and after). */
function typedText(message) {
  const text = String((message && message.text) || '');
  const at = addedTextAt(message);
  return text.slice(contextEnd(message), at >= 0 ? at : text.length);
}

/** What chatd added after the text (kept as it was when the person edits a waiting message). */
function addedText(message) {
  const at = addedTextAt(message);
  return at >= 0 ? String(message.text).slice(at) : '';
}

/** What chatd put in front of the text (an MCP server's prompts and resources), kept on an edit. */
const leadText = (message) => String((message && message.text) || '').slice(0, contextEnd(message));

/** Chips of a sent message's files; each opens the file in the files pane. Null for none. */
function attachmentChips(message) {
  const files = attachmentsOf(message);
  if (!files.length) return null;
  return el('div', { class: 'file-chips message-files' }, ...files.map((a) => {
    const name = String(a.path).split('/').pop() || a.path;
    const asFile = a.inline === false || a.kind === 'binary' || (a.kind === 'image' && a.image === false);
    const heard = a.kind === 'audio' ? (a.transcribed ? 'transcribed' : 'not transcribed') : '';
    const meta = [formatBytes(Number(a.bytes) || 0), Number(a.tokens) > 0 ? tokensText(Number(a.tokens)) : '', heard].filter(Boolean).join(' · ');
    return el('div', { class: 'file-chip attachment-chip', 'data-path': a.path, title: a.conflict_of ? `${a.conflict_of} was taken: kept as ${a.path}` : a.path },
      el('span', { class: 'chip-text', text: name }),
      el('span', { class: 'chip-meta', text: meta }),
      asFile ? el('span', { class: 'attach-asfile', text: 'as a file' }) : null,
      el('span', { class: 'chip-sep', text: '·', 'aria-hidden': 'true' }),
      button('chip-open', 'Open', () => openFilesPane(a.path), { 'aria-label': `Open ${a.path}` }));
  }));
}

/* -- keys -- */

function onComposerKey(event) {
  if (menuKey(event)) return;
  if (event.key === 'Escape') {
    if (stopFromKeyboard()) event.preventDefault();
    return;
  }
  const plain = !event.shiftKey && !event.altKey && !event.ctrlKey && !event.metaKey;
  if (event.key === 'ArrowUp' && plain && !event.isComposing && !$('#composer').value) {
    if (editLastWaiting()) event.preventDefault();
    return;
  }
  if (event.key !== 'Enter' || event.shiftKey || event.isComposing || event.keyCode === 229) return;
  event.preventDefault();
  sendComposer();
}

/** Esc: an upload going up is canceled; else the open chat's run is stopped. True when it did something. */
function stopFromKeyboard() {
  if (compose.upload && compose.upload.key === compose.key) {
    cancelUpload();
    return true;
  }
  if (chat && isRunActive(chat) && !$('#stop').disabled) {
    runAction($('#stop'), 'stop');
    return true;
  }
  return false;
}

/** Up in an empty box: the newest waiting message opens in its editor. */
function editLastWaiting() {
  const c = chat;
  if (!c || !c.pending.size) return false;
  const id = [...c.pending.keys()].pop();
  const view = c.pendingViews.get(id);
  if (!view || view.editing) return false;
  editPending(c, id, view);
  return true;
}

/* -- commands -- */

/** chatd's commands but the composer's own /goal and /loop (subagents.js): `/name args`. */
const COMMAND_TEXT = /^\/(help|about|model|new|compact|clear|agent|attach)(?:\s+([\s\S]*))?$/i;

/** The `/` menu: chatd's list for chat `key` (the last fetched: shown until the new one comes), the items shown, the selected one. */
const menu = { open: false, list: null, key: null, items: [], at: 0, ticket: 0, off: false };

/** The open chat's id for chatd (null on the start screen). */
const commandChat = () => (compose.key && compose.key !== NEW_CHAT_KEY ? compose.key : null);

/** chatd's commands for `id`'s chat (null: the start screen's). */
async function commandList(id) {
  const data = await api('GET', `/commands${id ? `?conversation_id=${enc(id)}` : ''}`, undefined, { quiet: true });
  const commands = data.commands || [];
  // The chat's skills as commands of their own, after the registry's (a command keeps its name: /skill reaches the skill).
  const skills = (data.skills || []).filter((s) => !commands.some((c) => c.name === s.name))
    .map((s) => ({ name: s.name, usage: '[words]', about: `${s.about} · skill`, home: false, choices: [] }));
  return [...commands, ...skills].filter((c) => id || c.home);
}

/** Text that starts with `/` opens the menu (its list fetched then); without, it closes (Esc's closing too). */
function onCommandInput() {
  const text = $('#composer').value;
  if (!text.startsWith('/') || text === '/') menu.off = false; // a new `/` opens it again after an Esc
  if (!text.startsWith('/')) return closeMenu();
  if (menu.off) return;
  if (!menu.open) {
    const key = commandChat();
    const ticket = ++menu.ticket;
    menu.open = true;
    commandList(key).then((list) => {
      if (ticket !== menu.ticket) return;
      Object.assign(menu, { list, key });
      paintMenu();
    }).catch(() => {});
  }
  paintMenu();
}

function closeMenu() {
  Object.assign(menu, { open: false, items: [], at: 0, ticket: menu.ticket + 1 });
  paintMenuBox();
}

/** The commands whose name starts with what is typed; after `/name `, that command's choices that start with the rest. */
function paintMenu() {
  const [, name, arg] = /^\/(\S*)(?:\s([\s\S]*))?$/.exec($('#composer').value) || [];
  if (name == null || !menu.list || menu.key !== commandChat()) { // its list yet to come
    menu.items = [];
    return paintMenuBox();
  }
  const word = name.toLowerCase();
  const cmd = menu.list.find((c) => c.name === word);
  const items = arg == null
    ? menu.list.filter((c) => c.name.startsWith(word)).map((c) => ({ cmd: c }))
    : ((cmd && cmd.choices) || [])
      .filter((v) => !arg.includes('\n') && v.toLowerCase().startsWith(arg.trimStart().toLowerCase()))
      .map((choice) => ({ cmd, choice }));
  if (items.length !== menu.items.length || items.some((item, i) => item.choice !== menu.items[i].choice || item.cmd !== menu.items[i].cmd)) menu.at = 0;
  menu.items = items;
  paintMenuBox();
}

function paintMenuBox() {
  const list = $('#command-menu');
  const box = $('#composer');
  const shown = menu.items.length > 0;
  list.hidden = !shown;
  box.setAttribute('aria-expanded', String(shown));
  list.replaceChildren(...menu.items.map(({ cmd, choice }, i) => el('li', {
    id: `command-${i}`, class: 'command-item', role: 'option', 'aria-selected': String(i === menu.at), 'data-at': i,
  }, ...(choice != null ? [el('span', { class: 'command-name', text: choice })]
    : [el('span', { class: 'command-name', text: `/${cmd.name}${cmd.usage ? ` ${cmd.usage}` : ''}` }), el('span', { class: 'muted', text: ` — ${cmd.about}` })]))));
  if (shown) {
    box.setAttribute('aria-activedescendant', `command-${menu.at}`);
    $(`#command-${menu.at}`).scrollIntoView({ block: 'nearest' });
  } else box.removeAttribute('aria-activedescendant');
}

/** The menu's keys; true when the key was the menu's. */
function menuKey(event) {
  const n = menu.items.length;
  if (!n || event.isComposing || event.altKey || event.ctrlKey || event.metaKey) return false;
  if (event.key === 'ArrowDown' || event.key === 'ArrowUp') {
    menu.at = (menu.at + (event.key === 'ArrowDown' ? 1 : n - 1)) % n;
    paintMenuBox();
  } else if (event.key === 'Escape') {
    menu.off = true;
    closeMenu();
  } else if (event.key === 'Tab' && !event.shiftKey) pickItem(menu.at, false);
  else if (event.key !== 'Enter' || event.shiftKey || !pickItem(menu.at, true)) return false;
  event.preventDefault();
  return true;
}

/**
 * Item `at` into the box: a command with an argument as `/name ` (its choices then), a choice after its
 * command; `run` (Enter, a click): a command without argument is sent. False when the box already says
 * it (Enter sends what is typed).
 */
function pickItem(at, run) {
  const item = menu.items[at];
  if (!item) return false;
  const box = $('#composer');
  const bare = item.choice == null && !item.cmd.usage;
  const text = item.choice != null ? `/${item.cmd.name} ${item.choice}` : `/${item.cmd.name}${bare ? '' : ' '}`;
  if (run && (bare || box.value.trim() === text.trim())) {
    box.value = text;
    closeMenu();
    sendComposer();
    return true;
  }
  if (box.value === text) return false;
  box.value = text;
  box.setSelectionRange(text.length, text.length);
  onComposerInput();
  return true;
}

/** A command's answer (its text, lines kept) under the composer, until dismissed or the chat changes. */
function showNote(text) {
  $('.command-text', $('#command-note')).textContent = text;
  $('#command-note').hidden = false;
}

/**
 * A command of chatd's registry (`name` lower case): sent as a message, which chatd runs and stores
 * not; its answer's text is shown. /new opens the chat it made, /attach the file picker; on the start
 * screen /help is the list and /new does nothing (it is a new chat).
 */
function chatCommand(typed, name) {
  if (name === 'attach') {
    $('#composer').value = '';
    onComposerInput();
    return $('#attach').click();
  }
  return runCommand(typed, async () => {
    if (!chat && name === 'help') {
      return showNote(['Commands:', ...(await commandList(null)).map((c) => `/${c.name}${c.usage ? ` ${c.usage}` : ''} — ${c.about}`)].join('\n'));
    }
    if (!chat && name === 'new') return;
    const c = chat || await startChat();
    if (!c) throw new Error('the new chat did not open');
    const answer = await api('POST', `/conversations/${enc(c.id)}/messages`, { text: typed.trim() });
    refreshListSoon();
    if (answer && answer.conversation_id) location.hash = chatHref(answer.conversation_id);
    else if (answer && answer.command && answer.text) showNote(answer.text);
    else keepBottom(true); // /agent: a message, sent
  });
}

/* -- paste, drop -- */

const carriesFiles = (event) => !!event.dataTransfer && [...event.dataTransfer.types].includes('Files');

function onPaste(event) {
  const data = event.clipboardData;
  const files = data ? [...data.files] : [];
  if (!files.length) return;
  attachFiles(files);
  // A copied file or picture often comes with its name as text too: only the file goes in.
  event.preventDefault();
}

function initComposer() {
  const box = $('#composer');
  box.addEventListener('keydown', onComposerKey);
  box.addEventListener('input', onComposerInput);
  box.addEventListener('paste', onPaste);
  $('#send').addEventListener('click', sendComposer);
  $('#attach').addEventListener('click', () => $('#attach-input').click());
  $('#attach-input').addEventListener('change', (e) => {
    attachFiles(e.target.files);
    e.target.value = ''; // the same file again is a change too
    box.focus();
  });
  $('#upload-cancel').addEventListener('click', cancelUpload);
  $('#command-note-close').addEventListener('click', () => { $('#command-note').hidden = true; box.focus(); });
  // A click on an item does what Enter does; the focus stays in the box.
  $('#command-menu').addEventListener('mousedown', (e) => e.preventDefault());
  $('#command-menu').addEventListener('click', (e) => {
    const item = e.target.closest('.command-item');
    if (item) pickItem(Number(item.dataset.at), true) || sendComposer();
  });
  box.addEventListener('blur', closeMenu);
  // A paste outside any field (the page itself has the focus) attaches too.
  document.addEventListener('paste', (e) => { if (e.target === document.body) onPaste(e); });
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && !e.defaultPrevented && e.target === document.body && stopFromKeyboard()) e.preventDefault();
  });
  // Files dropped anywhere on the chat go into the composer; elsewhere the browser must not open them.
  const area = $('#chat');
  let depth = 0;
  area.addEventListener('dragenter', (e) => { if (carriesFiles(e)) { depth += 1; area.classList.add('dropping'); } });
  area.addEventListener('dragleave', (e) => { if (carriesFiles(e) && --depth <= 0) { depth = 0; area.classList.remove('dropping'); } });
  area.addEventListener('dragover', (e) => { if (carriesFiles(e)) { e.preventDefault(); e.dataTransfer.dropEffect = 'copy'; } });
  area.addEventListener('drop', (e) => {
    depth = 0;
    area.classList.remove('dropping');
    if (!carriesFiles(e)) return;
    e.preventDefault();
    attachFiles(e.dataTransfer.files);
  });
  for (const type of ['dragover', 'drop']) window.addEventListener(type, (e) => { if (carriesFiles(e)) e.preventDefault(); });
}
