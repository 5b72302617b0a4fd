//! `/metrics`: the server's figures as Prometheus/OpenMetrics series, rendered with the
//! `prometheus-client` crate from what serverStatus reports (one source of truth), plus
//! one set of series per tailable cursor and change stream: what each consumer has
//! read and how long it has been since it last asked, the question of seeds 000-004.
//!
//! A fresh registry per scrape: every value is read at that moment, so nothing here
//! runs on the MongoDB protocol's path.

use crate::state::ServerState;
use bson::Document;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

type Labels = Vec<(&'static str, String)>;

/// Cursors listed one by one at most (a server with more lists the most recently
/// used): the label sets of a scrape stay bounded.
const MAX_CURSOR_SERIES: usize = 1000;

pub fn render(state: &ServerState) -> String {
    let mut r = Registry::with_prefix("tailstream");
    let status = crate::commands::server_status(state);
    process(&mut r, state, &status);
    operations(&mut r, &status);
    r.register(
        "operation_latency_seconds",
        "Command latency by mongod's opLatencies class",
        ClassHistograms(state.metrics.latency_histograms()),
    );
    durability(&mut r, state);
    oplog(&mut r, state);
    cursors(&mut r, state);
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &r);
    out
}

/// The latency histograms of the command classes, one labelled series each (read at
/// the scrape: the buckets are plain atomic counters on the command path).
#[derive(Debug)]
struct ClassHistograms(Vec<crate::metrics::LatencyHistogram>);

impl prometheus_client::encoding::EncodeMetric for ClassHistograms {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        for h in &self.0 {
            let labels = [("class", h.class)];
            encoder
                .encode_family(&labels)?
                .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                    h.sum_micros as f64 / 1e6,
                    h.count,
                    &h.buckets,
                    None,
                )?;
        }
        Ok(())
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Histogram
    }
}

fn counter(r: &mut Registry, name: &str, help: &str, value: u64) {
    let c: Counter = Counter::default();
    c.inc_by(value);
    r.register(name, help, c);
}

fn gauge(r: &mut Registry, name: &str, help: &str, value: i64) {
    let g: Gauge = Gauge::default();
    g.set(value);
    r.register(name, help, g);
}

fn gauge_f64(r: &mut Registry, name: &str, help: &str, value: f64) {
    let g: Gauge<f64, AtomicU64> = Gauge::default();
    g.set(value);
    r.register(name, help, g);
}

fn counter_family(r: &mut Registry, name: &str, help: &str, values: Vec<(Labels, u64)>) {
    let family = Family::<Labels, Counter>::default();
    for (labels, v) in values {
        family.get_or_create(&labels).inc_by(v);
    }
    r.register(name, help, family);
}

/// A serverStatus figure as an unsigned count (absent or negative: 0).
fn count(doc: &Document, path: &[&str]) -> u64 {
    let mut d = doc;
    for key in &path[..path.len() - 1] {
        match d.get_document(key) {
            Ok(next) => d = next,
            Err(_) => return 0,
        }
    }
    let last = path[path.len() - 1];
    let v = match d.get(last) {
        Some(bson::Bson::Int32(n)) => i64::from(*n),
        Some(bson::Bson::Int64(n)) => *n,
        Some(bson::Bson::Double(f)) => *f as i64,
        _ => 0,
    };
    u64::try_from(v).unwrap_or(0)
}

fn process(r: &mut Registry, state: &ServerState, status: &Document) {
    gauge(r, "up", "1 while the server answers", 1);
    gauge_f64(
        r,
        "uptime_seconds",
        "Seconds since the server started",
        state.started.elapsed().as_secs_f64(),
    );
    gauge(
        r,
        "connections",
        "Client connections open now",
        count(status, &["connections", "current"]) as i64,
    );
    counter(
        r,
        "connections_created",
        "Client connections accepted since the start",
        count(status, &["connections", "totalCreated"]),
    );
    counter_family(
        r,
        "network_bytes",
        "Bytes of MongoDB protocol messages read and written",
        vec![
            (
                vec![("direction", "in".into())],
                count(status, &["network", "bytesIn"]),
            ),
            (
                vec![("direction", "out".into())],
                count(status, &["network", "bytesOut"]),
            ),
        ],
    );
    counter(
        r,
        "network_requests",
        "MongoDB protocol messages read",
        count(status, &["network", "numRequests"]),
    );
    gauge(
        r,
        "resident_memory_megabytes",
        "Resident memory of the process",
        count(status, &["mem", "resident"]) as i64,
    );
}

fn operations(r: &mut Registry, status: &Document) {
    const TYPES: [&str; 6] = ["insert", "query", "update", "delete", "getmore", "command"];
    counter_family(
        r,
        "operations",
        "Operations by mongod's opcounters type",
        TYPES
            .iter()
            .map(|t| {
                (
                    vec![("type", t.to_string())],
                    count(status, &["opcounters", t]),
                )
            })
            .collect(),
    );
    const CLASSES: [&str; 4] = ["reads", "writes", "commands", "transactions"];
    counter_family(
        r,
        "operation_latency_microseconds",
        "Time spent in commands, by mongod's opLatencies class",
        CLASSES
            .iter()
            .map(|c| {
                (
                    vec![("class", c.to_string())],
                    count(status, &["opLatencies", c, "latency"]),
                )
            })
            .collect(),
    );
    counter_family(
        r,
        "operation_latency_operations",
        "Commands timed in operation_latency_microseconds",
        CLASSES
            .iter()
            .map(|c| {
                (
                    vec![("class", c.to_string())],
                    count(status, &["opLatencies", c, "ops"]),
                )
            })
            .collect(),
    );
    counter(
        r,
        "command_errors",
        "Commands answered with an error (mongod's asserts.user)",
        count(status, &["asserts", "user"]),
    );
}

fn durability(r: &mut Registry, state: &ServerState) {
    let d = &state.engine.durability;
    let (syncs, sync_micros, sync_max, _) = d.syncs.snapshot();
    let (waits, wait_micros, _, _) = d.commit_waits.snapshot();
    counter(
        r,
        "fsyncs",
        "Group-commit fsyncs of the write-ahead log",
        syncs,
    );
    gauge_f64(
        r,
        "fsync_seconds_sum",
        "Time spent in those fsyncs",
        sync_micros as f64 / 1e6,
    );
    gauge_f64(
        r,
        "fsync_max_seconds",
        "The longest fsync",
        sync_max as f64 / 1e6,
    );
    counter(r, "commits", "Commits since the start", d.last_committed());
    gauge_f64(
        r,
        "commit_to_durable_seconds_sum",
        "Time from each commit to the end of the fsync that covered it, summed",
        wait_micros as f64 / 1e6,
    );
    counter(
        r,
        "commit_to_durable",
        "Commits timed in commit_to_durable_seconds_sum",
        waits,
    );
}

fn oplog(r: &mut Registry, state: &ServerState) {
    let (_, newest) = state.engine.oplog_window();
    let oldest = state.engine.oplog_first_time();
    gauge(
        r,
        "oplog_newest_seconds",
        "Seconds since the epoch of the newest oplog entry",
        i64::from(newest.seconds()),
    );
    gauge(
        r,
        "oplog_window_seconds",
        "Seconds between the oldest and the newest oplog entry",
        if oldest.seconds() == 0 {
            0
        } else {
            i64::from(newest.seconds().saturating_sub(oldest.seconds()))
        },
    );
}

fn cursors(r: &mut Registry, state: &ServerState) {
    let mut all = state.engine.cursors.stats();
    gauge(
        r,
        "cursors_open",
        "Open cursors",
        state.engine.cursors.len() as i64,
    );
    all.retain(|c| c.tailable || c.change_stream);
    all.sort_by_key(|c| c.idle_for);
    all.truncate(MAX_CURSOR_SERIES);
    let labels = |c: &tailstream_engine::read::cursor::CursorStats| -> Labels {
        let kind = if c.change_stream {
            "change_stream"
        } else {
            "tailable"
        };
        vec![
            ("cursor_id", c.id.to_string()),
            ("ns", c.ns.clone()),
            ("kind", kind.to_string()),
        ]
    };
    let docs = Family::<Labels, Counter>::default();
    let bytes = Family::<Labels, Counter>::default();
    let idle = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    let lag = Family::<Labels, Gauge>::default();
    let lag_entries = Family::<Labels, Gauge>::default();
    let oplog_entries = Family::<Labels, Counter>::default();
    let oplog_bytes = Family::<Labels, Counter>::default();
    let durable = state.engine.durability.durable_ts();
    for c in &all {
        let l = labels(c);
        if let Some(behind) = c.lag_seconds(durable) {
            lag.get_or_create(&l).set(behind);
        }
        if let Some(n) = c.lag_entries(&state.engine, super::MAX_LAG_ENTRIES) {
            lag_entries
                .get_or_create(&l)
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        docs.get_or_create(&l).inc_by(c.returned.docs);
        bytes.get_or_create(&l).inc_by(c.returned.bytes);
        idle.get_or_create(&l).set(c.idle_for.as_secs_f64());
        if c.change_stream {
            oplog_entries.get_or_create(&l).inc_by(c.oplog_read.0);
            oplog_bytes.get_or_create(&l).inc_by(c.oplog_read.1);
        }
    }
    r.register(
        "cursor_returned_documents",
        "Documents (events) a tailable cursor or change stream returned",
        docs,
    );
    r.register(
        "cursor_returned_bytes",
        "Bytes of the documents (events) it returned",
        bytes,
    );
    r.register(
        "cursor_lag_entries",
        "A change stream's oplog entries not read yet (its collection's, for a collection's stream), counted up to 100,000",
        lag_entries,
    );
    r.register(
        "cursor_oplog_read_entries",
        "Oplog entries a change stream read (its own namespaces' only, where it watches some)",
        oplog_entries,
    );
    r.register(
        "cursor_oplog_read_bytes",
        "Bytes of the oplog entries a change stream read",
        oplog_bytes,
    );
    r.register(
        "cursor_idle_seconds",
        "Seconds since its last getMore began or ended",
        idle,
    );
    r.register(
        "cursor_lag_seconds",
        "A change stream's distance behind the newest durable oplog entry, in seconds (0: caught up)",
        lag,
    );
    gauge(
        r,
        "cursors_listed",
        "Tailable cursors and change streams listed above (at most 1,000)",
        all.len() as i64,
    );
}
