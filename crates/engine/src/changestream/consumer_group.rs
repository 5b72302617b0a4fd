//! Consumer groups of a parallel change stream (issue 28): the buckets of a named
//! stream shared by whichever consumers join it, each bucket read by one consumer at a
//! time under a lease, each bucket's committed position stored durably.
//!
//! What is durable and what is not:
//! - [`GROUPS_COLL`] in the `config` database holds a group's definition (`_id:
//!   "<group>"`: nBuckets, by, nsRegex, pipeline, the stream's options, its start, the
//!   lease) and one document per bucket (`_id: {group, bucket}`) with the bucket's
//!   `epoch`, the consumer it was last handed to, and the position its consumers
//!   committed (`resumeToken`). They are written through the engine's ordinary write
//!   path: journaled, in the oplog (never in a change stream: `config` is not
//!   streamed), replicated, dumped by the tools.
//! - Leases live in memory on the member serving the group ([`Registry`]): who holds
//!   each bucket under which epoch, and when each consumer's lease ends. A restart or a
//!   failover forgets them: consumers join again and the buckets are handed out again
//!   from their committed positions.
//!
//! Fencing, in this order:
//! 1. Handing a bucket on first marks it taken in memory, so the previous holder's
//!    next getMore or commit fails at once ([`CONSUMER_FENCED`]); then one write
//!    (findAndModify) increments the bucket's durable `epoch` and returns its committed
//!    position, after which the new holder's cursor starts.
//! 2. A commit writes the position only where the bucket's document still has the
//!    committer's epoch (`{_id, epoch}` is the update's filter): a commit in flight
//!    while its bucket was handed on matches nothing and fails.
//! 3. A commit inside a transaction writes that document in the transaction: a
//!    hand-over after the transaction's snapshot changed it, so the transaction's
//!    commit fails with WriteConflict and none of its writes happen (exactly once
//!    for consumers whose effect is a write to this server).
//!
//! Leases: a consumer's lease lasts `leaseMS` after its last join, getMore or commit
//! (any of its buckets renews all of them). A consumer whose lease ended is dropped the
//! next time anyone looks at the group; its buckets are free and the group's
//! generation moves on, so every other consumer's next getMore says `rejoin: true`.
//! Shares: with C consumers and N buckets, a joining consumer keeps what it holds up to
//! ceil(N/C) (giving up the rest), takes free buckets up to ceil(N/C), and while it
//! holds fewer than floor(N/C), takes one at a time from whichever consumer holds the
//! most: no other bucket moves (incremental rebalancing).

use super::bucket::{self, BucketBy, Group};
use crate::catalog::namespace::Namespace;
use crate::read::find::{CursorBatch, FindRequest};
use crate::write::{FindAndModify, UpdateOp};
use crate::Engine;
use bson::{doc, Bson, Document};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_query::error::{codes, Error, Result};

/// The database and collection of the groups' durable state.
pub const GROUPS_DB: &str = "config";
pub const GROUPS_COLL: &str = "changeStreamGroups";

/// A consumer's lease when the group's creator names none: long enough for a
/// getMore's default wait (1 s) many times over, short enough that a dead consumer's
/// buckets move on within seconds.
pub const DEFAULT_LEASE_MS: i64 = 10_000;
/// The shortest lease: a getMore may wait its whole `maxTimeMS` before it renews.
pub const MIN_LEASE_MS: i64 = 100;
/// The longest lease (an hour).
pub const MAX_LEASE_MS: i64 = 3_600_000;
/// The longest group or consumer name, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// The most consumers a group holds at once (each is a few hundred bytes here).
pub const MAX_CONSUMERS: usize = 10_000;
/// The most groups served at once (their leases are in memory).
pub const MAX_GROUPS: usize = 10_000;

/// The error of a consumer that no longer holds the bucket it reads or commits.
pub const CONSUMER_FENCED: i32 = codes::CHANGE_STREAM_CONSUMER_FENCED;

/// The fields a group's definition holds, as the command takes them.
pub const DEFINITION_FIELDS: [&str; 9] = [
    "nBuckets",
    "by",
    "nsRegex",
    "pipeline",
    "fullDocument",
    "fullDocumentBeforeChange",
    "showExpandedEvents",
    "startAtOperationTime",
    "leaseMS",
];

/// The `$changeStream` options a group's definition passes to each bucket.
const STREAM_OPTIONS: [&str; 3] = [
    "fullDocument",
    "fullDocumentBeforeChange",
    "showExpandedEvents",
];

fn groups_ns() -> Namespace {
    Namespace::new(GROUPS_DB, GROUPS_COLL)
}

fn fenced(group: &str, consumer: &str, bucket: u32) -> Error {
    Error::new(
        CONSUMER_FENCED,
        format!(
            "consumer '{consumer}' no longer holds bucket {bucket} of change stream group \
             '{group}' (its lease ended or the bucket was handed to another consumer): join \
             the group again"
        ),
    )
}

/// The groups served here, by name: their leases.
#[derive(Debug, Default)]
pub struct Registry {
    groups: Mutex<HashMap<String, Arc<GroupLeases>>>,
}

impl Registry {
    /// The leases of `name` (new ones, none held, for a group not served yet).
    fn group(&self, name: &str, count: u32, lease: Duration) -> Result<Arc<GroupLeases>> {
        let mut groups = self.groups.lock();
        if let Some(g) = groups.get(name) {
            if g.state.lock().holders.len() == count as usize {
                return Ok(g.clone());
            }
        }
        if groups.len() >= MAX_GROUPS && !groups.contains_key(name) {
            return Err(Error::new(
                codes::EXCEEDED_MEMORY_LIMIT,
                format!("at most {MAX_GROUPS} change stream groups are served at once"),
            ));
        }
        let g = Arc::new(GroupLeases {
            name: name.to_string(),
            joining: Mutex::new(()),
            state: Mutex::new(LeaseState {
                lease,
                generation: 1,
                consumers: BTreeMap::new(),
                holders: vec![None; count as usize],
                orphans: Vec::new(),
            }),
        });
        groups.insert(name.to_string(), g.clone());
        Ok(g)
    }

    fn existing(&self, name: &str) -> Option<Arc<GroupLeases>> {
        self.groups.lock().get(name).cloned()
    }
}

/// One group's leases.
#[derive(Debug)]
pub struct GroupLeases {
    name: String,
    /// Joins one at a time: each writes epochs durably between its looks at `state`.
    joining: Mutex<()>,
    state: Mutex<LeaseState>,
}

#[derive(Debug)]
struct LeaseState {
    lease: Duration,
    /// Moves on whenever consumers or holders change: a consumer that joined at an
    /// older one is told to join again.
    generation: u64,
    consumers: BTreeMap<String, Member>,
    /// Per bucket: who holds it.
    holders: Vec<Option<Holder>>,
    /// Cursors of consumers whose lease ended: closed at the next join.
    orphans: Vec<i64>,
}

#[derive(Debug)]
struct Member {
    expires: Instant,
    joined_generation: u64,
}

#[derive(Debug, Clone, PartialEq)]
struct Holder {
    consumer: String,
    /// The bucket's durable epoch when handed over; 0 while being handed over.
    epoch: i64,
    /// The cursor the holder reads it with (0: none yet).
    cursor: i64,
}

/// What a join changes: the buckets the consumer keeps, takes and gives up.
#[derive(Debug, Default, PartialEq)]
struct Plan {
    keep: Vec<u32>,
    take: Vec<u32>,
    /// Given up, with their cursors.
    release: Vec<(u32, i64)>,
}

impl LeaseState {
    /// Drops the consumers whose lease ended; their buckets are free.
    fn sweep(&mut self, now: Instant) {
        let expired: Vec<String> = self
            .consumers
            .iter()
            .filter(|(_, m)| m.expires <= now)
            .map(|(n, _)| n.clone())
            .collect();
        if expired.is_empty() {
            return;
        }
        for name in &expired {
            self.consumers.remove(name);
        }
        for h in self.holders.iter_mut() {
            if h.as_ref().is_some_and(|h| expired.contains(&h.consumer)) {
                let gone = h.take().expect("checked");
                if gone.cursor != 0 {
                    self.orphans.push(gone.cursor);
                }
            }
        }
        self.generation += 1;
    }

    fn held_by(&self, consumer: &str) -> Vec<u32> {
        (0..self.holders.len() as u32)
            .filter(|b| self.holder_is(*b, consumer))
            .collect()
    }

    fn holder_is(&self, bucket: u32, consumer: &str) -> bool {
        self.holders[bucket as usize]
            .as_ref()
            .is_some_and(|h| h.consumer == consumer)
    }

    /// `consumer` joins (or renews) and takes its share (see the module
    /// documentation); taken buckets are marked its, epoch 0, until handed over.
    fn plan(&mut self, consumer: &str, now: Instant) -> Result<Plan> {
        let new = !self.consumers.contains_key(consumer);
        if new && self.consumers.len() >= MAX_CONSUMERS {
            return Err(Error::new(
                codes::EXCEEDED_MEMORY_LIMIT,
                format!("a change stream group holds at most {MAX_CONSUMERS} consumers"),
            ));
        }
        let expires = now + self.lease;
        self.consumers
            .entry(consumer.to_string())
            .and_modify(|m| m.expires = expires)
            .or_insert(Member {
                expires,
                joined_generation: 0,
            });
        let n = self.holders.len();
        let c = self.consumers.len();
        let (floor, ceil) = (n / c, n.div_ceil(c));
        let mut plan = Plan {
            keep: self.held_by(consumer),
            ..Plan::default()
        };
        while plan.keep.len() > ceil {
            let b = plan.keep.pop().expect("more than ceil");
            let h = self.holders[b as usize].take().expect("held");
            plan.release.push((b, h.cursor));
        }
        let mine = |p: &Plan| p.keep.len() + p.take.len();
        // Marked its at once (epoch 0 until handed over): a previous (live) holder's
        // cursor fails its next getMore (fenced) and closes.
        let take = |s: &mut LeaseState, p: &mut Plan, b: u32| {
            s.holders[b as usize] = Some(Holder {
                consumer: consumer.to_string(),
                epoch: 0,
                cursor: 0,
            });
            p.take.push(b);
        };
        for b in 0..n as u32 {
            if mine(&plan) >= ceil {
                break;
            }
            if self.holders[b as usize].is_none() {
                take(self, &mut plan, b);
            }
        }
        while mine(&plan) < floor {
            let Some(b) = self.steal_one(consumer) else {
                break;
            };
            take(self, &mut plan, b);
        }
        if new || !plan.take.is_empty() || !plan.release.is_empty() {
            self.generation += 1;
        }
        self.consumers
            .get_mut(consumer)
            .expect("inserted above")
            .joined_generation = self.generation;
        Ok(plan)
    }

    /// The highest-numbered bucket of whichever other consumer holds the most (the
    /// first by name among equals), when it holds more than `consumer` plus one.
    fn steal_one(&self, consumer: &str) -> Option<u32> {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for h in self.holders.iter().flatten() {
            *counts.entry(h.consumer.as_str()).or_default() += 1;
        }
        let mine = counts.get(consumer).copied().unwrap_or(0);
        let (victim, most) = counts
            .iter()
            .filter(|(c, _)| **c != consumer)
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))?;
        if *most <= mine + 1 {
            return None;
        }
        (0..self.holders.len() as u32)
            .rev()
            .find(|b| self.holder_is(*b, victim))
    }

    /// Whether `consumer` holds `bucket` under `epoch`; renews its lease if so, and
    /// says whether it should join again.
    fn hold(&mut self, bucket: u32, consumer: &str, epoch: i64, now: Instant) -> Option<bool> {
        self.sweep(now);
        let held = self.holders[bucket as usize]
            .as_ref()
            .is_some_and(|h| h.consumer == consumer && h.epoch == epoch);
        if !held {
            return None;
        }
        let generation = self.generation;
        let m = self.consumers.get_mut(consumer)?;
        m.expires = now + self.lease;
        Some(m.joined_generation < generation)
    }
}

/// The lease a bucket's cursor is read under: every getMore checks and renews it.
#[derive(Debug)]
pub struct Lease {
    leases: Arc<GroupLeases>,
    bucket: u32,
    consumer: String,
    epoch: i64,
}

impl Lease {
    /// Renews the consumer's lease if it still holds the bucket; returns whether the
    /// group changed since it joined (it should join again for its new share).
    pub fn hold(&self) -> Result<bool> {
        self.leases
            .state
            .lock()
            .hold(self.bucket, &self.consumer, self.epoch, Instant::now())
            .ok_or_else(|| fenced(&self.leases.name, &self.consumer, self.bucket))
    }
}

/// A join: the group's name, the consumer's, and the definition fields given (the
/// group's definition when this join creates it, checked against it otherwise).
#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub group: String,
    pub consumer: String,
    pub given: Document,
    pub lsid: Option<Bson>,
}

/// What a consumer holds after joining: per bucket, its cursor and epoch.
#[derive(Debug)]
pub struct Joined {
    pub buckets: Vec<(u32, CursorBatch, i64)>,
    pub generation: u64,
    pub lease_ms: i64,
    pub count: u32,
}

/// A group's definition, parsed.
struct Definition {
    count: u32,
    by: BucketBy,
    ns_regex: Option<regex::Regex>,
    stages: Vec<Document>,
    options: Document,
    start: bson::Timestamp,
    lease: Duration,
}

fn check_name(what: &str, v: &str) -> Result<()> {
    if v.is_empty() || v.len() > MAX_NAME_BYTES || v.contains('\0') {
        return Err(Error::bad_value(format!(
            "a change stream {what} name must be 1 to {MAX_NAME_BYTES} bytes, without NUL"
        )));
    }
    Ok(())
}

/// `leaseMS`, checked.
fn lease_ms(def: &Document) -> Result<i64> {
    if !def.contains_key("leaseMS") {
        return Ok(DEFAULT_LEASE_MS);
    }
    let ms = bucket::whole_number(def, "parallelChangeStream", "leaseMS")?;
    if !(MIN_LEASE_MS..=MAX_LEASE_MS).contains(&ms) {
        return Err(Error::bad_value(format!(
            "leaseMS must be between {MIN_LEASE_MS} and {MAX_LEASE_MS}, not {ms}"
        )));
    }
    Ok(ms)
}

/// The given definition fields in their stored form (numbers as the stored types).
fn normalized(given: &Document) -> Result<Document> {
    let mut out = Document::new();
    for k in DEFINITION_FIELDS {
        let Some(v) = given.get(k) else { continue };
        let v = match k {
            "nBuckets" => Bson::Int32(bucket::parse_count(given, "parallelChangeStream")? as i32),
            "leaseMS" => Bson::Int64(lease_ms(given)?),
            _ => v.clone(),
        };
        out.insert(k, v);
    }
    Ok(out)
}

impl Definition {
    fn parse(def: &Document) -> Result<Definition> {
        let owner = "parallelChangeStream";
        let stages = bucket::parse_pipeline(def, owner)?;
        let mut options = Document::new();
        for k in STREAM_OPTIONS {
            if let Some(v) = def.get(k) {
                options.insert(k, v.clone());
            }
        }
        let start = match def.get("startAtOperationTime") {
            Some(Bson::Timestamp(t)) => *t,
            Some(v) => tailstream_query::args::timestamp_value(
                "parallelChangeStream.startAtOperationTime",
                v,
            )?,
            None => return Err(Error::new(codes::INTERNAL_ERROR, "a group has a start")),
        };
        Ok(Definition {
            count: bucket::parse_count(def, owner)?,
            by: bucket::parse_by(def, owner)?,
            ns_regex: bucket::parse_ns_regex(def, owner)?,
            stages,
            options,
            start,
            lease: Duration::from_millis(lease_ms(def)? as u64),
        })
    }
}

impl Engine {
    /// The group's stored definition, created from `given` when there is none; a given
    /// field that differs from the stored one is an error (InvalidOptions).
    fn group_definition(&self, group: &str, given: &Document) -> Result<Document> {
        self.group_definition_once(group, &normalized(given)?, false)
    }

    fn group_definition_once(
        &self,
        group: &str,
        given: &Document,
        retried: bool,
    ) -> Result<Document> {
        if let Some(stored) = self.group_document(doc! {"_id": group})? {
            for (k, v) in given {
                if stored.get(k) != Some(v) {
                    return Err(Error::new(
                        codes::INVALID_OPTIONS,
                        format!(
                            "change stream group '{group}' was created with {k}: {}; this \
                             join gives {v}",
                            stored
                                .get(k)
                                .map_or("(none)".to_string(), |s| s.to_string())
                        ),
                    ));
                }
            }
            return Ok(stored);
        }
        let mut def = doc! {"_id": group};
        def.extend(given.clone());
        if !def.contains_key("startAtOperationTime") {
            let after_newest: bson::Timestamp = self.last_commit_time().next().into();
            def.insert("startAtOperationTime", after_newest);
        }
        if !def.contains_key("leaseMS") {
            def.insert("leaseMS", DEFAULT_LEASE_MS);
        }
        Definition::parse(&def)?;
        def.insert("createdAt", bson::DateTime::now());
        let out = self.insert_documents(&groups_ns(), vec![def.clone()], true)?;
        match out.errors.first() {
            None => Ok(def),
            // Another consumer's first join created it meanwhile: compare with that.
            Some(w) if w.error.code == codes::DUPLICATE_KEY && !retried => {
                self.group_definition_once(group, given, true)
            }
            Some(w) => Err(w.error.clone()),
        }
    }

    /// The first document of the groups' collection matching `filter`.
    fn group_document(&self, filter: Document) -> Result<Option<Document>> {
        let req = FindRequest {
            filter,
            limit: Some(1),
            ..Default::default()
        };
        let mut found = None;
        self.for_each_batch(&groups_ns(), req, None, |docs| {
            found = docs.into_iter().next();
            Ok(std::ops::ControlFlow::Break(()))
        })?;
        Ok(found)
    }

    /// A consumer joins a group (creating it on the first join) and is handed its
    /// share of the buckets (see the module documentation): a cursor for each, read
    /// with ordinary getMores in the joining session. A bucket it already reads keeps
    /// its cursor.
    pub fn join_consumer_group(&self, req: JoinRequest) -> Result<Joined> {
        check_name("group", &req.group)?;
        check_name("consumer", &req.consumer)?;
        let stored = self.group_definition(&req.group, &req.given)?;
        let def = Definition::parse(&stored)?;
        let leases = self
            .consumer_groups
            .group(&req.group, def.count, def.lease)?;
        let _one_join = leases.joining.lock();
        let (plan, orphans) = {
            let mut s = leases.state.lock();
            s.lease = def.lease;
            let now = Instant::now();
            s.sweep(now);
            let plan = s.plan(&req.consumer, now)?;
            (plan, std::mem::take(&mut s.orphans))
        };
        for id in orphans.iter().chain(plan.release.iter().map(|(_, c)| c)) {
            self.cursors.remove(*id);
        }
        let result = self.hand_over(&leases, &req, &def, &plan);
        let mut s = leases.state.lock();
        match result {
            Ok(buckets) => Ok(Joined {
                buckets,
                generation: s.generation,
                lease_ms: def.lease.as_millis() as i64,
                count: def.count,
            }),
            Err(e) => {
                // What was not handed over is free again.
                for b in &plan.take {
                    if s.holders[*b as usize]
                        .as_ref()
                        .is_some_and(|h| h.consumer == req.consumer && h.epoch == 0)
                    {
                        s.holders[*b as usize] = None;
                    }
                }
                s.generation += 1;
                Err(e)
            }
        }
    }

    /// Opens (or keeps) the cursor of every bucket the plan gives the consumer.
    fn hand_over(
        &self,
        leases: &Arc<GroupLeases>,
        req: &JoinRequest,
        def: &Definition,
        plan: &Plan,
    ) -> Result<Vec<(u32, CursorBatch, i64)>> {
        let mut opts = def.options.clone();
        opts.insert("allChangesForCluster", true);
        let (spec, _) = super::parse_spec("admin", None, &opts, &def.stages)?;
        let shared = Group::new(def.count);
        let mut out = Vec::new();
        let mut buckets: Vec<(u32, bool)> = plan.keep.iter().map(|b| (*b, false)).collect();
        buckets.extend(plan.take.iter().map(|b| (*b, true)));
        buckets.sort_unstable();
        for (b, taken) in buckets {
            let (epoch, token, keep_cursor) = if taken {
                let (epoch, token) = self.bump_epoch(&req.group, &req.consumer, b)?;
                (epoch, token, None)
            } else {
                let h = leases.state.lock().holders[b as usize].clone();
                let Some(h) = h.filter(|h| h.consumer == req.consumer) else {
                    continue; // lost meanwhile (its lease ended)
                };
                let alive = self
                    .cursors
                    .get(h.cursor)
                    .is_some_and(|c| c.lock().lsid == req.lsid);
                if alive {
                    (h.epoch, None, Some(h.cursor))
                } else {
                    self.cursors.remove(h.cursor);
                    let stored = self.group_document(bucket_id(&req.group, b))?;
                    let token = stored.and_then(|d| d.get("resumeToken").cloned());
                    (h.epoch, token.filter(|t| !matches!(t, Bson::Null)), None)
                }
            };
            let batch = match keep_cursor {
                Some(id) => CursorBatch {
                    cursor_id: id,
                    ns: "admin.$cmd.aggregate".to_string(),
                    await_data: true,
                    ..Default::default()
                },
                None => {
                    let start = match token {
                        Some(t) => doc! {"resumeAfter": t},
                        None => doc! {"startAtOperationTime": def.start},
                    };
                    let one = bucket::Bucket {
                        count: def.count,
                        index: b,
                        by: def.by,
                        ns_regex: def.ns_regex.clone(),
                        group: shared.clone(),
                        lease: Some(Arc::new(Lease {
                            leases: leases.clone(),
                            bucket: b,
                            consumer: req.consumer.clone(),
                            epoch,
                        })),
                    };
                    self.open_bucket(&spec, one, &start, req.lsid.clone())?
                }
            };
            let mut s = leases.state.lock();
            match s.holders[b as usize].as_mut() {
                Some(h) if h.consumer == req.consumer && (h.epoch == 0 || h.epoch == epoch) => {
                    h.epoch = epoch;
                    h.cursor = batch.cursor_id;
                }
                _ => {
                    // Its lease ended while it was handed over.
                    drop(s);
                    self.cursors.remove(batch.cursor_id);
                    continue;
                }
            }
            out.push((b, batch, epoch));
        }
        Ok(out)
    }

    /// Increments the bucket's durable epoch (its document made on the first hand-over)
    /// and returns the new epoch and the committed position.
    fn bump_epoch(&self, group: &str, consumer: &str, b: u32) -> Result<(i64, Option<Bson>)> {
        let req = FindAndModify {
            query: bucket_id(group, b),
            update: Some(Bson::Document(doc! {
                "$inc": {"epoch": 1_i64},
                "$set": {"consumer": consumer, "assignedAt": bson::DateTime::now()},
            })),
            new: true,
            upsert: true,
            ..Default::default()
        };
        let out = self.find_and_modify(&groups_ns(), &req)?;
        // The previous holder's transaction, if one is open, can no longer commit
        // (rule 3); the new holder's must not wait for it.
        if let Some(Bson::Document(id)) = req.query.get("_id") {
            self.release_transaction_lock(&groups_ns(), &Bson::Document(id.clone()));
        }
        let d = out
            .value
            .ok_or_else(|| Error::new(codes::INTERNAL_ERROR, "an upsert returns a document"))?;
        let epoch = match d.get("epoch") {
            Some(Bson::Int64(e)) => *e,
            Some(Bson::Int32(e)) => i64::from(*e),
            _ => return Err(Error::new(codes::INTERNAL_ERROR, "a bucket's epoch")),
        };
        let token = d
            .get("resumeToken")
            .cloned()
            .filter(|t| !matches!(t, Bson::Null));
        Ok((epoch, token))
    }

    /// The write that commits `token` as bucket `b`'s position for `consumer`, after
    /// checking (and renewing) its lease: an update of the bucket's document under the
    /// epoch the consumer holds it at. The caller runs it, alone or in the consumer's
    /// transaction; it must match one document, else the consumer was fenced.
    pub fn group_commit(
        &self,
        group: &str,
        consumer: &str,
        b: u32,
        token: &Document,
    ) -> Result<(Namespace, UpdateOp)> {
        super::token::ResumeToken::parse(&Bson::Document(token.clone()))?;
        let leases = self
            .consumer_groups
            .existing(group)
            .ok_or_else(|| fenced(group, consumer, b))?;
        // Another bucket's token would start this bucket's next holder where it never
        // was (see `Bucket::check_token`; the full check runs when it is resumed).
        if let Some(Bson::Document(whose)) = token.get(bucket::BUCKET_FIELD) {
            let count = leases.state.lock().holders.len() as i32;
            let (theirs_b, theirs_n) = (whose.get_i32("bucket"), whose.get_i32("nBuckets"));
            if theirs_b != Ok(b as i32) || theirs_n != Ok(count) {
                return Err(Error::new(
                    codes::INVALID_RESUME_TOKEN,
                    format!(
                        "this resume token is of another bucket ({}: {whose}), not of bucket \
                         {b} of the {count} of change stream group '{group}'",
                        bucket::BUCKET_FIELD
                    ),
                ));
            }
        }
        let epoch = {
            let mut s = leases.state.lock();
            if b as usize >= s.holders.len() {
                return Err(Error::bad_value(format!(
                    "change stream group '{group}' has {} buckets, not bucket {b}",
                    s.holders.len()
                )));
            }
            let epoch = match &s.holders[b as usize] {
                Some(h) if h.consumer == consumer && h.epoch > 0 => h.epoch,
                _ => return Err(fenced(group, consumer, b)),
            };
            // Drops expired consumers first: this one's lease may have just ended.
            s.hold(b, consumer, epoch, Instant::now())
                .ok_or_else(|| fenced(group, consumer, b))?;
            epoch
        };
        let mut q = bucket_id(group, b);
        q.insert("epoch", epoch);
        let op = UpdateOp {
            q,
            u: Bson::Document(doc! {"$set": {
                "resumeToken": token.clone(),
                "committedAt": bson::DateTime::now(),
            }}),
            ..Default::default()
        };
        Ok((groups_ns(), op))
    }

    /// The error of a commit whose update matched nothing.
    pub fn group_fenced(&self, group: &str, consumer: &str, b: u32) -> Error {
        fenced(group, consumer, b)
    }
}

/// The `_id` filter of a bucket's document.
fn bucket_id(group: &str, b: u32) -> Document {
    doc! {"_id": {"group": group, "bucket": b as i32}}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(n: usize) -> LeaseState {
        LeaseState {
            lease: Duration::from_secs(10),
            generation: 1,
            consumers: BTreeMap::new(),
            holders: vec![None; n],
            orphans: Vec::new(),
        }
    }

    /// Marks what a plan took as handed over (epoch 1).
    fn settle(s: &mut LeaseState) {
        for h in s.holders.iter_mut().flatten() {
            if h.epoch == 0 {
                h.epoch = 1;
            }
        }
    }

    fn counts(s: &LeaseState) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for h in s.holders.iter().flatten() {
            *out.entry(h.consumer.clone()).or_default() += 1;
        }
        out
    }

    #[test]
    fn the_first_consumer_takes_every_bucket_and_the_next_ones_take_a_share() {
        let now = Instant::now();
        let mut s = state(8);
        let p = s.plan("a", now).unwrap();
        assert_eq!(p.take, (0..8).collect::<Vec<_>>());
        settle(&mut s);
        let p = s.plan("b", now).unwrap();
        assert_eq!(p.take.len(), 4, "b steals up to its floor: {p:?}");
        settle(&mut s);
        assert_eq!(counts(&s).values().copied().collect::<Vec<_>>(), [4, 4]);
        let before: Vec<_> = s.holders.clone();
        let p = s.plan("c", now).unwrap();
        settle(&mut s);
        assert_eq!(p.take.len(), 2, "floor(8/3): {p:?}");
        // Incremental: only the buckets c took changed hands.
        for (b, (old, new)) in before.iter().zip(&s.holders).enumerate() {
            if !p.take.contains(&(b as u32)) {
                assert_eq!(old, new, "bucket {b} stayed");
            }
        }
        let mut c = counts(&s).into_values().collect::<Vec<_>>();
        c.sort();
        assert_eq!(c, [2, 3, 3]);
    }

    #[test]
    fn a_consumer_over_its_share_gives_up_the_rest_when_it_joins_again() {
        let now = Instant::now();
        let mut s = state(4);
        s.plan("a", now).unwrap();
        settle(&mut s);
        s.consumers.insert(
            "b".into(),
            Member {
                expires: now + Duration::from_secs(10),
                joined_generation: 0,
            },
        );
        let p = s.plan("a", now).unwrap();
        assert_eq!(p.release.len(), 2, "a keeps ceil(4/2): {p:?}");
        let p = s.plan("b", now).unwrap();
        assert_eq!(p.take, [2, 3]);
    }

    #[test]
    fn an_expired_consumer_is_dropped_and_the_others_are_told_to_join_again() {
        let now = Instant::now();
        let mut s = state(4);
        s.plan("a", now).unwrap();
        settle(&mut s);
        s.plan("b", now).unwrap();
        settle(&mut s);
        let a_bucket = s.held_by("a")[0];
        let b_bucket = s.held_by("b")[0];
        assert_eq!(
            s.hold(a_bucket, "a", 1, now),
            Some(true),
            "b joined after a"
        );
        s.plan("a", now).unwrap();
        assert_eq!(s.hold(a_bucket, "a", 1, now), Some(false));
        // b stops renewing; a keeps going past b's lease.
        let later = now + Duration::from_secs(11);
        s.consumers.get_mut("a").unwrap().expires = later + Duration::from_secs(10);
        assert_eq!(s.hold(b_bucket, "b", 1, later), None, "b was dropped");
        assert_eq!(s.hold(a_bucket, "a", 1, later), Some(true), "rejoin");
        let p = s.plan("a", later).unwrap();
        assert_eq!(p.take.len(), 2, "a takes b's buckets: {p:?}");
        assert!(s.orphans.len() <= 2);
    }

    fn request(consumer: &str) -> JoinRequest {
        JoinRequest {
            group: "g".into(),
            consumer: consumer.into(),
            given: doc! {"nBuckets": 2, "by": "documentKey"},
            lsid: None,
        }
    }

    fn epochs(e: &Engine) -> Vec<i64> {
        (0..2)
            .map(|b| {
                let d = e
                    .group_document(bucket_id("g", b))
                    .unwrap()
                    .expect("stored");
                d.get_i64("epoch").unwrap()
            })
            .collect()
    }

    /// Rule 2: a commit whose lease was checked before its bucket was handed on
    /// matches nothing when it runs after: the durable epoch moved.
    #[test]
    fn a_commit_in_flight_during_a_hand_over_matches_nothing() {
        let t = crate::core::testing::TestEngine::open();
        let e = &t.engine;
        let a = e.join_consumer_group(request("a")).unwrap();
        assert_eq!(a.buckets.iter().map(|b| b.0).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(epochs(e), [1, 1]);
        let token = doc! {"_data": "8200000001000000012B0229296E04"};
        let (ns, op) = e.group_commit("g", "a", 1, &token).unwrap();
        let b = e.join_consumer_group(request("b")).unwrap();
        assert_eq!(b.buckets.iter().map(|b| b.0).collect::<Vec<_>>(), [1]);
        assert_eq!(epochs(e), [1, 2]);
        assert_eq!(e.update(&ns, vec![op], true).unwrap().n, 0, "fenced");
        let err = e.group_commit("g", "a", 1, &token).unwrap_err();
        assert_eq!(err.code, CONSUMER_FENCED);
        let (ns, op) = e.group_commit("g", "b", 1, &token).unwrap();
        assert_eq!(e.update(&ns, vec![op], true).unwrap().n, 1);
        let (ns, op) = e.group_commit("g", "a", 0, &token).unwrap();
        assert_eq!(
            e.update(&ns, vec![op], true).unwrap().n,
            1,
            "a keeps bucket 0"
        );
        // A definition that differs is refused; one left out is the stored one.
        let mut other = request("c");
        other.given = doc! {"nBuckets": 4};
        assert_eq!(
            e.join_consumer_group(other).unwrap_err().code,
            codes::INVALID_OPTIONS
        );
        let mut same = request("c");
        same.given = Document::new();
        assert_eq!(e.join_consumer_group(same).unwrap().count, 2);
    }

    #[test]
    fn a_holder_with_another_epoch_is_fenced() {
        let now = Instant::now();
        let mut s = state(2);
        s.plan("a", now).unwrap();
        settle(&mut s);
        assert_eq!(s.hold(0, "a", 1, now), Some(false));
        assert_eq!(s.hold(0, "a", 2, now), None);
        assert_eq!(s.hold(0, "b", 1, now), None);
    }
}
