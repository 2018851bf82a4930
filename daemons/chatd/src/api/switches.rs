//! A chat's switches as a request names them: tool groups (`PUT
//! …/builtins {off, on}`) and, at `POST /conversations`, every kind at
//! once (`switches {builtins_off, builtins_on, mcp_off, skills_off}`). A
//! bad entry refuses the whole request, naming the field.

use rusqlite::Connection;
use serde::Deserialize;
use tandem_shared::http::ApiError;

use crate::store::tool_groups::Switches;
use crate::tools::groups;
use crate::words::ToolGroup;

/// The most entries one list may hold.
pub const MAX_ENTRIES: usize = 200;

/// What `off` names beside the groups: a connector.
const MCP: &str = "mcp:";

/// `switches` on `POST /conversations`: each list in its own route's form.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields, default)]
pub struct CreateSwitches {
    pub builtins_off: Vec<String>,
    pub builtins_on: Vec<String>,
    pub mcp_off: Vec<String>,
    pub skills_off: Vec<String>,
}

/// Tool groups as a request named them.
#[derive(Debug, Default, Clone)]
pub struct Named {
    pub groups: Switches,
    /// The connectors `off` named as `mcp:<id>`, checked in the write.
    pub mcp_off: Vec<String>,
}

/// Reads `off` (groups and `mcp:<id>`) and `on` (groups): a group named
/// in both, or a word that is neither, refuses both.
pub fn named(
    off_field: &str,
    off: &[String],
    on_field: &str,
    on: &[String],
) -> Result<Named, ApiError> {
    for (field, list) in [(off_field, off), (on_field, on)] {
        if list.len() > MAX_ENTRIES {
            return Err(ApiError::bad_input(
                field,
                format!("names {} switches; {MAX_ENTRIES} at most", list.len()),
            ));
        }
    }
    let mut named = Named::default();
    // Opt-in groups named off: off already, but not to be named on too.
    let mut opt_ins_off = Vec::new();
    for entry in off {
        if let Some(id) = entry.strip_prefix(MCP) {
            if !named.mcp_off.iter().any(|c| c == id) {
                named.mcp_off.push(id.to_string());
            }
            continue;
        }
        let group = group(off_field, entry, true)?;
        if groups::opt_in(group) {
            opt_ins_off.push(group);
        } else if !named.groups.off.contains(&group) {
            named.groups.off.push(group);
        }
    }
    for entry in on {
        let group = group(on_field, entry, false)?;
        if named.groups.off.contains(&group) || opt_ins_off.contains(&group) {
            return Err(ApiError::bad_input(
                on_field,
                format!("{group} is named both off and on"),
            ));
        }
        // A default-on group named on is on already.
        if groups::opt_in(group) && !named.groups.on.contains(&group) {
            named.groups.on.push(group);
        }
    }
    Ok(named)
}

fn group(field: &str, entry: &str, connectors: bool) -> Result<ToolGroup, ApiError> {
    ToolGroup::parse(entry).ok_or_else(|| {
        let or = if connectors {
            ", or mcp:<connector id>"
        } else {
            ""
        };
        ApiError::bad_input(
            field,
            format!(
                "{:?} is not a tool group: use {}{or}",
                entry.chars().take(64).collect::<String>(),
                groups::names()
            ),
        )
    })
}

/// Checks that each connector `ids` names is saved (inside the write that
/// stores them, so none is removed in between).
pub fn check_connectors(conn: &Connection, field: &str, ids: &[String]) -> Result<(), ApiError> {
    for id in ids {
        if crate::store::mcp::get(conn, id)?.is_none() {
            return Err(ApiError::bad_input(
                field,
                format!(
                    "{:?} is not a saved MCP connector's id",
                    id.chars().take(64).collect::<String>()
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn off_takes_groups_and_connectors_on_takes_opt_ins() {
        let named = named(
            "off",
            &words(&["web", "mcp:c1", "files", "web"]),
            "on",
            &words(&["saved_agents", "shell"]),
        )
        .unwrap();
        assert_eq!(named.groups.off, vec![ToolGroup::Web, ToolGroup::Files]);
        assert_eq!(named.groups.on, vec![ToolGroup::SavedAgents]);
        assert_eq!(named.mcp_off, vec!["c1".to_string()]);
    }

    #[test]
    fn a_bad_entry_names_its_field() {
        let e = named("off", &words(&["webb"]), "on", &[]).unwrap_err();
        assert_eq!(e.extra["field"], "off");
        assert!(e.message.contains("shell, files, web"), "{}", e.message);
        let e = named("off", &words(&["web"]), "on", &words(&["web"])).unwrap_err();
        assert_eq!(e.extra["field"], "on");
        let both = words(&["saved_agents"]);
        let e = named("off", &both, "on", &both).unwrap_err();
        assert_eq!(e.extra["field"], "on");
        let e = named("off", &[], "on", &words(&["mcp:c1"])).unwrap_err();
        assert_eq!(e.extra["field"], "on");
        let many = vec!["web".to_string(); MAX_ENTRIES + 1];
        assert!(named("off", &many, "on", &[]).is_err());
    }
}
