//! The live status page (`/`) and what it reads (`/status.json`): the server, its
//! oplog window, and every change stream and tailable cursor with what it has read and
//! how far behind the oplog's head it is. The page (`status.html`, no outside assets:
//! the listener may serve a machine without internet) fetches the JSON every second and
//! derives rates and the small plots from successive samples in the browser, so the
//! server keeps no history for it.

use crate::state::ServerState;
use bson::{doc, Bson};
use std::sync::atomic::Ordering;
use tailstream_engine::core::time::ClusterTime;

/// The page itself, served as is.
pub const PAGE: &str = include_str!("status.html");

/// Cursors listed at most (the most recently used first).
const MAX_CURSORS: usize = 500;

pub fn json(state: &ServerState) -> String {
    let engine = &state.engine;
    let (_, newest) = engine.oplog_window();
    let oldest = engine.oplog_first_time();
    let durable = engine.durability.durable_ts();
    let o = &state.opcounters;
    let mut cursors = engine.cursors.stats();
    cursors.retain(|c| c.tailable || c.change_stream);
    cursors.sort_by_key(|c| c.idle_for);
    cursors.truncate(MAX_CURSORS);
    let listed: Vec<Bson> = cursors
        .iter()
        .map(|c| {
            let lag = c.lag_seconds(durable);
            let lag_entries = c.lag_entries(engine, super::MAX_LAG_ENTRIES);
            Bson::Document(doc! {
                // As text: a cursor id is 64 bits, past a JavaScript number's 53.
                "id": c.id.to_string(),
                "ns": c.ns.clone(),
                "kind": if c.change_stream { "change stream" } else { "tailable cursor" },
                "docs": i64::try_from(c.returned.docs).unwrap_or(i64::MAX),
                "bytes": i64::try_from(c.returned.bytes).unwrap_or(i64::MAX),
                "batches": i64::try_from(c.returned.batches).unwrap_or(i64::MAX),
                "idleSeconds": c.idle_for.as_secs_f64(),
                "waiting": c.waiting,
                "lagSeconds": lag.map_or(Bson::Null, Bson::Int64),
                "lagEntries": lag_entries.map_or(Bson::Null, |n| Bson::Int64(i64::try_from(n).unwrap_or(i64::MAX))),
                "lagEntriesCapped": lag_entries == Some(super::MAX_LAG_ENTRIES),
                "atTail": c.at_tail,
                "oplogEntriesRead": i64::try_from(c.oplog_read.0).unwrap_or(i64::MAX),
                "oplogBytesRead": i64::try_from(c.oplog_read.1).unwrap_or(i64::MAX),
                "client": c.origin.as_ref().map_or(Bson::Null, |o| {
                    Bson::String(o.app_name.clone().unwrap_or_else(|| o.client.clone()))
                }),
                "filter": c.origin.as_ref().map_or(Bson::Null, |o| Bson::String(filter_text(&o.command))),
            })
        })
        .collect();
    let status = doc! {
        "host": state.config.advertised_host(),
        "version": crate::commands::SERVER_VERSION,
        "uptimeSeconds": state.started.elapsed().as_secs_f64(),
        "connections": state.current_connections.load(Ordering::Relaxed),
        "writes": (o.insert.load(Ordering::Relaxed) + o.update.load(Ordering::Relaxed)
            + o.delete.load(Ordering::Relaxed)) as i64,
        "oplog": {
            "oldestSeconds": i64::from(oldest.seconds()),
            "newestSeconds": i64::from(newest.seconds()),
            "windowSeconds": if oldest == ClusterTime::ZERO {
                0
            } else {
                i64::from(newest.seconds().saturating_sub(oldest.seconds()))
            },
        },
        "cursors": listed,
    };
    Bson::Document(status).into_relaxed_extjson().to_string()
}

/// The filter column's text at most (the page shows the whole on hover, up to this).
const MAX_FILTER_CHARS: usize = 300;

/// What a consumer reads, as the page shows it: a find's filter, an aggregate's
/// pipeline (a change stream's options and stages), as relaxed extended JSON.
fn filter_text(command: &bson::Document) -> String {
    let shown = match (command.get("filter"), command.get("pipeline")) {
        (Some(f), _) => f.clone(),
        (None, Some(p)) => p.clone(),
        (None, None) => Bson::Document(bson::Document::new()),
    };
    let text = shown.into_relaxed_extjson().to_string();
    match text.char_indices().nth(MAX_FILTER_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_filter_column_shows_a_find_filter_or_a_pipeline_and_is_bounded() {
        use bson::doc;
        assert_eq!(
            super::filter_text(&doc! {"find": "c", "filter": {"a": 1}}),
            r#"{"a":1}"#
        );
        assert_eq!(
            super::filter_text(&doc! {"aggregate": "c", "pipeline": [{"$changeStream": {}}]}),
            r#"[{"$changeStream":{}}]"#
        );
        let long = super::filter_text(&doc! {"filter": {"s": "é".repeat(1000)}});
        assert_eq!(long.chars().count(), super::MAX_FILTER_CHARS + 1);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn the_page_reads_the_json_it_is_served_with() {
        assert!(super::PAGE.contains("fetch(\"/status.json\""));
        assert!(
            !super::PAGE.contains("http://") && !super::PAGE.contains("https://"),
            "no outside assets"
        );
    }
}
