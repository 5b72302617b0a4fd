//! `replSetReconfig` (`rs.reconfig()`, `rs.add()`, `rs.remove()`): a new configuration
//! checked as mongod checks it, then made by the set (`Member::reconfigure`).
//!
//! Members map onto openraft as it allows: a member with `votes: 1` is a voter; one with
//! `votes: 0` (mongod requires `priority: 0` of it) is a learner, which replicates and
//! serves reads but neither votes nor stands for election, and is listed in `hello`'s
//! `passives`. A voting member of priority 0, a hidden voter and an arbiter have no
//! openraft counterpart and are refused (93). A member's host cannot change under the
//! same `_id` yet: remove it and add it under a new one.

use super::initiate::{initiate_with, is_me, members_of};
use super::{view, INVALID_REPLICA_SET_CONFIG};
use crate::state::ServerState;
use bson::{Bson, Document};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tailstream_engine::query::error::{codes, Error, Result};

/// mongod's code for a configuration that cannot follow the current one.
const INCOMPATIBLE: i32 = 103;

fn incompatible(msg: String) -> Error {
    Error::new(INCOMPATIBLE, msg)
}

fn invalid(msg: String) -> Error {
    Error::new(INVALID_REPLICA_SET_CONFIG, msg)
}

/// `replSetReconfig: <config>`.
pub async fn reconfig(state: &Arc<ServerState>, cmd: &Document) -> Result<Document> {
    let Some(Bson::Document(config)) = cmd.get("replSetReconfig") else {
        return Err(Error::new(
            codes::TYPE_MISMATCH,
            "replSetReconfig takes the new configuration, a document",
        ));
    };
    let name = config.get_str("_id").unwrap_or("");
    if name != state.config.repl_set {
        return Err(incompatible(format!(
            "New and old configurations differ in replica set name; old was {}, and new is {name}",
            state.config.repl_set
        )));
    }
    let Some(member) = state.repl.member() else {
        // The one-member set grows into a set of several: as its initiation.
        return initiate_with(state, config).await;
    };
    let v = view(member);
    if !v.writable {
        return Err(Error::new(
            codes::NOT_WRITABLE_PRIMARY,
            "replSetReconfig should only be run on a writable PRIMARY",
        ));
    }
    let version = config
        .get("version")
        .and_then(tailstream_engine::find::as_i64)
        .ok_or_else(|| invalid("the configuration needs a numeric version".into()))?;
    if version <= v.set_version {
        return Err(incompatible(format!(
            "New config version {version} must be greater than old version {}",
            v.set_version
        )));
    }
    let nodes = members_of(state, config)?;
    let voters = voters_of(config)?;
    if !nodes.contains_key(&member.node) || !is_me(state, &nodes[&member.node].addr).await {
        return Err(Error::new(
            74,
            format!(
                "No host described in new configuration with version {version} for replica set {name} maps to this node as _id {}",
                member.node
            ),
        ));
    }
    check_hosts_kept(&current_nodes(member), &nodes)?;
    if voters.is_empty() {
        return Err(invalid(
            "a replica set needs at least one voting member".into(),
        ));
    }
    member
        .reconfigure(nodes, voters)
        .await
        .map_err(|e| Error::internal(format!("replSetReconfig: {e}")))?;
    Ok(Document::new())
}

/// The members that vote, checked as mongod checks `votes`, `priority`, `hidden` and
/// `arbiterOnly` (see the module's doc for what has no openraft counterpart).
fn voters_of(config: &Document) -> Result<BTreeSet<u64>> {
    let mut voters = BTreeSet::new();
    for m in config.get_array("members").into_iter().flatten() {
        let Some(m) = m.as_document() else { continue };
        let id = m
            .get("_id")
            .and_then(tailstream_engine::find::as_i64)
            .unwrap_or(-1);
        let number = |field: &str, default: f64| {
            m.get(field)
                .and_then(Bson::as_f64)
                .or_else(|| {
                    m.get(field)
                        .and_then(tailstream_engine::find::as_i64)
                        .map(|n| n as f64)
                })
                .unwrap_or(default)
        };
        let votes = number("votes", 1.0);
        let priority = number("priority", 1.0);
        if !(votes == 0.0 || votes == 1.0) {
            return Err(invalid(format!("member {id}: votes must be 0 or 1")));
        }
        if votes == 0.0 && priority != 0.0 {
            return Err(invalid(format!(
                "member {id}: priority must be 0 when non-voting (votes:0)"
            )));
        }
        if matches!(m.get("arbiterOnly"), Some(Bson::Boolean(true))) {
            return Err(invalid(format!("member {id}: arbiters are not supported")));
        }
        let hidden = matches!(m.get("hidden"), Some(Bson::Boolean(true)));
        if votes == 1.0 && (priority == 0.0 || hidden) {
            return Err(invalid(format!(
                "member {id}: a voting member of priority 0 or hidden has no counterpart here; make it non-voting (votes: 0, priority: 0), a learner"
            )));
        }
        if votes == 1.0 {
            voters.insert(id as u64);
        }
    }
    Ok(voters)
}

fn current_nodes(member: &tailstream_replication::Member) -> BTreeMap<u64, String> {
    let m = member.raft.metrics().borrow().clone();
    let nodes = m
        .membership_config
        .membership()
        .nodes()
        .map(|(id, n)| (*id, n.addr.clone()))
        .collect();
    nodes
}

/// A member keeps its host under its `_id` (see the module's doc).
fn check_hosts_kept(
    current: &BTreeMap<u64, String>,
    new: &BTreeMap<u64, tailstream_replication::BasicNode>,
) -> Result<()> {
    for (id, node) in new {
        if let Some(old) = current.get(id).filter(|old| **old != node.addr) {
            return Err(incompatible(format!(
                "member _id {id} is {old}; its host cannot change to {} (remove it, then add it under a new _id)",
                node.addr
            )));
        }
    }
    Ok(())
}
