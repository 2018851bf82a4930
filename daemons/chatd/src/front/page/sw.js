/*
 * sw.js — tandem's service worker, served by the front at /sw.js (scope /)
 * and registered by push.js when a person turns on "Notify me on this
 * device". It only shows chatd's pushes: each is {title, url}, shown as a
 * notification with that title and nothing else (chatd never puts a
 * message's text in a push); a click focuses an open tab of the page and
 * opens the link there, or opens a new tab at it. It has no fetch handler
 * and caches nothing: the page is always the front's own.
 */
'use strict';

/**
 * A push's link, kept to a chat of this page: chatd only sends `/#/…`, and
 * past the `#` nothing can change the origin. Anything else opens the page
 * (a bare `/` check let "/\\evil.example" through: a browser reads the
 * backslash as a slash, so it opened evil.example).
 */
function safeLink(url) {
  return typeof url === 'string' && url.startsWith('/#/') ? url : '/';
}

self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));

self.addEventListener('push', (event) => {
  let data = {};
  try {
    data = event.data ? event.data.json() : {};
  } catch {
    data = {};
  }
  const title = typeof data.title === 'string' && data.title ? data.title.slice(0, 120) : 'tandem';
  const url = safeLink(data.url);
  // One notification per link: a newer one about the same chat replaces it.
  event.waitUntil(self.registration.showNotification(title, {
    tag: url,
    renotify: true,
    icon: '/chat-app/icon.svg',
    data: { url },
  }));
});

self.addEventListener('notificationclick', (event) => {
  event.notification.close();
  const url = safeLink(event.notification.data && event.notification.data.url);
  event.waitUntil((async () => {
    const tabs = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
    const tab = tabs.find((t) => new URL(t.url).origin === self.location.origin);
    if (tab) {
      await tab.focus();
      tab.postMessage({ type: 'open', url }); // push.js moves the page there
      return;
    }
    await self.clients.openWindow(url);
  })());
});
