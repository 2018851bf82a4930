//! The daemons the soak drives beside chatd (egressd, hostexecd, triggerd,
//! connectord), and capabilities of chatd with faults of their own (push,
//! documents, mcp, subagents), each as a `Part`: it starts its daemons as
//! real processes, drives their load and faults while the phase is `Load`,
//! waits for its own work to end, then stops them and checks its own
//! invariants. What every daemon owes (RSS, a clean log, a sound database,
//! no secret written down) is checked for all of them in `daemons.rs`, from
//! what each part hands in.

use super::*;

use futures_util::future::BoxFuture;

/// A daemon the soak can drive beside chatd (`--parts`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum PartName {
    Egressd,
    Hostexecd,
    Triggerd,
    Connectord,
    /// chatd's Web Push to a fake push service, and the page's routes.
    Push,
    /// Documents attached to messages, read by chatd's reader process.
    Documents,
    /// chatd's MCP connectors tested against a fake MCP server.
    Mcp,
    /// chatd's sub-agents (`spawn_agent`) under its kills and stops.
    Subagents,
}

pub(crate) const PARTS: [PartName; 8] = [
    PartName::Egressd,
    PartName::Hostexecd,
    PartName::Triggerd,
    PartName::Connectord,
    PartName::Push,
    PartName::Documents,
    PartName::Mcp,
    PartName::Subagents,
];

impl PartName {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            PartName::Egressd => "egressd",
            PartName::Hostexecd => "hostexecd",
            PartName::Triggerd => "triggerd",
            PartName::Connectord => "connectord",
            PartName::Push => "push",
            PartName::Documents => "documents",
            PartName::Mcp => "mcp",
            PartName::Subagents => "subagents",
        }
    }
}

/// The parts a run drives (`--parts`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Chosen(pub(crate) Vec<PartName>);

/// `all`, `none`, or daemons by name: `egressd,triggerd`.
pub(crate) fn parse_parts(text: &str) -> Result<Chosen, String> {
    match text.trim() {
        "all" => return Ok(Chosen(PARTS.to_vec())),
        "none" => return Ok(Chosen(Vec::new())),
        _ => {}
    }
    let mut chosen = Vec::new();
    for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let Some(part) = PARTS.iter().find(|p| p.as_str() == word) else {
            return Err(format!(
                "{word:?} is not a part; name some of {}, or say all or none",
                PARTS.map(PartName::as_str).join(", ")
            ));
        };
        if !chosen.contains(part) {
            chosen.push(*part);
        }
    }
    if chosen.is_empty() {
        return Err("name at least one part, or say all or none".into());
    }
    chosen.sort();
    Ok(Chosen(chosen))
}

/// What a part knows before chatd starts.
pub(crate) struct Prepare {
    pub(crate) seed: u64,
    pub(crate) duration: f64,
    pub(crate) sim_url: String,
    /// A folder of the soak's own for this part's files (removed at the end).
    pub(crate) dir: PathBuf,
}

/// What a part hands in at the end, for the checks every daemon owes.
#[derive(Default)]
pub(crate) struct PartEnd {
    /// Summary lines: its totals (tunnels, refusals, calls, runs, messages).
    pub(crate) totals: Vec<String>,
    /// Each daemon's log file: no panic, no ERROR line without an id, no secret.
    pub(crate) logs: Vec<(String, PathBuf)>,
    /// Its daemons' data folders (or files): every SQLite file in them,
    /// found by its header, must pass `integrity_check`.
    pub(crate) data: Vec<PathBuf>,
    /// Secrets it gave its daemons (tokens, keys): none may be in any log.
    pub(crate) secrets: Vec<String>,
}

/// One daemon (or a few) the soak drives. Kills follow `Shared::kill_window`,
/// so the process alive at the end warms up under load before it is measured.
pub(crate) trait Part: Send + Sync {
    fn name(&self) -> PartName;

    /// Settings chatd needs to reach this part's daemon, given before chatd
    /// starts and kept across its restarts.
    fn chatd_env(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Once chatd is up: starts what needs chatd, drives load and faults
    /// while the phase is `Load`, then waits (bounded) until its own work
    /// has ended. Registers every process it starts with `Shared::started`.
    fn drive(self: Arc<Self>, shared: Arc<Shared>, seed: u64) -> BoxFuture<'static, ()>;

    /// After the drain: stops its daemons (SIGTERM; anything but exit 0 is a
    /// `Health` violation), checks its own invariants with `Shared::violate`,
    /// and hands in what the common checks need.
    fn finish(self: Arc<Self>, shared: Arc<Shared>) -> BoxFuture<'static, PartEnd>;
}

/// Builds the chosen parts, before chatd starts (some start their daemons
/// here, because chatd is told where they listen).
pub(crate) async fn prepare(
    chosen: &[PartName],
    ctx: &Prepare,
) -> anyhow::Result<Vec<Arc<dyn Part>>> {
    let mut parts: Vec<Arc<dyn Part>> = Vec::new();
    for name in chosen {
        let dir = ctx.dir.join(name.as_str());
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let ctx = Prepare {
            seed: ctx.seed ^ (*name as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            duration: ctx.duration,
            sim_url: ctx.sim_url.clone(),
            dir,
        };
        let part: Arc<dyn Part> = match name {
            PartName::Egressd => Arc::new(Egress::prepare(&ctx).await?),
            PartName::Hostexecd => hostexec_part(&ctx)?,
            PartName::Triggerd => Arc::new(TriggersPart::new(&ctx)?),
            PartName::Connectord => Arc::new(bots::Bots::prepare(&ctx).await?),
            PartName::Push => Arc::new(push::PushPart::new(&ctx)),
            PartName::Documents => Arc::new(documents::DocumentsPart::new(&ctx)?),
            PartName::Mcp => Arc::new(mcp::McpPart::new()),
            PartName::Subagents => Arc::new(subagents::SubagentsPart::new(&ctx)),
        };
        parts.push(part);
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_named_by_their_daemons() {
        assert_eq!(parse_parts("all").unwrap().0, PARTS.to_vec());
        assert_eq!(parse_parts("none").unwrap().0, Vec::new());
        assert_eq!(
            parse_parts("triggerd, egressd,triggerd").unwrap().0,
            vec![PartName::Egressd, PartName::Triggerd]
        );
        let err = parse_parts("egress").unwrap_err();
        assert!(
            err.contains("\"egress\"") && err.contains("egressd"),
            "{err}"
        );
        assert!(parse_parts(",").is_err());
    }
}
