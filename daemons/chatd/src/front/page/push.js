/*
 * push.js — "Notify me on this device": the switch at the foot of the chat
 * list. On, it asks the browser for permission to notify, registers the
 * service worker (sw.js, scope /), subscribes the browser's push manager
 * with chatd's VAPID key (GET /push/key) and hands chatd what the browser
 * gave (POST /push/subscribe). Off, chatd forgets the subscription (DELETE
 * /push/subscribe) and the browser drops it. chatd then pushes, with no tab
 * open, when a run ends, fails or waits for an answer in a chat no tab is
 * looking at, and for each inbox entry: a title and a link, shown by sw.js.
 * Web Push needs a secure page (https, or http on localhost/127.0.0.1); on
 * a plain-http address of the LAN the switch says so and stays off.
 */
'use strict';

const push = { busy: false };

const pushSwitch = () => $('#push-switch');
const pushNote = () => $('#push-note');

function pushSupported() {
  return window.isSecureContext && 'serviceWorker' in navigator && 'PushManager' in window && 'Notification' in window;
}

/** The VAPID key as bytes, from base64url. */
function keyBytes(text) {
  const b64 = text.replace(/-/g, '+').replace(/_/g, '/');
  const raw = atob(b64 + '='.repeat((4 - (b64.length % 4)) % 4));
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

function pushSay(text) {
  pushNote().textContent = text;
  pushNote().hidden = !text;
}

async function pushSubscription() {
  const registration = await navigator.serviceWorker.getRegistration('/');
  return registration ? registration.pushManager.getSubscription() : null;
}

async function pushOn() {
  const permission = await Notification.requestPermission();
  if (permission !== 'granted') {
    throw new Error('This browser does not allow notifications from this page. Allow them in its site settings, then turn this on again.');
  }
  const registration = await navigator.serviceWorker.register('/sw.js', { scope: '/' });
  const { public_key: key } = await api('GET', '/push/key');
  let subscription;
  try {
    subscription = await registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(key) });
  } catch (error) {
    throw new Error(`The browser could not subscribe to its push service (${error.message || error.name}). It needs to reach its vendor's push service on the internet.`);
  }
  try {
    await api('POST', '/push/subscribe', subscription.toJSON());
  } catch (error) {
    await subscription.unsubscribe().catch(() => {});
    throw error;
  }
}

async function pushOff() {
  const subscription = await pushSubscription();
  if (!subscription) return;
  await api('DELETE', '/push/subscribe', { endpoint: subscription.endpoint });
  await subscription.unsubscribe().catch(() => {});
}

async function onPushSwitch(event) {
  const box = event.currentTarget;
  const wanted = box.checked;
  if (push.busy) return;
  push.busy = true;
  box.disabled = true;
  pushSay(wanted ? 'Turning on…' : '');
  try {
    if (wanted) await pushOn();
    else await pushOff();
    pushSay(wanted ? 'On: this device is told when a reply is ready, fails or waits for you.' : '');
  } catch (error) {
    box.checked = !wanted;
    pushSay(error.message || String(error));
  } finally {
    push.busy = false;
    box.disabled = false;
  }
}

/**
 * This browser's subscription handed to chatd again when the page goes live:
 * chatd may have let it go (an 11th browser, a 410, a new key) while the
 * browser still holds it, and the switch would say On with nothing arriving.
 */
async function renewPush() {
  if (!pushSupported() || push.busy) return;
  try {
    const subscription = await pushSubscription();
    if (subscription && Notification.permission === 'granted') await api('POST', '/push/subscribe', subscription.toJSON());
  } catch (error) {
    pushSay(`This device may not be told: ${error.message || error}`);
  }
}

/** Before signing out: this device stops being told about this box's chats. */
async function pushOffForSignOut() {
  if (!pushSupported()) return;
  await pushOff().catch(() => {});
  pushSwitch().checked = false;
}

/** Shows whether this browser is subscribed now. */
async function refreshPush() {
  try {
    const subscription = await pushSubscription();
    pushSwitch().checked = Boolean(subscription) && Notification.permission === 'granted';
  } catch {
    pushSwitch().checked = false;
  }
}

function initPush() {
  const box = el('input', { id: 'push-switch', type: 'checkbox', role: 'switch', 'aria-describedby': 'push-note', onchange: onPushSwitch });
  $('#sidebar').append(el('div', { id: 'push-setting' },
    el('label', { for: 'push-switch' }, box, ' Notify me on this device'),
    el('p', { id: 'push-note', class: 'muted', 'aria-live': 'polite', hidden: true })));
  if (!pushSupported()) {
    box.disabled = true;
    pushSay('Notifications need this page on https, or on localhost, in a browser with Web Push.');
    return;
  }
  // A click on a notification while a tab is open: sw.js asks it to go there.
  navigator.serviceWorker.addEventListener('message', (event) => {
    const url = event.data && event.data.type === 'open' ? String(event.data.url) : '';
    if (url.startsWith('/#/')) location.hash = url.slice(1);
  });
  refreshPush();
}
