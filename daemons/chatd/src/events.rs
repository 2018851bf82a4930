//! The live side of the event log. The writer publishes each committed batch
//! here; every device attached to a conversation reads from a shared ring of
//! recent events (frames serialized once, shared by all devices) and falls
//! back to the database when it is further behind than the ring holds.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tandem_shared::sync::lock;
use tokio::sync::watch;

use crate::kinds::EventKind;

/// One committed event, with its SSE frame made once for every device.
#[derive(Debug)]
pub struct Event {
    pub conversation_id: String,
    pub seq: i64,
    pub kind: EventKind,
    /// The JSON data, as stored.
    pub data: String,
    /// `id: <seq>\nevent: <kind>\ndata: <data>\n\n`
    pub frame: Bytes,
}

impl Event {
    pub fn new(conversation_id: String, seq: i64, kind: EventKind, data: String) -> Event {
        let frame = Bytes::from(format!("id: {seq}\nevent: {kind}\ndata: {data}\n\n"));
        Event {
            conversation_id,
            seq,
            kind,
            data,
            frame,
        }
    }
}

/// Events kept in memory per conversation: a little more than the distance
/// at which a device is told to reset, so a device inside that distance is
/// served from memory.
pub const RING: usize = 2_100;

struct Channel {
    ring: Mutex<VecDeque<Arc<Event>>>,
    head: watch::Sender<i64>,
}

/// Told of each published event with the number of devices that held the
/// chat's event stream open at that moment (the push queue's door: it must
/// be quick, it runs on the writer thread).
pub type Tap = Box<dyn Fn(&Event, usize) + Send + Sync>;

/// Per-conversation channels of committed events.
#[derive(Clone, Default)]
pub struct Hub {
    channels: Arc<Mutex<HashMap<String, Arc<Channel>>>>,
    tap: Arc<std::sync::OnceLock<Tap>>,
}

/// What a device gets when it asks for events after its cursor.
pub enum Fetch {
    /// Events in order, starting right after the cursor.
    Events(Vec<Arc<Event>>),
    /// The ring no longer holds the next event: read it from the database.
    FromDatabase,
}

/// A device's view of one conversation's channel.
pub struct Subscription {
    channel: Arc<Channel>,
    head: watch::Receiver<i64>,
}

impl Hub {
    fn channel(&self, conversation_id: &str, head: i64) -> Arc<Channel> {
        // The lock only guards the map; poisoning would mean a panic while
        // inserting, which cannot leave the map half-changed.
        let mut channels = lock(&self.channels);
        channels
            .entry(conversation_id.to_string())
            .or_insert_with(|| {
                Arc::new(Channel {
                    ring: Mutex::new(VecDeque::new()),
                    head: watch::Sender::new(head),
                })
            })
            .clone()
    }

    /// Sets the tap (once; a second call changes nothing).
    pub fn set_tap(&self, tap: Tap) {
        let _ = self.tap.set(tap);
    }

    /// Devices holding a conversation's event stream open now.
    pub fn watchers(&self, conversation_id: &str) -> usize {
        lock(&self.channels)
            .get(conversation_id)
            .map_or(0, |c| c.head.receiver_count())
    }

    /// Publishes one conversation's committed events, in seq order.
    pub fn publish(&self, conversation_id: &str, events: Vec<Arc<Event>>) {
        let Some(last) = events.last().map(|e| e.seq) else {
            return;
        };
        let channel = self.channel(conversation_id, 0);
        if let Some(tap) = self.tap.get() {
            let watchers = channel.head.receiver_count();
            for event in &events {
                tap(event, watchers);
            }
        }
        {
            let mut ring = lock(&channel.ring);
            let head = *channel.head.borrow();
            for event in events {
                if event.seq <= head {
                    continue;
                }
                // A gap (a channel made by a device after this batch was
                // committed but before it was published) is never served
                // from the ring: start the ring over from this event.
                if ring.back().is_some_and(|b| b.seq + 1 != event.seq) {
                    ring.clear();
                }
                ring.push_back(event);
            }
            while ring.len() > RING {
                ring.pop_front();
            }
        }
        channel.head.send_if_modified(|head| {
            if last > *head {
                *head = last;
                true
            } else {
                false
            }
        });
    }

    /// Attaches a device. `stored_head` is the conversation's last seq as the
    /// database has it, used when no channel exists yet.
    pub fn subscribe(&self, conversation_id: &str, stored_head: i64) -> Subscription {
        // The receiver is made under the map's lock: `sweep` (which takes the
        // same lock) then sees it and cannot drop the channel between the
        // lookup and the subscription, which would leave a device on a
        // channel the writer no longer publishes to.
        let mut channels = lock(&self.channels);
        let channel = channels
            .entry(conversation_id.to_string())
            .or_insert_with(|| {
                Arc::new(Channel {
                    ring: Mutex::new(VecDeque::new()),
                    head: watch::Sender::new(stored_head),
                })
            })
            .clone();
        let head = channel.head.subscribe();
        drop(channels);
        channel.head.send_if_modified(|head| {
            if stored_head > *head {
                *head = stored_head;
                true
            } else {
                false
            }
        });
        Subscription { channel, head }
    }

    /// Drops channels nobody listens to, keeping memory flat over time.
    pub fn sweep(&self) {
        let mut channels = lock(&self.channels);
        channels.retain(|_, c| c.head.receiver_count() > 0);
    }

    pub fn channel_count(&self) -> usize {
        lock(&self.channels).len()
    }
}

impl Subscription {
    /// The last committed seq this device knows of.
    pub fn head(&self) -> i64 {
        *self.head.borrow()
    }

    /// Waits until the head moves past `cursor` (returns at once if it has).
    pub async fn wait_past(&mut self, cursor: i64) {
        let _ = self.head.wait_for(|head| *head > cursor).await;
    }

    /// Events after `cursor` up to the head, from memory when it has them.
    pub fn fetch(&self, cursor: i64, max: usize) -> Fetch {
        let ring = lock(&self.channel.ring);
        let Some(first) = ring.front().map(|e| e.seq) else {
            return Fetch::FromDatabase;
        };
        if cursor + 1 < first {
            return Fetch::FromDatabase;
        }
        let skip = (cursor + 1 - first) as usize;
        Fetch::Events(ring.iter().skip(skip).take(max).cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: i64) -> Arc<Event> {
        Arc::new(Event::new(
            "c".into(),
            seq,
            EventKind::TextDelta,
            "{}".into(),
        ))
    }

    fn seqs(fetch: Fetch) -> Vec<i64> {
        match fetch {
            Fetch::Events(events) => events.iter().map(|e| e.seq).collect(),
            Fetch::FromDatabase => vec![-1],
        }
    }

    #[test]
    fn a_subscriber_survives_a_sweep_and_sees_later_events() {
        let hub = Hub::default();
        let sub = hub.subscribe("c", 3);
        hub.sweep();
        hub.publish("c", vec![event(4), event(5)]);
        assert_eq!(sub.head(), 5);
        assert_eq!(seqs(sub.fetch(3, 10)), vec![4, 5]);
    }

    #[test]
    fn the_ring_serves_what_it_holds_and_sends_older_cursors_to_the_database() {
        let hub = Hub::default();
        hub.publish("c", (1..=RING as i64 + 10).map(event).collect());
        let sub = hub.subscribe("c", 0);
        assert_eq!(
            seqs(sub.fetch(5, 10)),
            vec![-1],
            "seq 6 fell out of the ring"
        );
        let last = RING as i64 + 10;
        assert_eq!(seqs(sub.fetch(last - 2, 10)), vec![last - 1, last]);
    }

    #[test]
    fn the_tap_hears_each_event_with_the_devices_attached_then() {
        let hub = Hub::default();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let into = heard.clone();
        hub.set_tap(Box::new(move |e, watchers| {
            lock(&into).push((e.seq, watchers))
        }));
        hub.publish("c", vec![event(1)]);
        let sub = hub.subscribe("c", 1);
        assert_eq!(hub.watchers("c"), 1);
        hub.publish("c", vec![event(2), event(3)]);
        drop(sub);
        hub.publish("c", vec![event(4)]);
        assert_eq!(*lock(&heard), vec![(1, 0), (2, 1), (3, 1), (4, 0)]);
        assert_eq!(hub.watchers("nobody"), 0);
    }

    #[test]
    fn unwatched_channels_are_swept() {
        let hub = Hub::default();
        hub.publish("c", vec![event(1)]);
        let sub = hub.subscribe("d", 0);
        hub.sweep();
        assert_eq!(hub.channel_count(), 1, "only the watched channel stays");
        drop(sub);
        hub.sweep();
        assert_eq!(hub.channel_count(), 0);
    }
}
