//! Uploads under load and chatd's SIGKILLs (docs/files.md "Uploads"): a
//! driver puts files of 256 KiB to 8 MiB into the soak's chats as
//! `multipart/form-data`, whole or cut off part-way on purpose, while the
//! killer does its work. Held to `Inv::Uploads` once the load ends: a put
//! chatd answered 201 is there with its bytes; a cut one is not there at
//! all; one whose answer a kill took is either whole or absent. A file
//! with other bytes than its upload (a partial one kept) is the fault.

use super::*;

use tandem_tests::harness::{file_head, form_body, form_type, put_head, wait_until, FormPart};

/// What a put should have left.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Expect {
    Whole,
    Absent,
    WholeOrAbsent,
}

struct Record {
    chat: String,
    path: String,
    seed: u64,
    size: usize,
    expect: Expect,
}

#[derive(Default)]
struct Tally {
    answered: u64,
    cut: u64,
    unknown: u64,
    bytes: u64,
    whole_found: u64,
    absent_found: u64,
}

/// The bytes of upload `seed`: `size` of them, from a small PRNG.
fn content(seed: u64, size: usize) -> Vec<u8> {
    let mut state = seed | 1;
    (0..size)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// Drives uploads while the load lasts, then checks every one; the
/// summary lines.
pub(crate) async fn drive(shared: Arc<Shared>, seed: u64) -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut records = Vec::new();
    let mut tally = Tally::default();
    let started = Instant::now();
    let mut n = 0u64;
    while shared.phase() == Phase::Load {
        n += 1;
        let chat = shared.chats[rng.random_range(0..shared.chats.len())].clone();
        let size = rng.random_range(256 << 10..8 << 20);
        let record_seed = seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let path = format!("soak-uploads/u{n}.bin");
        let bytes = content(record_seed, size);
        let expect = if rng.random_bool(0.3) {
            let keep = rng.random_range(0.1..0.9);
            shared.fault("upload cut part-way");
            cut_put(&shared, &chat, &path, &bytes, keep).await;
            tally.cut += 1;
            Expect::Absent
        } else {
            match put(&shared, &chat, &path, &bytes).await {
                Some(201) => {
                    tally.answered += 1;
                    Expect::Whole
                }
                Some(status) => {
                    shared.violate(
                        Inv::Uploads,
                        format!("chat {chat}: the put of {path} ({size} bytes) answered {status}"),
                    );
                    Expect::WholeOrAbsent
                }
                None => {
                    tally.unknown += 1;
                    Expect::WholeOrAbsent
                }
            }
        };
        tally.bytes += size as u64;
        records.push(Record {
            chat,
            path,
            seed: record_seed,
            size,
            expect,
        });
        // Pacing of the load, not a wait for anything.
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..400))).await;
    }
    let load_s = started.elapsed().as_secs_f64();
    for record in &records {
        check(&shared, record, &mut tally).await;
    }
    vec![
        format!(
            "uploads: {} put ({} answered 201, {} whose answer a kill took), {} cut part-way on purpose; {:.1} MiB in {load_s:.0} s",
            records.len(),
            tally.answered,
            tally.unknown,
            tally.cut,
            tally.bytes as f64 / f64::from(1u32 << 20),
        ),
        format!(
            "uploads checked: {} there with their bytes, {} absent (every cut one, and any the kills took)",
            tally.whole_found, tally.absent_found
        ),
    ]
}

/// A whole put; the status, `None` when chatd gave no answer.
async fn put(shared: &Shared, chat: &str, path: &str, bytes: &[u8]) -> Option<u16> {
    let body = form_body(&[FormPart::file(
        "soak.bin",
        "application/octet-stream",
        bytes.to_vec(),
    )]);
    let response = shared
        .http
        .put(format!(
            "{}/v1/chat-app/conversations/{chat}/files/content?path={path}",
            shared.chatd_url
        ))
        .header("x-forward-key", FORWARD_KEY)
        .header("content-type", form_type())
        .timeout(Duration::from_secs(60))
        .body(body)
        .send()
        .await
        .ok()?;
    Some(response.status().as_u16())
}

/// A put whose connection is dropped after `keep` of the file was sent.
async fn cut_put(shared: &Shared, chat: &str, path: &str, bytes: &[u8], keep: f64) {
    let Ok(mut socket) = TcpStream::connect(("127.0.0.1", shared.chatd_port)).await else {
        return;
    };
    let head = put_head(FORWARD_KEY, chat, path, bytes.len() as u64 + 512);
    let sent = (bytes.len() as f64 * keep) as usize;
    let _ = socket.write_all(head.as_bytes()).await;
    let _ = socket
        .write_all(&file_head("soak.bin", "application/octet-stream"))
        .await;
    let _ = socket.write_all(&bytes[..sent]).await;
    let _ = socket.flush().await;
}

/// Reads the upload's path back (chatd may be restarting: bounded) and
/// holds it to what the put should have left.
async fn check(shared: &Shared, record: &Record, tally: &mut Tally) {
    let url = format!(
        "{}/v1/chat-app/conversations/{}/files/content?path={}",
        shared.chatd_url, record.chat, record.path
    );
    let read = wait_until("an upload read back", Duration::from_secs(60), || async {
        let response = shared
            .http
            .get(&url)
            .header("x-forward-key", FORWARD_KEY)
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .ok()?;
        match response.status().as_u16() {
            200 => Some(Some(response.bytes().await.ok()?)),
            404 => Some(None),
            _ => None,
        }
    })
    .await;
    let (chat, path) = (&record.chat, &record.path);
    match read {
        Err(err) => shared.violate(
            Inv::Uploads,
            format!("chat {chat}: {path} could not be read back: {err:#}"),
        ),
        Ok(None) if record.expect == Expect::Whole => shared.violate(
            Inv::Uploads,
            format!(
                "chat {chat}: {path} ({} bytes) was answered 201 and is gone",
                record.size
            ),
        ),
        Ok(None) => tally.absent_found += 1,
        Ok(Some(_)) if record.expect == Expect::Absent => shared.violate(
            Inv::Uploads,
            format!("chat {chat}: {path} was cut part-way and is there"),
        ),
        Ok(Some(found)) => {
            if found.as_ref() == content(record.seed, record.size).as_slice() {
                tally.whole_found += 1;
            } else {
                shared.violate(
                    Inv::Uploads,
                    format!(
                        "chat {chat}: {path} holds {} bytes that are not the {} its put sent",
                        found.len(),
                        record.size
                    ),
                );
            }
        }
    }
}
