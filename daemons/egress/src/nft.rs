//! The nftables ruleset that binds the sandbox user's network traffic:
//! packets sent by sockets of the sandbox uid (`meta skuid`) may go to
//! egressd's loopback proxy port and nowhere else; everything else of that
//! uid is counted (`sbx_dropped`) and dropped. Other users' traffic is not
//! touched (policy accept).
//!
//! ```text
//! table inet tandem_egress {
//!     counter sbx_dropped { }
//!     chain output {
//!         type filter hook output priority filter; policy accept;
//!         meta skuid 990 oifname "lo" ip daddr 127.0.0.1 tcp dport 8017 accept
//!         meta skuid 990 counter name "sbx_dropped" reject with icmpx admin-prohibited
//!     }
//! }
//! ```
//!
//! The per-chat proxy sockets (`<chatd data>/egress/<chat>/proxy.sock`) are
//! unix sockets: no IP packet is sent through them, so no rule is needed
//! (or possible) for them here; file modes guard them.
//!
//! "Dropped" is a reject (`icmpx admin-prohibited`): the packet is
//! discarded and the sender is told, so a sandboxed command that tries to go
//! around the proxy fails within a second ("No route to host") instead of
//! retrying a silently dropped SYN for two minutes.
//!
//! The batch first adds, then deletes the table (adding an existing table is
//! a no-op, so the delete always finds it), then builds it again: one
//! transaction, so loading it twice gives the same state, and there is no
//! moment where the old rules are gone and the new ones not yet in.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

use anyhow::Context;
use nftables::batch::Batch;
use nftables::expr::{Expression, Meta, MetaKey, NamedExpression, Payload, PayloadField};
use nftables::schema::{Chain, Counter, NfListObject, Nftables, Rule, Table};
use nftables::stmt::{self, Match, Operator, Statement};
use nftables::types::{NfChainPolicy, NfChainType, NfFamily, NfHook, RejectCode};

/// The table's name (family `inet`: IPv4 and IPv6 in one).
pub const TABLE: &str = "tandem_egress";
/// The output chain.
pub const CHAIN: &str = "output";
/// The named counter of the sandbox user's dropped packets.
pub const COUNTER: &str = "sbx_dropped";
/// The family of the table.
pub const FAMILY: NfFamily = NfFamily::INet;

/// The uid of the sandbox user `user`; the error names the user and how to
/// make it. Root is refused.
pub fn uid_of(user: &str) -> anyhow::Result<u32> {
    match nix::unistd::User::from_name(user)
        .with_context(|| format!("looking up the user {user:?}"))?
    {
        Some(found) if found.uid.is_root() => anyhow::bail!(
            "{user:?} is root: binding root's traffic would cut the box off; \
             name an unprivileged sandbox user"
        ),
        Some(found) => Ok(found.uid.as_raw()),
        None => anyhow::bail!(
            "the sandbox user {user:?} does not exist on this box: \
             sudo sandbox/install.sh makes it (or set [egress] sandbox_user)"
        ),
    }
}

/// The proxy listener of `[egress] listen` (`127.0.0.1:8017`).
pub fn proxy_addr(listen: &str) -> anyhow::Result<SocketAddr> {
    listen
        .parse()
        .with_context(|| format!("egress.listen: {listen:?} is not an address like 127.0.0.1:8017"))
}

fn meta(key: MetaKey) -> Expression<'static> {
    Expression::Named(NamedExpression::Meta(Meta { key }))
}

fn field(protocol: &'static str, name: &'static str) -> Expression<'static> {
    Expression::Named(NamedExpression::Payload(Payload::PayloadField(
        PayloadField {
            protocol: protocol.into(),
            field: name.into(),
        },
    )))
}

fn equals(left: Expression<'static>, right: Expression<'static>) -> Statement<'static> {
    Statement::Match(Match {
        left,
        right,
        op: Operator::EQ,
    })
}

/// The ruleset for the sandbox uid `uid`, which may reach only `proxy`
/// (egressd's loopback listener) over `lo`.
pub fn ruleset(uid: u32, proxy: SocketAddr) -> Nftables<'static> {
    let table = || Table {
        family: FAMILY,
        name: TABLE.into(),
        handle: None,
    };
    let rule = |expr: Vec<Statement<'static>>, comment: &'static str| Rule {
        family: FAMILY,
        table: TABLE.into(),
        chain: CHAIN.into(),
        expr: Cow::Owned(expr),
        handle: None,
        index: None,
        comment: Some(comment.into()),
    };
    let sandbox = || equals(meta(MetaKey::Skuid), Expression::Number(uid));
    let daddr = match proxy.ip() {
        IpAddr::V4(ip) => equals(
            field("ip", "daddr"),
            Expression::String(ip.to_string().into()),
        ),
        IpAddr::V6(ip) => equals(
            field("ip6", "daddr"),
            Expression::String(ip.to_string().into()),
        ),
    };
    let mut batch = Batch::new();
    // Add (a no-op when it exists), delete, build again: one transaction.
    batch.add(NfListObject::Table(table()));
    batch.delete(NfListObject::Table(table()));
    batch.add(NfListObject::Table(table()));
    batch.add(NfListObject::Counter(Counter {
        family: FAMILY,
        table: TABLE.into(),
        name: COUNTER.into(),
        handle: None,
        packets: None,
        bytes: None,
    }));
    batch.add(NfListObject::Chain(Chain {
        family: FAMILY,
        table: TABLE.into(),
        name: CHAIN.into(),
        _type: Some(NfChainType::Filter),
        hook: Some(NfHook::Output),
        prio: Some(0), // the `filter` priority
        policy: Some(NfChainPolicy::Accept),
        ..Chain::default()
    }));
    batch.add(NfListObject::Rule(rule(
        vec![
            sandbox(),
            equals(meta(MetaKey::Oifname), Expression::String("lo".into())),
            daddr,
            equals(
                field("tcp", "dport"),
                Expression::Number(u32::from(proxy.port())),
            ),
            Statement::Accept(None),
        ],
        "the sandbox user reaches egressd's proxy listener",
    )));
    batch.add(NfListObject::Rule(rule(
        vec![
            sandbox(),
            Statement::Counter(stmt::Counter::Named(COUNTER.into())),
            Statement::Reject(Some(stmt::Reject::new(
                Some(stmt::RejectType::ICMPX),
                Some(RejectCode::AdminProhibited),
            ))),
        ],
        "and nothing else",
    )));
    batch.to_nftables()
}

/// The ruleset as JSON, what `nft -j -f -` reads.
pub fn ruleset_json(uid: u32, proxy: SocketAddr) -> serde_json::Value {
    serde_json::to_value(ruleset(uid, proxy)).expect("a ruleset serializes")
}

/// Loads the ruleset with `nft -j -f -` (root only).
pub fn apply(ruleset: &Nftables) -> anyhow::Result<()> {
    nftables::helper::apply_ruleset(ruleset).map_err(|e| match e {
        nftables::helper::NftablesError::NftFailed { stderr, .. } => {
            anyhow::anyhow!("nft -j -f - refused the ruleset: {}", stderr.trim())
        }
        other => anyhow::anyhow!("running nft -j -f -: {other}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn commands(value: &Value) -> Vec<(String, Value)> {
        value["nftables"]
            .as_array()
            .expect("an nftables array")
            .iter()
            .map(|o| {
                let (cmd, body) = o.as_object().unwrap().iter().next().unwrap();
                (cmd.clone(), body.clone())
            })
            .collect()
    }

    #[test]
    fn the_table_is_replaced_whole_in_one_batch() {
        let value = ruleset_json(990, "127.0.0.1:8017".parse().unwrap());
        let cmds = commands(&value);
        let table = json!({"table": {"family": "inet", "name": "tandem_egress"}});
        assert_eq!(cmds[0], ("add".to_string(), table.clone()));
        assert_eq!(cmds[1], ("delete".to_string(), table.clone()));
        assert_eq!(cmds[2], ("add".to_string(), table));
        assert_eq!(cmds[3].0, "add");
        assert_eq!(cmds[3].1["counter"]["name"], "sbx_dropped");
        assert_eq!(cmds[3].1["counter"]["table"], "tandem_egress");
        let chain = &cmds[4].1["chain"];
        assert_eq!(chain["name"], "output");
        assert_eq!(chain["type"], "filter");
        assert_eq!(chain["hook"], "output");
        assert_eq!(chain["prio"], 0);
        assert_eq!(chain["policy"], "accept", "other users are untouched");
        assert_eq!(cmds.len(), 7, "{value:#}");
    }

    #[test]
    fn the_sandbox_uid_reaches_only_the_proxy_port_on_lo() {
        let value = ruleset_json(990, "127.0.0.1:8017".parse().unwrap());
        let cmds = commands(&value);
        let accept = &cmds[5].1["rule"];
        assert_eq!(accept["chain"], "output");
        assert_eq!(
            accept["expr"],
            json!([
                {"match": {"left": {"meta": {"key": "skuid"}}, "right": 990, "op": "=="}},
                {"match": {"left": {"meta": {"key": "oifname"}}, "right": "lo", "op": "=="}},
                {"match": {"left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "127.0.0.1", "op": "=="}},
                {"match": {"left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 8017, "op": "=="}},
                {"accept": null}
            ])
        );
        let drop = &cmds[6].1["rule"];
        assert_eq!(
            drop["expr"],
            json!([
                {"match": {"left": {"meta": {"key": "skuid"}}, "right": 990, "op": "=="}},
                {"counter": "sbx_dropped"},
                {"reject": {"type": "icmpx", "expr": "admin-prohibited"}}
            ]),
            "everything else of the uid is counted and refused"
        );
    }

    #[test]
    fn an_ipv6_listener_is_matched_by_ip6_daddr() {
        let value = ruleset_json(65534, "[::1]:9000".parse().unwrap());
        let cmds = commands(&value);
        let expr = &cmds[5].1["rule"]["expr"];
        assert_eq!(expr[0]["match"]["right"], 65534);
        assert_eq!(expr[2]["match"]["left"]["payload"]["protocol"], "ip6");
        assert_eq!(expr[2]["match"]["right"], "::1");
        assert_eq!(expr[3]["match"]["right"], 9000);
    }

    #[test]
    fn users_resolve_to_uids_and_a_missing_one_is_named() {
        assert_eq!(uid_of("nobody").unwrap(), 65534);
        let err = uid_of("root").unwrap_err().to_string();
        assert!(err.contains("\"root\" is root"), "{err}");
        let err = uid_of("tandem-no-such-user").unwrap_err().to_string();
        assert!(
            err.contains("\"tandem-no-such-user\" does not exist"),
            "{err}"
        );
        assert!(err.contains("sandbox/install.sh"), "{err}");
    }

    #[test]
    fn the_listen_setting_must_be_an_address() {
        assert_eq!(proxy_addr("127.0.0.1:8017").unwrap().port(), 8017);
        let err = proxy_addr("localhost").unwrap_err().to_string();
        assert!(err.contains("egress.listen"), "{err}");
    }
}
