//! The documents part (`--parts documents`): real documents attached to
//! messages through chatd's multipart route (`POST …/messages` as a form)
//! while the soak's kills go on, read by chatd's reader child process.
//! The files are docfixtures', written once into the part's folder: a good
//! PDF, a workbook, a PDF cut in half and a zip bomb (a .docx). One send in
//! two of a good document carries a version of its own (a PDF comment after
//! its end, a zip comment on the workbook): new bytes to chatd, so the reader
//! runs again and again under the kills instead of answering from its cache.
//!
//! `Inv::Documents` at the end (`documents_checks.rs`): every send chatd
//! accepted is in its chat, and each of its documents is either its text
//! (`## Page 1`, `## Sheet Summary`) or one line "it could not be read: …"
//! with the cause its bytes deserve; a good document is never "could not be
//! read", and chat.sqlite3's `document_texts` keeps no failure for any good
//! version's sha-256 (a kill during a read must not be kept as the
//! document's verdict); the chats' search finds the PDFs' page 3, and a
//! PDF deleted at the end no more. chatd's memory is held by `Inv::Rss` as ever.

use super::*;

use std::collections::BTreeSet;
use std::io::Cursor;

use futures_util::future::BoxFuture;
use reqwest::Method;
use sha2::{Digest, Sha256};
use tandem_tests::docfixtures;
use tandem_tests::harness::{form_body, form_type, wait_until, FormPart};

use crate::documents_checks::check;

/// Chats of its own: the soak's chats carry the engine's token answers that
/// `Inv::Answers` counts, which a document's text must not disturb.
const OWN_CHATS: usize = 4;
/// How long a send is asked again (same key) while chatd is down.
pub(crate) const RIDE: Duration = Duration::from_secs(45);

/// One of the four documents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Doc {
    Pdf,
    Workbook,
    Truncated,
    Bomb,
}

pub(crate) const DOCS: [Doc; 4] = [Doc::Pdf, Doc::Workbook, Doc::Truncated, Doc::Bomb];

impl Doc {
    /// The file's name in send `n` (unique, so its line is found by it).
    pub(crate) fn name(self, n: u64) -> String {
        match self {
            Doc::Pdf => format!("d{n}-report.pdf"),
            Doc::Workbook => format!("d{n}-book.xlsx"),
            Doc::Truncated => format!("d{n}-cut.pdf"),
            Doc::Bomb => format!("d{n}-bomb.docx"),
        }
    }

    /// The start of the name, which a renamed upload (`… (2).pdf`) keeps.
    pub(crate) fn stem(self, n: u64) -> String {
        let name = self.name(n);
        name.rsplit_once('.')
            .map_or(name.clone(), |(s, _)| s.to_string())
    }

    fn mime(self) -> &'static str {
        match self {
            Doc::Pdf | Doc::Truncated => "application/pdf",
            Doc::Workbook => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            Doc::Bomb => "application/octet-stream",
        }
    }

    pub(crate) fn good(self) -> bool {
        matches!(self, Doc::Pdf | Doc::Workbook)
    }

    /// What its part of the message must show: the text's first mark, or
    /// the start of the cause after "it could not be read: ".
    pub(crate) fn expect(self) -> &'static str {
        match self {
            Doc::Pdf => "## Page 1",
            Doc::Workbook => "## Sheet Summary",
            Doc::Truncated => "it is damaged",
            Doc::Bomb => "it unpacks to more than it may",
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Doc::Pdf => "good PDF",
            Doc::Workbook => "workbook",
            Doc::Truncated => "truncated PDF",
            Doc::Bomb => "zip bomb",
        }
    }
}

/// The fixtures' bytes, read once.
struct Fixtures {
    pdf: Vec<u8>,
    workbook: Vec<u8>,
    truncated: Vec<u8>,
    bomb: Vec<u8>,
}

impl Fixtures {
    fn write(dir: &Path) -> anyhow::Result<Fixtures> {
        let read = |path: PathBuf| {
            std::fs::read(&path).with_context(|| format!("reading {}", path.display()))
        };
        Ok(Fixtures {
            pdf: read(docfixtures::pdf(dir)?)?,
            workbook: read(docfixtures::workbook(dir)?)?,
            truncated: read(docfixtures::truncated_pdf(dir)?)?,
            bomb: read(docfixtures::zip_bomb(dir)?)?,
        })
    }

    /// The bytes of `doc`, version `v` of it for a good one (0: as written).
    fn bytes(&self, doc: Doc, v: u64) -> anyhow::Result<Vec<u8>> {
        Ok(match (doc, v) {
            (Doc::Pdf, 0) => self.pdf.clone(),
            // A comment after %%EOF: another file, the same pages.
            (Doc::Pdf, v) => [self.pdf.as_slice(), format!("\n% soak {v}\n").as_bytes()].concat(),
            (Doc::Workbook, 0) => self.workbook.clone(),
            (Doc::Workbook, v) => commented_zip(&self.workbook, &format!("soak {v}"))?,
            (Doc::Truncated, _) => self.truncated.clone(),
            (Doc::Bomb, _) => self.bomb.clone(),
        })
    }
}

/// `zip` with its entries copied as they are and `comment` as the archive's.
fn commented_zip(zip_bytes: &[u8], comment: &str) -> anyhow::Result<Vec<u8>> {
    let mut archive = zip::ZipArchive::new(Cursor::new(zip_bytes))?;
    let mut out = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for i in 0..archive.len() {
        out.raw_copy_file(archive.by_index_raw(i)?)?;
    }
    out.set_comment(comment)?;
    Ok(out.finish()?.into_inner())
}

pub(crate) fn sha_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether chatd's answer to a send was seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// 202: the message (or a waiting one) is stored.
    Accepted,
    /// Refused with this status: nothing may be stored.
    Refused(u16),
    /// No answer within `RIDE`: stored or not.
    Lost,
}

/// One message sent with documents.
pub(crate) struct Sent {
    pub(crate) n: u64,
    pub(crate) chat: String,
    pub(crate) docs: Vec<Doc>,
    pub(crate) answer: Answer,
    /// Tries until the answer: more than one when a kill took an answer.
    pub(crate) tries: u64,
}

impl Sent {
    /// The mark its text carries, unique to it.
    pub(crate) fn mark(&self) -> String {
        format!("id=doc{}]", self.n)
    }
}

/// What the load did, for the checks.
pub(crate) struct Run {
    pub(crate) own: Vec<String>,
    pub(crate) sends: Vec<Sent>,
    /// sha-256 of every good version sent, with what it is.
    pub(crate) good: BTreeMap<String, Doc>,
    /// sha-256 of the bad ones.
    pub(crate) bad: BTreeMap<String, Doc>,
    pub(crate) db: PathBuf,
    pub(crate) bytes_sent: u64,
}

pub(crate) struct DocumentsPart {
    fixtures: Fixtures,
    /// Whether versions of the good files read as the files do (checked
    /// in-process once): else every send carries the files as written.
    versions: bool,
    every: Duration,
    run: Mutex<Option<Run>>,
}

impl DocumentsPart {
    pub(crate) fn new(ctx: &Prepare) -> anyhow::Result<DocumentsPart> {
        use chatd::documents::formats::{extract, DocKind};
        let fixtures = Fixtures::write(&ctx.dir)?;
        let reads = |kind: DocKind, bytes: &[u8], mark: &str| {
            extract(kind, bytes).is_ok_and(|e| e.text.contains(mark))
        };
        anyhow::ensure!(
            reads(DocKind::Pdf, fixtures.pdf.as_slice(), Doc::Pdf.expect())
                && reads(
                    DocKind::Workbook,
                    fixtures.workbook.as_slice(),
                    Doc::Workbook.expect(),
                ),
            "the good fixtures do not read as documents in-process"
        );
        let versions = reads(
            DocKind::Pdf,
            fixtures.bytes(Doc::Pdf, 1)?.as_slice(),
            "## Page 1",
        ) && reads(
            DocKind::Workbook,
            fixtures.bytes(Doc::Workbook, 1)?.as_slice(),
            "## Sheet Summary",
        );
        if !versions {
            say("soak: documents: a commented version does not read in-process; sending the files as written");
        }
        Ok(DocumentsPart {
            fixtures,
            versions,
            every: Duration::from_secs_f64((ctx.duration / 6.0).clamp(10.0, 60.0)),
            run: Mutex::new(None),
        })
    }
}

impl Part for DocumentsPart {
    fn name(&self) -> PartName {
        PartName::Documents
    }

    fn drive(self: Arc<Self>, shared: Arc<Shared>, seed: u64) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let mut rng = StdRng::seed_from_u64(seed);
            let run = match start(&shared).await {
                Ok(run) => run,
                Err(err) => {
                    shared.violate(
                        Inv::Documents,
                        format!("documents: could not start: {err:#}"),
                    );
                    return;
                }
            };
            let run = self.load(&shared, run, &mut rng).await;
            settle(&shared, &run).await;
            *lock(&self.run) = Some(run);
        })
    }

    fn finish(self: Arc<Self>, shared: Arc<Shared>) -> BoxFuture<'static, PartEnd> {
        Box::pin(async move {
            let Some(run) = lock(&self.run).take() else {
                return PartEnd::default();
            };
            let mut totals = totals(&run, self.versions);
            totals.extend(check(&shared, &run).await);
            PartEnd {
                totals,
                ..PartEnd::default()
            }
        })
    }
}

/// chatd's database (found in its environment) and the chats of its own.
async fn start(shared: &Shared) -> anyhow::Result<Run> {
    let pid = shared.pid.load(Ordering::Relaxed);
    let environ = std::fs::read(format!("/proc/{pid}/environ"))
        .with_context(|| format!("reading chatd's (pid {pid}) environment"))?;
    let data = environ
        .split(|b| *b == 0)
        .filter_map(|kv| kv.strip_prefix(b"QSE_CHAT_DATA="))
        .next_back()
        .map(|v| PathBuf::from(String::from_utf8_lossy(v).into_owned()))
        .context("QSE_CHAT_DATA in chatd's environment")?;
    let mut own = Vec::new();
    for i in 0..OWN_CHATS {
        let body = json!({ "title": format!("soak documents {i}") });
        own.push(shared.new_chat(body, RIDE).await?);
    }
    Ok(Run {
        own,
        sends: Vec::new(),
        good: BTreeMap::new(),
        bad: BTreeMap::new(),
        db: data.join("chat.sqlite3"),
        bytes_sent: 0,
    })
}

impl DocumentsPart {
    /// Sends messages with documents while the load lasts.
    async fn load(&self, shared: &Shared, mut run: Run, rng: &mut StdRng) -> Run {
        let mut n = 0u64;
        let mut next_line = shared.t() + self.every.as_secs_f64();
        while shared.phase() == Phase::Load {
            n += 1;
            let chat = run.own[rng.random_range(0..run.own.len())].clone();
            let mut docs: Vec<Doc> = DOCS.into_iter().filter(|_| rng.random_bool(0.5)).collect();
            if docs.is_empty() {
                docs.push(DOCS[rng.random_range(0..DOCS.len())]);
            }
            let mut parts = vec![
                FormPart::setting("text", &format!("documents {n} [sim tokens=4 id=doc{n}]")),
                FormPart::setting("key", &format!("soak-doc-{n}")),
            ];
            for doc in &docs {
                let version = if self.versions && doc.good() && rng.random_bool(0.5) {
                    n
                } else {
                    0
                };
                let bytes = match self.fixtures.bytes(*doc, version) {
                    Ok(bytes) => bytes,
                    Err(err) => {
                        shared.violate(
                            Inv::Documents,
                            format!(
                                "documents: version {version} of the {}: {err:#}",
                                doc.as_str()
                            ),
                        );
                        continue;
                    }
                };
                let kept = if doc.good() {
                    &mut run.good
                } else {
                    &mut run.bad
                };
                kept.insert(sha_hex(&bytes), *doc);
                run.bytes_sent += bytes.len() as u64;
                parts.push(FormPart::file(&doc.name(n), doc.mime(), bytes));
            }
            let (answer, tries) = send(shared, &chat, form_body(&parts)).await;
            if tries > 1 {
                shared.fault("documents: a send's answer taken by a kill, sent again");
            }
            if let Answer::Refused(status) = answer {
                shared.violate(
                    Inv::Documents,
                    format!("documents: chat {chat}: send {n} was refused ({status})"),
                );
            }
            run.sends.push(Sent {
                n,
                chat,
                docs,
                answer,
                tries,
            });
            if shared.t() >= next_line {
                next_line += self.every.as_secs_f64();
                let accepted = run
                    .sends
                    .iter()
                    .filter(|s| s.answer == Answer::Accepted)
                    .count();
                let attached: usize = run.sends.iter().map(|s| s.docs.len()).sum();
                say(format!(
                    "  t={:6.1}s  documents: {} sends ({accepted} accepted), {attached} documents, {} versions of the good ones",
                    shared.t(),
                    run.sends.len(),
                    run.good.len()
                ));
            }
            // Pacing of the load, not a wait for anything.
            tokio::time::sleep(Duration::from_millis(rng.random_range(200..1200))).await;
        }
        run
    }
}

/// One send, asked again with the same key while chatd gives no answer.
async fn send(shared: &Shared, chat: &str, body: Vec<u8>) -> (Answer, u64) {
    let url = format!(
        "{}/v1/chat-app/conversations/{chat}/messages",
        shared.chatd_url
    );
    let mut tries = 0u64;
    let answered = wait_until("chatd to answer a send", RIDE, || {
        tries += 1;
        let request = shared
            .http
            .post(&url)
            .header("x-forward-key", FORWARD_KEY)
            .header("content-type", form_type())
            .timeout(Duration::from_secs(60))
            .body(body.clone());
        async move {
            let response = request.send().await.ok()?;
            Some(response.status().as_u16())
        }
    })
    .await;
    let answer = match answered {
        Ok(202) => Answer::Accepted,
        Ok(status) => Answer::Refused(status),
        Err(_) => Answer::Lost,
    };
    (answer, tries)
}

/// Waits (bounded) until its chats' runs ended; a message left waiting
/// after a kill is sent on as a person would (send-now).
async fn settle(shared: &Shared, run: &Run) {
    let bound = Duration::from_secs(110);
    for chat in &run.own {
        let path = format!("/conversations/{chat}");
        let ended = wait_until("its own chat's runs to end", bound, || async {
            let (status, snapshot) = shared.call(Method::GET, &path, None).await.ok()?;
            let open = snapshot["runs"].as_array()?.iter().any(|r| {
                !matches!(
                    r["status"].as_str(),
                    Some("done" | "stopped" | "failed" | "interrupted")
                )
            });
            let waiting = snapshot["pending"]
                .as_array()
                .is_some_and(|p| !p.is_empty());
            if status == 200 && !open && waiting {
                let _ = shared
                    .call(Method::POST, &format!("{path}/send-now"), Some(json!({})))
                    .await;
                return None;
            }
            (status == 200 && !open).then_some(())
        })
        .await;
        if ended.is_err() {
            shared.violate(
                Inv::Runs,
                format!("documents: chat {chat}'s runs had not ended {bound:?} after the load"),
            );
        }
    }
}

/// The summary's lines on what was sent.
fn totals(run: &Run, versions: bool) -> Vec<String> {
    let mut by_doc: BTreeMap<Doc, u64> = BTreeMap::new();
    for send in &run.sends {
        for doc in &send.docs {
            *by_doc.entry(*doc).or_default() += 1;
        }
    }
    let count = |answer: Answer| run.sends.iter().filter(|s| s.answer == answer).count();
    let retried = run.sends.iter().filter(|s| s.tries > 1).count();
    let chats: BTreeSet<&str> = run.sends.iter().map(|s| s.chat.as_str()).collect();
    vec![
        format!(
            "sends: {} to {} chats ({} accepted, {} asked again after a kill took the answer, {} with no answer within {} s); {:.1} MiB of documents",
            run.sends.len(),
            chats.len(),
            count(Answer::Accepted),
            retried,
            count(Answer::Lost),
            RIDE.as_secs(),
            run.bytes_sent as f64 / f64::from(1u32 << 20),
        ),
        format!(
            "documents attached: {}; versions of the good ones: {}{}",
            by_doc
                .iter()
                .map(|(d, n)| format!("{} {n}", d.as_str()))
                .collect::<Vec<_>>()
                .join(", "),
            run.good.len(),
            if versions { "" } else { " (versions off)" },
        ),
    ]
}
