//! The handshake: `hello`/`isMaster` presents this server as the primary of a
//! single-member replica set, so drivers enable sessions, retryable writes and
//! change streams. Also `buildInfo` and `connectionStatus`.

use super::Conn;
use crate::state::ServerState;
use bson::{doc, Bson, Document};
use std::sync::Arc;
use std::time::Duration;
use tailstream_engine::query::error::Result;

/// MongoDB 7.0's wire version.
pub const MAX_WIRE_VERSION: i32 = 21;
pub const VERSION: &str = "7.0.0";
/// The election id a single primary that never changed term reports.
const ELECTION_ID: [u8; 12] = [0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1];
/// Longest an awaitable hello waits (drivers ask for their heartbeat interval, 10 s).
const MAX_AWAIT: Duration = Duration::from_secs(10);

pub async fn hello(
    state: &Arc<ServerState>,
    conn: &mut Conn,
    name: &str,
    cmd: &Document,
) -> Result<Document> {
    // Awaitable hello (streaming SDAM): nothing about the topology ever changes here,
    // so wait the full time the driver allows, then answer.
    if let (Some(Bson::Document(tv)), Some(wait)) =
        (cmd.get("topologyVersion"), cmd.get("maxAwaitTimeMS"))
    {
        let same = tv.get_object_id("processId").ok() == Some(state.process_id);
        let ms = tailstream_engine::find::as_i64(wait).unwrap_or(0).max(0) as u64;
        if same && ms > 0 {
            let limit = Duration::from_millis(ms).min(MAX_AWAIT);
            // A member of a set answers as soon as its role or term changes.
            let counter = tv.get("counter").and_then(tailstream_engine::find::as_i64);
            let wait = async {
                let waited = match counter {
                    Some(c) => crate::replset::wait_for_change(state, c, limit).await,
                    None => None,
                };
                if waited.is_none() {
                    tokio::time::sleep(limit).await;
                }
            };
            // The wait ends with its operation, as an awaiting getMore's: a client that
            // closes meanwhile (every MongoClient.close()) ends its connection now, not
            // when this wait's reply fails to go out.
            match super::OPERATION.try_with(Arc::clone) {
                Ok(op) => tokio::select! {
                    _ = wait => {}
                    e = state.current_ops.interrupted(&op) => return Err(e),
                },
                Err(_) => wait.await,
            }
        }
    }
    let me = state.config.advertised_host();
    let ts = state.engine.cluster_time();
    let now = bson::DateTime::now();
    let mut d = Document::new();
    if cmd.get_bool("helloOk").unwrap_or(false) {
        d.insert("helloOk", true);
    }
    d.insert(
        "topologyVersion",
        doc! {"processId": state.process_id, "counter": 0i64},
    );
    d.insert("hosts", vec![Bson::String(me.clone())]);
    d.insert("setName", state.config.repl_set.clone());
    d.insert("setVersion", 1);
    if name == "hello" {
        d.insert("isWritablePrimary", true);
    } else {
        d.insert("ismaster", true);
    }
    d.insert("secondary", false);
    d.insert("primary", me.clone());
    d.insert("me", me);
    d.insert("electionId", bson::oid::ObjectId::from_bytes(ELECTION_ID));
    d.insert(
        "lastWrite",
        doc! {
            "opTime": {"ts": ts, "t": 1i64},
            "lastWriteDate": now,
            "majorityOpTime": {"ts": ts, "t": 1i64},
            "majorityWriteDate": now,
        },
    );
    d.insert(
        "maxBsonObjectSize",
        tailstream_engine::MAX_DOCUMENT_SIZE as i32,
    );
    d.insert(
        "maxMessageSizeBytes",
        tailstream_wire::MAX_MESSAGE_SIZE as i32,
    );
    d.insert(
        "maxWriteBatchSize",
        tailstream_engine::MAX_WRITE_BATCH as i32,
    );
    d.insert("localTime", now);
    d.insert("logicalSessionTimeoutMinutes", 30);
    // As mongod (`appendNumber`): a 32-bit int while it fits.
    d.insert(
        "connectionId",
        tailstream_engine::ddl::stored_number(conn.id),
    );
    d.insert("minWireVersion", 0);
    d.insert("maxWireVersion", MAX_WIRE_VERSION);
    d.insert("readOnly", false);
    if let Some(Bson::Array(requested)) = cmd.get("compression") {
        let offered: Vec<Bson> = requested
            .iter()
            .filter(|c| matches!(c.as_str(), Some("snappy") | Some("zlib") | Some("zstd")))
            .cloned()
            .collect();
        if !offered.is_empty() {
            d.insert("compression", offered);
        }
    }
    crate::replset::hello_fields(state, name, &mut d);
    crate::auth::hello_fields(state, conn, cmd, &mut d).await?;
    Ok(d)
}

pub fn build_info() -> Document {
    doc! {
        "version": VERSION,
        "gitVersion": "tailstream",
        "versionArray": [7, 0, 0, 0],
        "modules": [],
        "allocator": "system",
        "javascriptEngine": "none",
        "sysInfo": "deprecated",
        "bits": 64,
        "debug": false,
        "maxBsonObjectSize": tailstream_engine::MAX_DOCUMENT_SIZE as i32,
        "storageEngines": ["rocksdb"],
        "openssl": {"running": "disabled", "compiled": "disabled"},
        "buildEnvironment": {"target_os": std::env::consts::OS, "target_arch": std::env::consts::ARCH},
        "tailstreamVersion": env!("CARGO_PKG_VERSION"),
    }
}
