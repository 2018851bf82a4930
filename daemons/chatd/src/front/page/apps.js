/*
 * tandem chat page: MCP Apps, a tool's own page under its call.
 *
 *   frame    a call whose tool line carries a page (`card.kind: "mcp_app"`)
 *            gets a frame of `…/mcp-apps/frame`: chatd reads the page from
 *            the server and serves it under a policy of its own (sandboxed
 *            scripts, an origin of its own, no network but the https/wss
 *            origins the server asked for); the frame element says
 *            `sandbox="allow-scripts"` as well. No token goes near it.
 *   bridge   the page speaks JSON-RPC by postMessage (the MCP Apps
 *            extension). Only messages from a frame of ours are read, each
 *            with its call's server: `ui/initialize` (then the call's
 *            arguments and result), `tools/call` (through chatd's
 *            `…/mcp-apps/call`, which applies the server's rules),
 *            `ui/notifications/size-changed` (60 to 600 px), `ui/message`
 *            (shown as a suggestion to send or dismiss, never sent by
 *            itself), `ui/open-link` (http/https, a link opened on a click),
 *            `ui/request-display-mode` (inline only), `ping`. Anything else
 *            asked is "method not found". A page that does not start the
 *            handshake within 10 s of loading (refused, broken) loses its
 *            box; the text result stays.
 */
'use strict';

/** The MCP Apps protocol version this host speaks. */
const APP_PROTOCOL = '2026-01-26';
const APP_MIN_HEIGHT = 60;
const APP_MAX_HEIGHT = 600;
/** A page's call may take as long as a model's (chatd's limit is 360 s without news). */
const APP_CALL_MS = 400000;
/** A page that has not said `ui/initialize` this long after it loaded did not load: its box goes. */
const APP_START_MS = 10000;

const isAppCard = (card) => !!card && typeof card === 'object' && card.kind === 'mcp_app'
  && typeof card.server === 'string' && typeof card.resource_uri === 'string';

/** Each frame of ours with what its page may ask for. */
const appFrames = new Set();

/** The frame of a call's page, made once: under the tool line, before its text result. */
function fillAppFrame(c, node, call) {
  const card = isAppCard(call.app) ? call.app : null;
  const key = card ? `${card.server} ${card.resource_uri}` : '';
  if (node.appKey === key) return;
  node.appKey = key;
  if (node.app) {
    node.app.remove();
    node.app = null;
  }
  if (!card) return;
  const query = `server=${enc(card.server)}&uri=${enc(card.resource_uri)}`;
  const frame = el('iframe', {
    class: 'mcp-app-frame',
    sandbox: 'allow-scripts',
    title: `${card.tool || 'Tool'}: its page`,
    referrerpolicy: 'no-referrer',
    src: `${API}/conversations/${enc(c.id)}/mcp-apps/frame?${query}`,
  });
  const notes = el('div', { class: 'mcp-app-notes' });
  const box = el('div', { class: 'mcp-app', 'data-server': card.server }, frame, notes);
  node.app = box;
  node.root.insertBefore(box, node.result);
  // A page is to be seen: its calls' group opens.
  const group = node.root.closest('details');
  if (group) group.open = true;
  appFrameOf(null); // frames gone with an earlier view are forgotten
  const entry = { chat: c.id, call, card, frame, notes, started: false, ready: false };
  appFrames.add(entry);
  // A page refused or broken says nothing: its box goes, the text result stays.
  frame.addEventListener('load', () => setTimeout(() => {
    if (!entry.started) box.hidden = true;
  }, APP_START_MS));
}

/** The frame of ours `source` is the window of; frames gone from the page are forgotten. */
function appFrameOf(source) {
  let found = null;
  for (const entry of appFrames) {
    if (!entry.frame.isConnected) appFrames.delete(entry);
    else if (source && entry.frame.contentWindow === source) found = entry;
  }
  return found;
}

function postToApp(entry, message) {
  if (entry.frame.contentWindow) entry.frame.contentWindow.postMessage({ jsonrpc: '2.0', ...message }, '*');
}

function onAppMessage(event) {
  const entry = appFrameOf(event.source);
  if (!entry) return; // not a frame of ours: ignored
  const msg = event.data;
  if (!msg || typeof msg !== 'object' || msg.jsonrpc !== '2.0' || typeof msg.method !== 'string') return;
  const answer = (result) => postToApp(entry, { id: msg.id, result });
  const fail = (code, message) => postToApp(entry, { id: msg.id, error: { code, message } });
  const asked = msg.id !== undefined && msg.id !== null;
  const params = msg.params && typeof msg.params === 'object' ? msg.params : {};
  switch (msg.method) {
    case 'ui/initialize':
      if (!asked) return;
      // Each load of the page starts here, and gets the call again.
      entry.started = true;
      entry.ready = false;
      entry.frame.parentNode.hidden = false;
      return answer({
        protocolVersion: typeof params.protocolVersion === 'string' ? params.protocolVersion : APP_PROTOCOL,
        hostInfo: { name: 'tandem', version: '1' },
        hostCapabilities: { openLinks: {}, serverTools: {}, message: {} },
        hostContext: {
          theme: matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light',
          displayMode: 'inline',
          availableDisplayModes: ['inline'],
          platform: 'web',
          locale: navigator.language,
          timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone,
        },
      });
    case 'ui/notifications/initialized':
      // The call's own arguments and result, once the page is ready for them.
      if (entry.ready) return;
      entry.ready = true;
      postToApp(entry, { method: 'ui/notifications/tool-input', params: { arguments: entry.card.input || {} } });
      if (entry.card.result) postToApp(entry, { method: 'ui/notifications/tool-result', params: entry.card.result });
      return;
    case 'ui/notifications/size-changed': {
      const height = Number(params.height);
      if (Number.isFinite(height)) {
        entry.frame.style.height = `${Math.round(Math.min(APP_MAX_HEIGHT, Math.max(APP_MIN_HEIGHT, height)))}px`;
      }
      return;
    }
    case 'tools/call':
      if (!asked) return;
      return appCall(entry, params).then(answer, (error) => fail(-32000, error.message || 'the call failed'));
    case 'ui/open-link':
      if (!asked) return;
      if (!offerLink(entry, params.url)) return fail(-32602, 'only an http or https link opens');
      return answer({});
    case 'ui/message':
      if (!asked) return;
      if (!offerMessage(entry, params)) return fail(-32602, 'a message is text');
      return answer({});
    case 'ui/request-display-mode':
      return asked ? answer({ mode: 'inline' }) : undefined;
    case 'ping':
      return asked ? answer({}) : undefined;
    default:
      if (asked) fail(-32601, 'method not found');
  }
}

/**
 * A page's tool call, made by chatd in the chat's session with its server: with a time of its
 * own (api()'s 8 s is for the page's own requests), and a slow or refused call is the page's
 * to show, not the chat's banner.
 */
async function appCall(entry, params) {
  const body = { server: entry.card.server, tool: String(params.name || '') };
  if (params.arguments && typeof params.arguments === 'object') body.arguments = params.arguments;
  const path = `/conversations/${enc(entry.chat)}/mcp-apps/call`;
  return (await api('POST', path, body, { ms: APP_CALL_MS, quiet: true })).result;
}

/** A link the page wants opened: shown under it, opened on a click. */
function offerLink(entry, url) {
  let parsed;
  try { parsed = new URL(String(url)); } catch { return false; }
  if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') return false;
  const link = el('a', { class: 'mcp-app-link', href: parsed.href, target: '_blank', rel: 'noopener noreferrer', text: `Open ${parsed.host}` });
  entry.notes.replaceChildren(el('p', { class: 'mcp-app-note' }, 'The page offers a link: ', link));
  return true;
}

/** A message the page suggests: the person sends it or not. */
function offerMessage(entry, params) {
  const parts = Array.isArray(params.content) ? params.content : [];
  const text = parts.filter((p) => p && p.type === 'text' && typeof p.text === 'string').map((p) => p.text).join('\n').slice(0, 4000);
  if (!text.trim()) return false;
  const note = el('div', { class: 'mcp-app-suggestion', role: 'group', 'aria-label': 'A message the page suggests' },
    el('p', { class: 'mcp-app-suggested', text }),
    button('primary mcp-app-send', 'Send', () => { note.remove(); sendSuggestion(entry, text); }),
    button('mcp-app-dismiss', 'Dismiss', () => note.remove()));
  entry.notes.replaceChildren(note);
  return true;
}

/** Sends a suggestion the person chose to send, alone: the draft and its attachments stay. */
async function sendSuggestion(entry, text) {
  try {
    await api('POST', `/conversations/${enc(entry.chat)}/messages`, { text });
  } catch (error) {
    showError(error); // app.js
  }
}

function initApps() {
  window.addEventListener('message', onAppMessage);
}
