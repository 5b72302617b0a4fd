//! `$group` accumulators and group keys.

use super::accumulator_n::{self, AccParams, MultiState};
use crate::bson_size::{heap_len, BSON_SLOT_BYTES, FIELD_ENTRY_BYTES};
use crate::collation::Collator;
use crate::compare::{as_f64, cmp_bson_with, is_number};
use crate::error::{Error, Result};
use crate::expr::num::Summer;
use crate::expr::{util, Expr, Variables};
use bson::{Bson, Document};
use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccOp {
    Sum,
    Avg,
    Min,
    Max,
    First,
    Last,
    Push,
    AddToSet,
    MergeObjects,
    StdDevPop,
    StdDevSamp,
    Count,
    /// `$accumulator`: user JavaScript (see [`JsAccumulator`]).
    Js,
    /// The accumulators with an `n`, a sort or percentiles ([`accumulator_n`]).
    Multi(accumulator_n::Kind),
}

#[derive(Debug, Clone)]
pub struct AccSpec {
    pub name: String,
    pub op: AccOp,
    /// The per-document argument (`accumulateArgs` for `$accumulator`).
    pub arg: Expr,
    /// The functions of an `$accumulator`.
    pub js: Option<Arc<JsAccumulator>>,
    /// The `n`, `sortBy` or `p` of the accumulators that take one ([`accumulator_n`]).
    pub params: Option<Arc<AccParams>>,
}

/// `{$accumulator: {init, initArgs, accumulate, accumulateArgs, merge, finalize, lang}}`.
/// `merge` combines partial states, which only sharding or spilling to disk produce;
/// this server does neither, so it is checked but never called.
#[derive(Debug)]
pub struct JsAccumulator {
    pub init: Arc<str>,
    /// Evaluated against the first document of each group.
    pub init_args: Expr,
    pub accumulate: Arc<str>,
    pub merge: Arc<str>,
    pub finalize: Option<Arc<str>>,
}

/// Pending `accumulate` calls are handed to JavaScript in batches of at most this many
/// (one round trip of the state per batch, as mongod batches them).
const JS_BATCH_CALLS: usize = 1000;
/// ... or this many bytes of arguments.
const JS_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// mongod's `internalDocumentSourceGroupMaxMemoryBytes`: what a `$group`'s groups may
/// hold before the groups it has not seen yet spill to disk (or, with `allowDiskUse:
/// false`, the stage fails).
pub const DEFAULT_MAX_GROUP_BYTES: usize = 100 * 1024 * 1024;

/// mongod's `internalQueryMaxPushBytes` and `internalQueryMaxAddToSetBytes`: what one
/// group's `$push` or `$addToSet` may hold (neither can spill).
const MAX_ARRAY_ACCUMULATOR_BYTES: usize = 100 * 1024 * 1024;

/// What a group takes besides its states and what its key owns: its entry in the index
/// (the key string, its place, about 8 bytes of the map's control and load) and in the
/// list (its `_id` and the states' vector).
const GROUP_BYTES: usize =
    std::mem::size_of::<(String, usize)>() + 8 + std::mem::size_of::<(Bson, Vec<AccState>)>();

/// What a `$addToSet` value's entry in its set of keys takes, besides the key's bytes.
const SET_ENTRY_BYTES: usize = std::mem::size_of::<(String, ())>() + 8;

/// mongod's codes for a `$group` past its limit with `allowDiskUse: false`, and for an
/// accumulator past its own.
const QUERY_EXCEEDED_MEMORY_LIMIT_NO_DISK_USE_ALLOWED: i32 = 292;
const EXCEEDED_MEMORY_LIMIT: i32 = 146;

fn check_array_bytes(name: &str, bytes: usize) -> Result<()> {
    if bytes > MAX_ARRAY_ACCUMULATOR_BYTES {
        return Err(Error::new(
            EXCEEDED_MEMORY_LIMIT,
            format!(
                "{name} used too much memory and cannot spill to disk. Memory limit: \
                 {MAX_ARRAY_ACCUMULATOR_BYTES} bytes"
            ),
        ));
    }
    Ok(())
}

/// Puts `v` in `slot`; the bytes it owns beyond what the value it replaced owned.
fn replaced(slot: &mut Option<Bson>, v: Option<Bson>) -> usize {
    let new = v.as_ref().map_or(0, heap_len);
    let old = std::mem::replace(slot, v).as_ref().map_or(0, heap_len);
    new.saturating_sub(old)
}

/// A function argument of `$accumulator`: a constant string or Code.
fn js_function_source(field: &str, v: &Bson) -> Result<Arc<str>> {
    let source = match Expr::parse(v)? {
        Expr::Const(Bson::String(s)) | Expr::Const(Bson::JavaScriptCode(s)) => s,
        Expr::Const(_) => {
            return Err(Error::location(
                4544702,
                format!("$accumulator '{field}' must be a String or Code"),
            ))
        }
        _ => {
            return Err(Error::location(
                4544701,
                format!("$accumulator '{field}' must be a constant expression"),
            ))
        }
    };
    if source.len() > crate::script::MAX_SOURCE_BYTES {
        return Err(Error::bad_value(format!(
            "$accumulator '{field}' of {} bytes exceeds the limit of {} bytes",
            source.len(),
            crate::script::MAX_SOURCE_BYTES
        )));
    }
    Ok(Arc::from(source.as_str()))
}

fn parse_js_accumulator(field: &str, arg: &Bson) -> Result<AccSpec> {
    let Bson::Document(d) = arg else {
        return Err(Error::location(
            4544703,
            format!(
                "$accumulator expects an object as an argument; found: {}",
                util::type_name(arg)
            ),
        ));
    };
    let (mut init, mut accumulate, mut merge, mut finalize) = (None, None, None, None);
    let (mut init_args, mut accumulate_args) = (None, None);
    for (k, v) in d {
        match k.as_str() {
            "init" => init = Some(js_function_source("init", v)?),
            "accumulate" => accumulate = Some(js_function_source("accumulate", v)?),
            "merge" => merge = Some(js_function_source("merge", v)?),
            "finalize" => finalize = Some(js_function_source("finalize", v)?),
            "initArgs" => init_args = Some(Expr::parse(v)?),
            "accumulateArgs" => accumulate_args = Some(Expr::parse(v)?),
            "lang" => match v {
                Bson::String(l) if l == "js" => {}
                Bson::String(_) => {
                    return Err(Error::location(
                        4544705,
                        "$accumulator only supports lang: 'js'",
                    ))
                }
                other => {
                    return Err(Error::location(
                        4544704,
                        format!(
                            "$accumulator lang must be a string; found: {}",
                            util::type_name(other)
                        ),
                    ))
                }
            },
            other => {
                return Err(Error::location(
                    4544706,
                    format!("$accumulator got an unexpected field: {other}"),
                ))
            }
        }
    }
    let init = init
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Error::location(4544707, "$accumulator missing required argument 'init'"))?;
    let accumulate = accumulate.filter(|s| !s.is_empty()).ok_or_else(|| {
        Error::location(
            4544708,
            "$accumulator missing required argument 'accumulate'",
        )
    })?;
    let merge = merge.filter(|s| !s.is_empty()).ok_or_else(|| {
        Error::location(4544709, "$accumulator missing required argument 'merge'")
    })?;
    let accumulate_args = accumulate_args.ok_or_else(|| {
        Error::location(
            4544710,
            "$accumulator missing required argument 'accumulateArgs'",
        )
    })?;
    Ok(AccSpec {
        name: field.to_string(),
        op: AccOp::Js,
        arg: accumulate_args,
        js: Some(Arc::new(JsAccumulator {
            init,
            init_args: init_args.unwrap_or(Expr::Const(Bson::Array(Vec::new()))),
            accumulate,
            merge,
            finalize,
        })),
        params: None,
    })
}

impl AccSpec {
    /// Parses `field: {$op: <expr>}` of a `$group` (or `$bucket.output`).
    pub fn parse(field: &str, v: &Bson) -> Result<AccSpec> {
        if field.contains('.') {
            return Err(Error::location(
                40235,
                format!("The field name '{field}' cannot contain '.'"),
            ));
        }
        if field.starts_with('$') {
            return Err(Error::location(
                40236,
                format!("The field name '{field}' cannot be an operator name"),
            ));
        }
        let Bson::Document(d) = v else {
            return Err(Error::location(
                40234,
                format!("The field '{field}' must be an accumulator object"),
            ));
        };
        if d.len() != 1 {
            return Err(Error::location(
                40238,
                format!("The field '{field}' must specify one accumulator"),
            ));
        }
        let (op_name, arg) = d.iter().next().unwrap();
        if op_name == "$accumulator" {
            return parse_js_accumulator(field, arg);
        }
        if let Some(kind) = accumulator_n::kind_for(op_name) {
            let (arg, params) = accumulator_n::parse(kind, op_name, arg)?;
            return Ok(AccSpec {
                name: field.to_string(),
                op: AccOp::Multi(kind),
                arg,
                js: None,
                params: Some(Arc::new(params)),
            });
        }
        let op = match op_name.as_str() {
            "$sum" => AccOp::Sum,
            "$avg" => AccOp::Avg,
            "$min" => AccOp::Min,
            "$max" => AccOp::Max,
            "$first" => AccOp::First,
            "$last" => AccOp::Last,
            "$push" => AccOp::Push,
            "$addToSet" => AccOp::AddToSet,
            "$mergeObjects" => AccOp::MergeObjects,
            "$stdDevPop" => AccOp::StdDevPop,
            "$stdDevSamp" => AccOp::StdDevSamp,
            "$count" => AccOp::Count,
            other => {
                return Err(Error::location(
                    15952,
                    format!("unknown group operator '{other}'"),
                ))
            }
        };
        if op == AccOp::Count {
            if !matches!(arg, Bson::Document(a) if a.is_empty()) {
                return Err(Error::location(
                    40160,
                    "$count takes no arguments, i.e. $count:{}",
                ));
            }
            return Ok(AccSpec {
                name: field.to_string(),
                op,
                arg: Expr::Const(Bson::Int32(1)),
                js: None,
                params: None,
            });
        }
        if matches!(arg, Bson::Array(_)) {
            return Err(Error::location(
                40237,
                format!("The {op_name} accumulator is a unary operator"),
            ));
        }
        Ok(AccSpec {
            name: field.to_string(),
            op,
            arg: Expr::parse(arg)?,
            js: None,
            params: None,
        })
    }
}

#[derive(Debug, Clone)]
pub enum AccState {
    Sum(Summer),
    Avg(Summer),
    MinMax(Option<Bson>),
    First(Option<Bson>, bool),
    Last(Option<Bson>),
    /// The values, and their bytes ([`MAX_ARRAY_ACCUMULATOR_BYTES`] at most).
    Push(Vec<Bson>, usize),
    /// The distinct values, their keys ([`group_key`]), and their bytes.
    AddToSet(Vec<Bson>, HashMap<String, ()>, usize),
    Merge(Document),
    StdDev(Vec<f64>),
    /// `$accumulator`: the state `init` returned, folded with the pending
    /// `accumulate` argument lists in batches.
    Js {
        spec: Arc<JsAccumulator>,
        state: Bson,
        pending: Vec<Bson>,
        pending_bytes: usize,
    },
    /// The accumulators of [`accumulator_n`].
    Multi(MultiState),
}

impl AccState {
    /// The state of a new group with `_id` `key` (which the `n` of `$firstN` and the like
    /// may read) whose first document is `first`.
    pub fn start(
        spec: &AccSpec,
        key: &Bson,
        first: &Document,
        vars: &Variables,
    ) -> Result<AccState> {
        let init_args = Self::init_args(spec, first, vars)?;
        Self::start_with(spec, key, init_args, vars)
    }

    /// What an `$accumulator`'s `init` is called with for a group whose first document
    /// is `first` (None for the other accumulators).
    fn init_args(spec: &AccSpec, first: &Document, vars: &Variables) -> Result<Option<Vec<Bson>>> {
        let Some(js) = &spec.js else {
            return Ok(None);
        };
        match js.init_args.evaluate(first, vars)? {
            Some(Bson::Array(a)) => Ok(Some(a)),
            other => Err(Error::location(
                4544711,
                format!(
                    "$accumulator initArgs must evaluate to an array: {}",
                    other.as_ref().map(util::show).unwrap_or_default()
                ),
            )),
        }
    }

    /// [`Self::start`] with the `init` arguments evaluated already ([`Self::init_args`]).
    fn start_with(
        spec: &AccSpec,
        key: &Bson,
        init_args: Option<Vec<Bson>>,
        vars: &Variables,
    ) -> Result<AccState> {
        if let (AccOp::Multi(kind), Some(params)) = (spec.op, &spec.params) {
            return MultiState::start(kind, params, key, vars).map(AccState::Multi);
        }
        let Some(js) = &spec.js else {
            return Ok(AccState::new(spec.op));
        };
        let state = crate::script::call_function(&js.init, &init_args.unwrap_or_default())?;
        Ok(AccState::Js {
            spec: js.clone(),
            state,
            pending: Vec::new(),
            pending_bytes: 0,
        })
    }

    pub fn new(op: AccOp) -> AccState {
        match op {
            AccOp::Js => unreachable!("$accumulator states are made by AccState::start"),
            AccOp::Multi(_) => {
                unreachable!(
                    "the states of accumulators with parameters are made by AccState::start"
                )
            }
            AccOp::Sum | AccOp::Count => AccState::Sum(Summer::default()),
            AccOp::Avg => AccState::Avg(Summer::default()),
            AccOp::Min | AccOp::Max => AccState::MinMax(None),
            AccOp::First => AccState::First(None, false),
            AccOp::Last => AccState::Last(None),
            AccOp::Push => AccState::Push(Vec::new(), 0),
            AccOp::AddToSet => AccState::AddToSet(Vec::new(), HashMap::new(), 0),
            AccOp::MergeObjects => AccState::Merge(Document::new()),
            AccOp::StdDevPop | AccOp::StdDevSamp => AccState::StdDev(Vec::new()),
        }
    }

    /// Folds in one value; `coll` is the collation `$min`/`$max`/`$addToSet` compare
    /// strings under. Returns about how many bytes the state grew by (what it frees
    /// is not counted).
    pub fn add(&mut self, op: AccOp, v: Option<Bson>, coll: Option<&Collator>) -> Result<usize> {
        let grown = match self {
            AccState::Sum(s) | AccState::Avg(s) => {
                if let Some(v) = &v {
                    s.add(v);
                }
                0
            }
            AccState::MinMax(best) => match v {
                Some(v) if !matches!(v, Bson::Null | Bson::Undefined) => {
                    let replace = match best {
                        None => true,
                        Some(b) => {
                            let o = cmp_bson_with(&v, b, coll);
                            (op == AccOp::Min && o == Ordering::Less)
                                || (op == AccOp::Max && o == Ordering::Greater)
                        }
                    };
                    if replace {
                        replaced(best, Some(v))
                    } else {
                        0
                    }
                }
                _ => 0,
            },
            AccState::First(f, seen) => {
                if *seen {
                    0
                } else {
                    *seen = true;
                    replaced(f, v)
                }
            }
            AccState::Last(l) => replaced(l, v),
            AccState::Push(list, bytes) => match v {
                Some(v) => {
                    let grown = BSON_SLOT_BYTES + heap_len(&v);
                    *bytes += grown;
                    check_array_bytes("$push", *bytes)?;
                    list.push(v);
                    grown
                }
                None => 0,
            },
            AccState::AddToSet(list, seen, bytes) => match v {
                Some(v) => {
                    match seen.entry(group_key(&v, coll)) {
                        std::collections::hash_map::Entry::Occupied(_) => 0,
                        std::collections::hash_map::Entry::Vacant(entry) => {
                            // Sized only when kept: a repeated value costs its key alone.
                            let grown = BSON_SLOT_BYTES
                                + heap_len(&v)
                                + SET_ENTRY_BYTES
                                + entry.key().len();
                            *bytes += grown;
                            check_array_bytes("$addToSet", *bytes)?;
                            entry.insert(());
                            list.push(v);
                            grown
                        }
                    }
                }
                None => 0,
            },
            AccState::Merge(d) => match v {
                None | Some(Bson::Null) | Some(Bson::Undefined) => 0,
                Some(Bson::Document(x)) => {
                    let mut grown = 0;
                    for (k, val) in x {
                        let added = heap_len(&val);
                        grown += match d.insert(k.clone(), val) {
                            Some(old) => added.saturating_sub(heap_len(&old)),
                            None => added + FIELD_ENTRY_BYTES + k.len(),
                        };
                    }
                    grown
                }
                Some(other) => {
                    return Err(Error::location(
                        40400,
                        format!(
                            "$mergeObjects requires object inputs, but input {} is of type {}",
                            util::show(&other),
                            util::type_name(&other)
                        ),
                    ))
                }
            },
            AccState::StdDev(xs) => match &v {
                Some(v) if is_number(v) => {
                    xs.push(as_f64(v).unwrap());
                    std::mem::size_of::<f64>()
                }
                _ => 0,
            },
            AccState::Multi(m) => m.add(v, coll),
            AccState::Js {
                pending,
                pending_bytes,
                ..
            } => {
                let args = match v {
                    Some(Bson::Array(a)) => a,
                    other => {
                        return Err(Error::location(
                            4544712,
                            format!(
                                "$accumulator accumulateArgs must evaluate to an array: {}",
                                other.as_ref().map(util::show).unwrap_or_default()
                            ),
                        ))
                    }
                };
                *pending_bytes += bson_size(&args);
                pending.push(Bson::Array(args));
                if pending.len() >= JS_BATCH_CALLS || *pending_bytes >= JS_BATCH_BYTES {
                    self.fold_pending()?;
                }
                // The state's size is JavaScript's: not counted.
                0
            }
        };
        Ok(grown)
    }

    /// Runs the pending `accumulate` calls of an `$accumulator` state.
    fn fold_pending(&mut self) -> Result<()> {
        if let AccState::Js {
            spec,
            state,
            pending,
            pending_bytes,
        } = self
        {
            if !pending.is_empty() {
                let calls = std::mem::take(pending);
                *pending_bytes = 0;
                let current = std::mem::replace(state, Bson::Null);
                *state = crate::script::fold(&spec.accumulate, current, &calls)?;
            }
        }
        Ok(())
    }

    /// The group's value (an `$accumulator` runs its last calls and `finalize`).
    pub fn finish(mut self, op: AccOp) -> Result<Bson> {
        if let AccState::Js { .. } = self {
            self.fold_pending()?;
            let AccState::Js { spec, state, .. } = self else {
                unreachable!()
            };
            return match &spec.finalize {
                Some(f) => crate::script::call_function(f, &[state]),
                None => Ok(state),
            };
        }
        Ok(self.result(op))
    }

    pub fn result(self, op: AccOp) -> Bson {
        match self {
            AccState::Js { state, .. } => state,
            AccState::Multi(m) => m.result(),
            AccState::Sum(s) => s.result(),
            AccState::Avg(s) => s.average(),
            AccState::MinMax(b) => b.unwrap_or(Bson::Null),
            AccState::First(f, _) => f.unwrap_or(Bson::Null),
            AccState::Last(l) => l.unwrap_or(Bson::Null),
            AccState::Push(l, _) => Bson::Array(l),
            AccState::AddToSet(l, _, _) => Bson::Array(l),
            AccState::Merge(d) => Bson::Document(d),
            AccState::StdDev(xs) => crate::expr::arith_std_dev(&xs, op == AccOp::StdDevSamp),
        }
    }
}

/// A string key such that two values get the same key iff they are BSON-equal
/// (numbers by value across widths; documents field-order sensitive), strings being
/// equal under `coll` when there is a collation.
pub fn group_key(v: &Bson, coll: Option<&Collator>) -> String {
    let mut s = String::new();
    write_key(v, &mut s, coll);
    s
}

fn write_key(v: &Bson, out: &mut String, coll: Option<&Collator>) {
    use std::fmt::Write;
    match v {
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            if let Some(i) =
                crate::expr::num::as_exact_i64(v).filter(|_| !matches!(v, Bson::Decimal128(_)))
            {
                let _ = write!(out, "n{i};");
            } else {
                let f = as_f64(v).unwrap_or(f64::NAN);
                if f.is_nan() {
                    out.push_str("nNaN;");
                } else if f.fract() == 0.0 && f.abs() < 9.2e18 {
                    let _ = write!(out, "n{};", f as i64);
                } else if let Bson::Decimal128(d) = v {
                    // Exact decimals that are not doubles keep their text.
                    let _ = write!(out, "n{:e}|{};", f, d);
                } else {
                    let _ = write!(out, "n{f:e};");
                }
            }
        }
        Bson::String(s) | Bson::Symbol(s) => match coll {
            None => {
                let _ = write!(out, "s{}:{s};", s.len());
            }
            Some(c) => {
                // Strings equal under the collation share their comparison key.
                out.push('c');
                for b in c.sort_key(s) {
                    let _ = write!(out, "{b:02x}");
                }
                out.push(';');
            }
        },
        Bson::Document(d) => {
            out.push('{');
            for (k, x) in d {
                let _ = write!(out, "{}:{k}=", k.len());
                write_key(x, out, coll);
            }
            out.push('}');
        }
        Bson::Array(a) => {
            out.push('[');
            for x in a {
                write_key(x, out, coll);
            }
            out.push(']');
        }
        Bson::Null => out.push_str("z;"),
        Bson::Undefined => out.push_str("u;"),
        other => {
            let _ = write!(
                out,
                "t{}:{:?};",
                crate::compare::canonical_type(other),
                other
            );
        }
    }
}

/// Groups documents by `id` and folds the accumulators.
pub fn run_group(
    id: &Expr,
    accs: &[AccSpec],
    docs: Vec<Document>,
    vars: &Variables,
) -> Result<Vec<Document>> {
    let mut grouper = Grouper::new(id, accs, vars);
    for doc in &docs {
        grouper.add(doc)?;
    }
    grouper.finish()
}

/// A `$group` folding its input one document at a time, so that a pipeline whose
/// first blocking stage is a `$group` (every driver's `countDocuments`) holds the
/// groups, not the documents it read (as MongoDB's streaming `$group`).
///
/// What the groups take in memory is counted (an estimate: keys, the values the states keep,
/// [`GROUP_BYTES`] a group and its states). Past [`DEFAULT_MAX_GROUP_BYTES`] (or the run's
/// `max_group_bytes`), an operation that said `allowDiskUse: false` fails with mongod's
/// 292; otherwise [`Self::add_or_spill`] hands back, for each document of a group not
/// held yet, what that group needs of it (a spill record), for the engine to sort on
/// disk by group and fold with [`SpilledGroups`]: the groups held keep folding, the
/// others never enter memory. [`Self::add`] (the runs that cannot spill) holds them
/// all, as before.
pub struct Grouper<'a> {
    id: &'a Expr,
    accs: &'a [AccSpec],
    vars: &'a Variables,
    /// A group's key (`group_key`) → its place in `groups`.
    index: HashMap<String, usize>,
    /// The groups in the order their first documents came.
    groups: Vec<(Bson, Vec<AccState>)>,
    /// What the groups hold, about.
    bytes: usize,
    max_bytes: usize,
}

impl<'a> Grouper<'a> {
    pub fn new(id: &'a Expr, accs: &'a [AccSpec], vars: &'a Variables) -> Grouper<'a> {
        Grouper {
            id,
            accs,
            vars,
            index: HashMap::new(),
            groups: Vec::new(),
            bytes: 0,
            max_bytes: vars.max_group_bytes.unwrap_or(DEFAULT_MAX_GROUP_BYTES),
        }
    }

    /// Folds one document into its group.
    pub fn add(&mut self, doc: &Document) -> Result<()> {
        let spilled = self.fold(doc, false)?;
        debug_assert!(spilled.is_none(), "add never spills");
        Ok(())
    }

    /// Folds one document into its group when the group is held or memory is left
    /// for it; otherwise the document's spill record (see [`SpilledGroups`]).
    pub fn add_or_spill(&mut self, doc: &Document) -> Result<Option<Document>> {
        self.fold(doc, true)
    }

    fn fold(&mut self, doc: &Document, may_spill: bool) -> Result<Option<Document>> {
        let (vars, coll) = (self.vars, self.vars.collator.as_deref());
        let key = self.id.evaluate(doc, vars)?.unwrap_or(Bson::Null);
        let k = group_key(&key, coll);
        let gi = match self.index.get(&k) {
            Some(i) => *i,
            None if may_spill && !vars.forbid_disk_use && self.bytes >= self.max_bytes => {
                return spill_record(self.accs, k, key, doc, vars).map(Some);
            }
            None => {
                let states = self
                    .accs
                    .iter()
                    .map(|a| AccState::start(a, &key, doc, vars))
                    .collect::<Result<Vec<_>>>()?;
                self.bytes += GROUP_BYTES
                    + self.accs.len() * std::mem::size_of::<AccState>()
                    + k.len()
                    + heap_len(&key);
                self.groups.push((key, states));
                self.index.insert(k, self.groups.len() - 1);
                self.groups.len() - 1
            }
        };
        let states = &mut self.groups[gi].1;
        for (a, st) in self.accs.iter().zip(states.iter_mut()) {
            let v = a.arg.evaluate(doc, vars)?;
            self.bytes += st.add(a.op, v, coll)?;
        }
        if self.bytes > self.max_bytes && vars.forbid_disk_use {
            return Err(Error::new(
                QUERY_EXCEEDED_MEMORY_LIMIT_NO_DISK_USE_ALLOWED,
                "Exceeded memory limit for $group, but didn't allow external sort. Pass \
                 allowDiskUse:true to opt in.",
            ));
        }
        Ok(None)
    }

    /// The groups held, for [`SpilledGroups::next_held`] to give one at a time.
    pub fn into_held(self) -> HeldGroups {
        HeldGroups(self.groups.into_iter())
    }

    /// One document per group: `_id` and each accumulator's result.
    pub fn finish(self) -> Result<Vec<Document>> {
        let accs = self.accs;
        self.groups
            .into_iter()
            .map(|(key, states)| group_output(accs, key, states))
            .collect()
    }
}

/// The groups a [`Grouper`] held, in the order their first documents came.
pub struct HeldGroups(std::vec::IntoIter<(Bson, Vec<AccState>)>);

/// A group's output document: `_id` and each accumulator's result.
fn group_output(accs: &[AccSpec], key: Bson, states: Vec<AccState>) -> Result<Document> {
    let mut d = Document::new();
    d.insert("_id", key);
    for (a, st) in accs.iter().zip(states) {
        d.insert(a.name.clone(), st.finish(a.op)?);
    }
    Ok(d)
}

/// The field of a spill record that orders records by group ([`group_key`], compared
/// as a binary string: any order that puts a group's records together will do).
pub const SPILL_ORDER_FIELD: &str = "k";

/// What [`SpilledGroups`] needs of a document whose group memory had no room for: its
/// group's key string and `_id`, each accumulator's argument (in a one-element array,
/// an empty one when missing) and, for each `$accumulator`, what `init` would be
/// called with were it the group's first document (evaluated for every document: an
/// `initArgs` that fails on a later document of a group fails here, not in memory).
fn spill_record(
    accs: &[AccSpec],
    k: String,
    key: Bson,
    doc: &Document,
    vars: &Variables,
) -> Result<Document> {
    let mut args = Vec::with_capacity(accs.len());
    let mut inits = Vec::new();
    for a in accs {
        args.push(Bson::Array(
            a.arg.evaluate(doc, vars)?.into_iter().collect(),
        ));
        if let Some(init) = AccState::init_args(a, doc, vars)? {
            inits.push(Bson::Array(init));
        }
    }
    let mut record = bson::doc! {SPILL_ORDER_FIELD: k, "id": key, "a": args};
    if !inits.is_empty() {
        record.insert("i", inits);
    }
    Ok(record)
}

/// The groups a [`Grouper`] spilled, folded from their records in group order: each
/// group's records are consecutive and, the sort being stable, in the order their
/// documents came, so `$first`, `$last` and `$push` see what they would have in memory.
pub struct SpilledGroups {
    accs: Vec<AccSpec>,
    vars: Variables,
    /// The group being folded: its key string, `_id` and states.
    current: Option<(String, Bson, Vec<AccState>)>,
}

impl SpilledGroups {
    pub fn new(accs: Vec<AccSpec>, vars: Variables) -> SpilledGroups {
        SpilledGroups {
            accs,
            vars,
            current: None,
        }
    }

    /// Folds the next record (in [`SPILL_ORDER_FIELD`] order); the group before it
    /// when this record starts another.
    pub fn push(&mut self, record: Document) -> Result<Option<Document>> {
        let malformed = || Error::internal("a $group's spilled record is malformed");
        let k = record.get_str(SPILL_ORDER_FIELD).map_err(|_| malformed())?;
        let mut done = None;
        if self.current.as_ref().is_some_and(|(ck, _, _)| ck != k) {
            done = self.finish()?;
        }
        let args = record.get_array("a").map_err(|_| malformed())?;
        if args.len() != self.accs.len() {
            return Err(malformed());
        }
        let coll = self.vars.collator.clone();
        if self.current.is_none() {
            let key = record.get("id").cloned().unwrap_or(Bson::Null);
            let mut inits = record.get_array("i").map(|a| a.iter()).ok();
            let mut states = Vec::with_capacity(self.accs.len());
            for a in &self.accs {
                let init = match a.js {
                    None => None,
                    Some(_) => match inits.as_mut().and_then(Iterator::next) {
                        Some(Bson::Array(init)) => Some(init.clone()),
                        _ => return Err(malformed()),
                    },
                };
                states.push(AccState::start_with(a, &key, init, &self.vars)?);
            }
            self.current = Some((k.to_string(), key, states));
        }
        let (_, _, states) = self.current.as_mut().expect("a group being folded");
        for ((a, st), arg) in self.accs.iter().zip(states.iter_mut()).zip(args) {
            let v = match arg {
                Bson::Array(v) => v.first().cloned(),
                _ => return Err(malformed()),
            };
            st.add(a.op, v, coll.as_deref())?;
        }
        Ok(done)
    }

    /// The next of the groups the [`Grouper`] held, as its output document (None: all
    /// given); each is finished as it is asked for.
    pub fn next_held(&self, held: &mut HeldGroups) -> Result<Option<Document>> {
        held.0
            .next()
            .map(|(key, states)| group_output(&self.accs, key, states))
            .transpose()
    }

    /// The group being folded, when there is one (after the last record).
    pub fn finish(&mut self) -> Result<Option<Document>> {
        match self.current.take() {
            Some((_, key, states)) => group_output(&self.accs, key, states).map(Some),
            None => Ok(None),
        }
    }
}

/// The encoded size of an argument list (for batching).
fn bson_size(args: &[Bson]) -> usize {
    args.iter()
        .map(|a| match a {
            Bson::Document(d) => bson::to_vec(d).map(|b| b.len()).unwrap_or(16),
            Bson::String(s) => s.len() + 8,
            Bson::Array(x) => bson_size(x) + 8,
            _ => 16,
        })
        .sum()
}
