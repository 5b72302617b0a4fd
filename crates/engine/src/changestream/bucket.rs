//! Parallel change streams (issue 28, seed 004): the deployment's change stream split
//! into N buckets, each its own cursor read side by side.
//!
//! A bucket is a cluster change stream that keeps the events of its share: with
//! [`BucketBy::Namespace`] (the seed's rule) an event belongs to bucket
//! `hash(ns) % N`, so every collection's events stay in one bucket in oplog order;
//! with [`BucketBy::DocumentKey`] (the seed's future work) to `hash(documentKey) % N`,
//! so one collection spreads over every bucket and each document's events stay in
//! order in one. An event without a document key (a drop, a rename, an index build)
//! goes by its namespace under either rule. `ns` is `db.coll`, or `db` for an event of
//! a whole database (dropDatabase). `nsRegex` keeps only the events whose `ns`
//! matches it.
//!
//! A bucket is also an ordinary change stream: `watch([{$changeStreamBucket: {nBuckets:
//! N, bucket: i, by: "ns" | "documentKey", nsRegex: "..."}}])` with an unchanged
//! driver, on a collection, a database or the deployment. Its resume tokens are its
//! own events', so the driver's automatic resume continues the bucket exactly where
//! it stopped.
//!
//! The hash is 64-bit FNV-1a (as the commit bus's namespace bits; `core::bus::fnv1a`), of
//! the namespace's bytes or of the BSON document `{_id: <the document's _id>}`: the
//! same on every member and every restart, so a bucket's resume tokens stay valid.
//!
//! What a bucket reads: when `nsRegex` names one collection (`^db\.coll$`,
//! [`Bucket::literal_namespace`]), only that collection's index of the oplog
//! (`oplog_by_ns`, as a collection's change stream), and with `by: "documentKey"` it
//! fetches only the entries whose digest's key hash is its own
//! ([`Bucket::may_keep_digest`]): another bucket's writes cost it a digest of a few
//! bytes, never a read of the entry. Otherwise it reads the whole oplog, deciding on
//! an entry before making it into an event ([`Bucket::may_keep_entry`]: its `op`, `ns`
//! and the document's `_id`, read from the entry's bytes). The event itself is decided
//! once made ([`Bucket::admits`]: commands and transactions, whose entries hold several
//! events).

use super::token::ResumeToken;
use bson::{Bson, Document, RawDocument};
use std::sync::{Arc, Mutex};
use tailstream_query::error::{Error, Result};

/// The stage that makes an ordinary change stream one bucket (see
/// [`Bucket::from_stage`]).
pub const STAGE: &str = "$changeStreamBucket";

/// The field of a bucket's `postBatchResumeToken` that says whose it is (its stream's
/// split and its number): a token given back to resume a bucket must be its own.
pub const BUCKET_FIELD: &str = "_bucket";
/// The field of a parallel stream's `combinedResumeToken` that says whose it is (the
/// split, no bucket number: it resumes every bucket).
pub const SPLIT_FIELD: &str = "_split";

/// The most buckets one parallel stream may have: each is a cursor (and a reader of
/// the oplog) of its own.
pub const MAX_BUCKETS: u32 = 1024;

/// How events are spread over the buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BucketBy {
    Namespace,
    DocumentKey,
}

/// One bucket of a parallel change stream.
#[derive(Debug, Clone)]
pub struct Bucket {
    /// How many buckets the stream has (1 to [`MAX_BUCKETS`]).
    pub count: u32,
    /// This one's number, below `count`.
    pub index: u32,
    pub by: BucketBy,
    /// Only the events whose `ns` matches (the seed's `nsRegex`).
    pub ns_regex: Option<regex::Regex>,
    /// Every bucket of the stream (the combined resume point).
    pub group: Arc<Group>,
    /// A bucket of a consumer group: the lease its reader holds it under, checked and
    /// renewed by every getMore (see `consumer_group`).
    pub lease: Option<Arc<super::consumer_group::Lease>>,
}

/// The buckets of one parallel stream together: each one's position, so every
/// bucket's getMore can say the stream's combined resume point (the smallest: resuming
/// every bucket after it loses nothing, the seed's rule).
#[derive(Debug)]
pub struct Group {
    positions: Mutex<Vec<Option<ResumeToken>>>,
}

impl Group {
    pub fn new(count: u32) -> Arc<Group> {
        Arc::new(Group {
            positions: Mutex::new(vec![None; count as usize]),
        })
    }

    fn positions(&self) -> std::sync::MutexGuard<'_, Vec<Option<ResumeToken>>> {
        self.positions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bucket `index` is at `at` (after its latest batch).
    pub fn record(&self, index: u32, at: &ResumeToken) {
        let mut p = self.positions();
        assert!((index as usize) < p.len(), "a bucket of this stream");
        p[index as usize] = Some(at.clone());
    }

    /// The smallest position, once every bucket has one.
    pub fn combined(&self) -> Option<ResumeToken> {
        let p = self.positions();
        let mut min: Option<&ResumeToken> = None;
        for t in p.iter() {
            let t = t.as_ref()?;
            if min.is_none_or(|m| t.cmp_position(m).is_lt()) {
                min = Some(t);
            }
        }
        min.cloned()
    }
}

/// How a parallel stream is split: its buckets' count and rule, the namespaces kept,
/// and where each bucket resumes when each has its own token.
#[derive(Debug, Clone)]
pub struct Split {
    /// 1 to [`MAX_BUCKETS`].
    pub count: u32,
    pub by: BucketBy,
    pub ns_regex: Option<regex::Regex>,
    /// `resumeAfter` or `startAfter`, and a token per bucket in bucket order.
    pub per_bucket: Option<(&'static str, Vec<bson::Bson>)>,
}

/// A regular expression with its `i`, `m`, `s` and `x` options kept (mongod's 51091 for
/// a pattern that does not compile).
fn compile(pattern: &str, options: &str) -> Result<regex::Regex> {
    let flags: String = options.chars().filter(|c| "imsx".contains(*c)).collect();
    let full = if flags.is_empty() {
        pattern.to_string()
    } else {
        format!("(?{flags}){pattern}")
    };
    regex::Regex::new(&full)
        .map_err(|e| Error::new(51091, format!("Regular expression is invalid: {e}")))
}

/// The fields that say how a stream is split, as `parallelChangeStream` and the
/// `$changeStreamBucket` stage (`owner` in the messages) both take them.
///
/// A required whole-number field (mongod's IDL errors: 40414 missing, 14 a wrong type).
pub(crate) fn whole_number(spec: &Document, owner: &str, field: &str) -> Result<i64> {
    match spec.get(field) {
        None => Err(Error::new(
            40414,
            format!("BSON field '{owner}.{field}' is missing but a required field"),
        )),
        Some(Bson::Int32(n)) => Ok(i64::from(*n)),
        Some(Bson::Int64(n)) => Ok(*n),
        Some(Bson::Double(d)) if d.fract() == 0.0 => Ok(*d as i64),
        Some(other) => Err(Error::type_mismatch(format!(
            "BSON field '{owner}.{field}' is the wrong type '{}', expected types '[long, int, decimal, double]'",
            tailstream_query::types::type_name(other)
        ))),
    }
}

/// `nBuckets`: 1 to [`MAX_BUCKETS`].
pub fn parse_count(spec: &Document, owner: &str) -> Result<u32> {
    let n = whole_number(spec, owner, "nBuckets")?;
    if !(1..=i64::from(MAX_BUCKETS)).contains(&n) {
        return Err(Error::bad_value(format!(
            "nBuckets must be between 1 and {MAX_BUCKETS}, not {n}"
        )));
    }
    Ok(u32::try_from(n).expect("checked above"))
}

/// `by`: "ns" (the default) or "documentKey".
pub fn parse_by(spec: &Document, owner: &str) -> Result<BucketBy> {
    match spec.get("by") {
        None => Ok(BucketBy::Namespace),
        Some(Bson::String(s)) if s == "ns" => Ok(BucketBy::Namespace),
        Some(Bson::String(s)) if s == "documentKey" => Ok(BucketBy::DocumentKey),
        Some(other) => Err(Error::bad_value(format!(
            "BSON field '{owner}.by' must be \"ns\" or \"documentKey\", not {other}"
        ))),
    }
}

/// `pipeline`: the stages after `$changeStream`, in every bucket (none when absent).
pub fn parse_pipeline(spec: &Document, owner: &str) -> Result<Vec<Document>> {
    match spec.get("pipeline") {
        None => Ok(Vec::new()),
        Some(Bson::Array(items)) => items
            .iter()
            .map(|s| match s {
                Bson::Document(d) => Ok(d.clone()),
                other => Err(Error::type_mismatch(format!(
                    "Each element of the 'pipeline' array must be an object, not {}",
                    tailstream_query::types::type_name(other)
                ))),
            })
            .collect(),
        Some(other) => Err(Error::type_mismatch(format!(
            "BSON field '{owner}.pipeline' is the wrong type '{}', expected type 'array'",
            tailstream_query::types::type_name(other)
        ))),
    }
}

/// `nsRegex`: a regular expression (its `i`, `m`, `s` and `x` options kept) or a
/// string pattern; none when absent.
pub fn parse_ns_regex(spec: &Document, owner: &str) -> Result<Option<regex::Regex>> {
    match spec.get("nsRegex") {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::String(p)) => compile(p, "").map(Some),
        Some(Bson::RegularExpression(re)) => compile(&re.pattern, &re.options).map(Some),
        Some(other) => Err(Error::type_mismatch(format!(
            "BSON field '{owner}.nsRegex' is the wrong type '{}', expected types '[regex, string]'",
            tailstream_query::types::type_name(other)
        ))),
    }
}

use crate::core::bus::fnv1a;
use crate::oplog::document_key_hash as id_hash;

/// An event's `ns`: its database and collection (none for an event of a whole
/// database); none for an event without one.
fn event_ns(event: &RawDocument) -> Option<(&str, Option<&str>)> {
    let ns = event.get_document("ns").ok()?;
    Some((ns.get_str("db").ok()?, ns.get_str("coll").ok()))
}

impl Bucket {
    /// The bucket a `$changeStreamBucket` stage names: `{nBuckets, bucket, by, nsRegex}`
    /// (`by` "ns" by default, `nsRegex` a string or a regular expression, optional).
    /// Alone: it has no combined resume point.
    pub fn from_stage(v: &Bson) -> Result<Bucket> {
        let Bson::Document(spec) = v else {
            return Err(Error::type_mismatch(format!(
                "{STAGE} takes an object: {{nBuckets, bucket, by, nsRegex}}"
            )));
        };
        for k in spec.keys() {
            if !["nBuckets", "bucket", "by", "nsRegex"].contains(&k.as_str()) {
                return Err(Error::new(
                    40415,
                    format!("BSON field '{STAGE}.{k}' is an unknown field."),
                ));
            }
        }
        let count = parse_count(spec, STAGE)?;
        let index = whole_number(spec, STAGE, "bucket")?;
        if !(0..i64::from(count)).contains(&index) {
            return Err(Error::bad_value(format!(
                "bucket must be between 0 and nBuckets - 1 ({}), not {index}",
                count - 1
            )));
        }
        let by = parse_by(spec, STAGE)?;
        let ns_regex = parse_ns_regex(spec, STAGE)?;
        Ok(Bucket {
            count,
            index: u32::try_from(index).expect("checked above"),
            by,
            ns_regex,
            group: Group::new(count),
            lease: None,
        })
    }

    /// Which of `count` buckets an event belongs to (see the module's doc).
    pub fn of(by: BucketBy, count: u32, event: &RawDocument) -> u32 {
        assert!(count >= 1, "a parallel stream has a bucket");
        let id = match by {
            BucketBy::DocumentKey => event
                .get_document("documentKey")
                .ok()
                .and_then(|k| k.get("_id").ok().flatten()),
            BucketBy::Namespace => None,
        };
        let h = match id {
            Some(id) => id_hash(id),
            None => match event_ns(event) {
                Some((db, Some(coll))) => fnv1a(&[db.as_bytes(), b".", coll.as_bytes()]),
                Some((db, None)) => fnv1a(&[db.as_bytes()]),
                None => 0,
            },
        };
        u32::try_from(h % u64::from(count)).expect("below a u32 count")
    }

    /// Whether an oplog entry may make an event of this bucket, decided without making
    /// it: an insert, update or delete of a namespace `nsRegex` rules out, or of
    /// another bucket's namespace (by ns) or document (by document key), cannot.
    /// Anything else (commands, transactions, no-ops, an entry without the fields
    /// expected) may; its events are decided one by one ([`Bucket::admits`]).
    pub fn may_keep_entry(&self, entry: &RawDocument) -> bool {
        let op = match entry.get_str("op") {
            Ok(op @ ("i" | "u" | "d")) => op,
            _ => return true,
        };
        let Ok(ns) = entry.get_str("ns") else {
            return true;
        };
        // A write of a view's definition is an event of the view's namespace, not of
        // `system.views`: decided once made.
        if crate::catalog::views::is_system_views(ns) {
            return true;
        }
        if !self.matches_ns(ns) {
            return false;
        }
        let h = match self.by {
            BucketBy::Namespace => fnv1a(&[ns.as_bytes()]),
            BucketBy::DocumentKey => {
                let holder = if op == "u" { "o2" } else { "o" };
                let id = entry
                    .get_document(holder)
                    .ok()
                    .and_then(|d| d.get("_id").ok().flatten());
                match id {
                    Some(id) => id_hash(id),
                    None => return true,
                }
            }
        };
        self.is_mine(h)
    }

    /// Whether `nsRegex` (if any) matches `ns`.
    fn matches_ns(&self, ns: &str) -> bool {
        self.ns_regex.as_ref().is_none_or(|re| re.is_match(ns))
    }

    /// Whether a hash (of a namespace or a document key) falls in this bucket.
    fn is_mine(&self, h: u64) -> bool {
        h % u64::from(self.count) == u64::from(self.index)
    }

    /// The one namespace `nsRegex` names when it is a literal `^db\.coll$` (no other
    /// pattern syntax, no options): the bucket then reads that namespace's index of
    /// the oplog instead of the whole oplog.
    pub fn literal_namespace(&self) -> Option<String> {
        let re = self.ns_regex.as_ref()?.as_str();
        let inner = re.strip_prefix('^')?.strip_suffix('$')?;
        let mut out = String::with_capacity(inner.len());
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next()? {
                    e @ ('.' | '$' | '-' | '_') => out.push(e),
                    _ => return None,
                },
                '.' | '[' | ']' | '(' | ')' | '{' | '}' | '*' | '+' | '?' | '|' | '^' | '$' => {
                    return None
                }
                c => out.push(c),
            }
        }
        let (db, coll) = out.split_once('.')?;
        (!db.is_empty() && !coll.is_empty()).then_some(out)
    }

    /// Whether the events of namespace `ns` (`db.coll`) are this bucket's under
    /// `by: "ns"`: `nsRegex` matches it and it hashes to this bucket.
    pub fn owns_namespace(&self, ns: &str) -> bool {
        self.matches_ns(ns) && self.is_mine(fnv1a(&[ns.as_bytes()]))
    }

    /// Whether this bucket may have events of namespace `ns`: by namespace, the ones
    /// it owns; by document key, every one `nsRegex` matches.
    pub fn reads_namespace(&self, ns: &str) -> bool {
        match self.by {
            BucketBy::Namespace => self.owns_namespace(ns),
            BucketBy::DocumentKey => self.matches_ns(ns),
        }
    }

    /// Whether an entry may make an event of this bucket, decided on its
    /// `oplog_by_ns` digest alone (`oplog::ns_digest`): with `by: "documentKey"`, an
    /// insert, update, replacement or delete whose key hash is another bucket's cannot.
    /// Anything else may (a digest without the hash too: written before it existed).
    pub fn may_keep_digest(&self, digest: &[u8]) -> bool {
        if self.by != BucketBy::DocumentKey {
            return true;
        }
        let d = crate::oplog::Digest::parse(digest);
        match (d.kind, d.key_hash) {
            (Some(b'i' | b'u' | b'r' | b'd'), Some(h)) => self.is_mine(h),
            _ => true,
        }
    }

    /// The stream's split: bucket count, rule and `nsRegex` (as compiled, its options
    /// inline).
    pub fn split_identity(&self) -> Document {
        let by = match self.by {
            BucketBy::Namespace => "ns",
            BucketBy::DocumentKey => "documentKey",
        };
        let regex = self
            .ns_regex
            .as_ref()
            .map_or(Bson::Null, |r| Bson::String(r.as_str().to_string()));
        bson::doc! {"nBuckets": self.count as i32, "by": by, "nsRegex": regex}
    }

    /// The split and this bucket's number: what its tokens carry ([`BUCKET_FIELD`]).
    pub fn identity(&self) -> Document {
        let mut d = self.split_identity();
        d.insert("bucket", self.index as i32);
        d
    }

    /// A token given to resume this bucket: one of its own, or its stream's combined
    /// one, or a token of an ordinary stream (any position is a valid start: at least
    /// once). Another bucket's, or a token of a stream split otherwise, would resume
    /// this bucket at a position it never reached (losing its events in between):
    /// InvalidResumeToken.
    pub fn check_token(&self, token: &Document) -> Result<()> {
        let (field, mine) = if token.contains_key(BUCKET_FIELD) {
            (BUCKET_FIELD, self.identity())
        } else if token.contains_key(SPLIT_FIELD) {
            (SPLIT_FIELD, self.split_identity())
        } else {
            return Ok(());
        };
        match token.get(field) {
            Some(Bson::Document(theirs)) if *theirs == mine => Ok(()),
            theirs => Err(Error::new(
                tailstream_query::error::codes::INVALID_RESUME_TOKEN,
                format!(
                    "this resume token is of another parallel stream or bucket ({field}: {}); \
                     this bucket is {mine}",
                    theirs.map_or("(none)".to_string(), |t| t.to_string())
                ),
            )),
        }
    }

    /// Whether this bucket keeps `event`.
    pub fn admits(&self, event: &RawDocument) -> bool {
        if let Some(re) = &self.ns_regex {
            let kept = match event_ns(event) {
                Some((db, Some(coll))) => re.is_match(&format!("{db}.{coll}")),
                Some((db, None)) => re.is_match(db),
                None => re.is_match(""),
            };
            if !kept {
                return false;
            }
        }
        Bucket::of(self.by, self.count, event) == self.index
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    #[test]
    fn every_event_is_in_exactly_one_bucket_and_a_documents_events_in_the_same() {
        for n in [1u32, 2, 4, 8] {
            let mut seen = vec![0u32; n as usize];
            for i in 0..200 {
                let insert = rawdoc! {"ns": {"db": "d", "coll": "c"}, "documentKey": {"_id": i}};
                let update = rawdoc! {"operationType": "update", "ns": {"db": "d", "coll": "c"}, "documentKey": {"_id": i}};
                let b = Bucket::of(BucketBy::DocumentKey, n, &insert);
                assert_eq!(b, Bucket::of(BucketBy::DocumentKey, n, &update));
                seen[b as usize] += 1;
                let buckets = (0..n).filter(|&index| {
                    Bucket {
                        count: n,
                        index,
                        by: BucketBy::DocumentKey,
                        ns_regex: None,
                        group: Group::new(n),
                        lease: None,
                    }
                    .admits(&insert)
                });
                assert_eq!(buckets.count(), 1);
            }
            // One collection spreads over every bucket by document key.
            assert!(seen.iter().all(|&s| s > 0), "{n} buckets: {seen:?}");
        }
    }

    #[test]
    fn by_namespace_a_collection_stays_in_one_bucket_and_ddl_follows_it() {
        let n = 4;
        let insert = rawdoc! {"ns": {"db": "d", "coll": "c"}, "documentKey": {"_id": 1}};
        let drop = rawdoc! {"operationType": "drop", "ns": {"db": "d", "coll": "c"}};
        let b = Bucket::of(BucketBy::Namespace, n, &insert);
        assert_eq!(b, Bucket::of(BucketBy::Namespace, n, &drop));
        // Without a document key, the document-key rule goes by the namespace too.
        assert_eq!(b, Bucket::of(BucketBy::DocumentKey, n, &drop));
        let spread: std::collections::BTreeSet<u32> = (0..64)
            .map(|i| {
                let e = rawdoc! {"ns": {"db": "d", "coll": format!("c{i}")}};
                Bucket::of(BucketBy::Namespace, n, &e)
            })
            .collect();
        assert_eq!(spread.len(), n as usize);
    }

    /// An entry's decision agrees with its event's: the entry is kept by exactly the
    /// bucket that keeps the event.
    #[test]
    fn an_entry_is_kept_by_the_bucket_of_its_event() {
        for by in [BucketBy::Namespace, BucketBy::DocumentKey] {
            for i in 0..50 {
                let coll = format!("c{}", i % 7);
                let entries = [
                    rawdoc! {"op": "i", "ns": format!("d.{coll}"), "o": {"_id": i, "x": 1}},
                    rawdoc! {"op": "u", "ns": format!("d.{coll}"), "o": {"$v": 2}, "o2": {"_id": i}},
                    rawdoc! {"op": "d", "ns": format!("d.{coll}"), "o": {"_id": i}},
                ];
                let event =
                    rawdoc! {"ns": {"db": "d", "coll": coll.clone()}, "documentKey": {"_id": i}};
                let home = Bucket::of(by, 4, &event);
                for entry in &entries {
                    for index in 0..4 {
                        let b = Bucket {
                            count: 4,
                            index,
                            by,
                            ns_regex: None,
                            group: Group::new(4),
                            lease: None,
                        };
                        assert_eq!(b.may_keep_entry(entry), index == home, "{by:?} {entry:?}");
                    }
                }
            }
        }
        // A command or a transaction's entry may hold any bucket's events.
        let b = Bucket {
            count: 4,
            index: 0,
            by: BucketBy::Namespace,
            ns_regex: None,
            group: Group::new(4),
            lease: None,
        };
        assert!((0..4).all(|index| Bucket { index, ..b.clone() }
            .may_keep_entry(&rawdoc! {"op": "c", "ns": "d.$cmd", "o": {"drop": "c"}})));
    }

    #[test]
    fn the_combined_point_is_the_smallest_once_every_bucket_has_one() {
        use crate::core::time::ClusterTime;
        let at = |secs: u32| ResumeToken::high_water_mark(ClusterTime::new(secs, 1));
        let g = Group::new(3);
        g.record(0, &at(20));
        g.record(2, &at(10));
        assert_eq!(g.combined(), None);
        g.record(1, &at(30));
        assert_eq!(g.combined(), Some(at(10)));
        g.record(2, &at(40));
        assert_eq!(g.combined(), Some(at(20)));
    }

    #[test]
    fn ns_regex_keeps_only_its_namespaces() {
        let b = Bucket {
            count: 1,
            index: 0,
            by: BucketBy::Namespace,
            ns_regex: Some(regex::Regex::new("^shop\\.orders").unwrap()),
            group: Group::new(1),
            lease: None,
        };
        assert!(b.admits(&rawdoc! {"ns": {"db": "shop", "coll": "orders"}}));
        assert!(!b.admits(&rawdoc! {"ns": {"db": "shop", "coll": "users"}}));
        assert!(!b.admits(&rawdoc! {"ns": {"db": "shop"}}));
        assert!(b.may_keep_entry(&rawdoc! {"op": "i", "ns": "shop.orders", "o": {"_id": 1}}));
        assert!(!b.may_keep_entry(&rawdoc! {"op": "i", "ns": "shop.users", "o": {"_id": 1}}));
    }
}
