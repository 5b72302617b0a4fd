//! Reads of `<db>.system.buckets.<name>`: a time-series collection's measurements as
//! mongod's bucket documents (`catalog::buckets`), for find, count and dbHash.

use crate::catalog::buckets::{base_namespace, make_buckets, Spec, MAX_BUCKETED_BYTES};
use crate::catalog::namespace::Namespace;
use crate::read::find::FindRequest;
use crate::Engine;
use bson::Document;
use std::collections::VecDeque;
use std::ops::ControlFlow;
use tailstream_query::error::{codes, Error, Result};
use tailstream_query::matcher::Matcher;
use tailstream_query::sort::SortSpec;

impl Engine {
    /// The time-series collection whose buckets `ns` names, and its bucketing.
    pub fn buckets_target(&self, ns: &Namespace) -> Option<(Namespace, Spec)> {
        let base = base_namespace(ns)?;
        let meta = self.collection(&base)?;
        let spec = Spec::from_options(meta.timeseries()?);
        Some((base, spec))
    }

    /// The buckets of the time-series collection `ns` names (`system.buckets.<name>`),
    /// in `_id` order; None when `ns` is no time-series collection's buckets.
    pub fn bucket_documents(&self, ns: &Namespace) -> Result<Option<Vec<Document>>> {
        let Some(base) = base_namespace(ns) else {
            return Ok(None);
        };
        let Some(meta) = self.collection(&base) else {
            return Ok(None);
        };
        let Some(options) = meta.timeseries() else {
            return Ok(None);
        };
        let spec = Spec::from_options(options);
        let mut measurements = Vec::new();
        let mut bytes = 0usize;
        self.for_each_batch(&base, FindRequest::default(), None, |docs| {
            for d in docs {
                bytes += bson::to_vec(&d).map(|b| b.len()).unwrap_or(0);
                if bytes > MAX_BUCKETED_BYTES {
                    return Err(Error::new(
                        codes::EXCEEDED_MEMORY_LIMIT,
                        format!(
                            "{} holds more than {MAX_BUCKETED_BYTES} bytes of measurements: too many to present as buckets",
                            base.full()
                        ),
                    ));
                }
                measurements.push(d);
            }
            Ok(ControlFlow::Continue(()))
        })?;
        make_buckets(&spec, measurements).map(Some)
    }
}

/// The buckets a find's filter and sort select.
pub(crate) fn select(
    buckets: Vec<Document>,
    matcher: &Matcher,
    sort: Option<&SortSpec>,
) -> VecDeque<Document> {
    let mut out: Vec<Document> = buckets.into_iter().filter(|b| matcher.matches(b)).collect();
    if let Some(s) = sort.filter(|s| !s.fields.iter().any(|(f, _)| f == "$natural")) {
        out.sort_by(|a, b| s.compare(a, b));
    }
    out.into()
}
