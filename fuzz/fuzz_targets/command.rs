//! Command bodies through the server's dispatch: the gates, each command's handler, the
//! engine and RocksDB on a directory of its own, as a client's commands go (the wire
//! decoder aside: `wire_decode` covers it). An input is up to `MAX_COMMANDS` BSON
//! documents one after another, run in order on one connection against database
//! `fuzz`, which is dropped before each input. Any command may be refused; none may
//! panic or hang, and every refusal is mongod's error shape (`ok: 0`, `errmsg`, a
//! `code` and its `codeName`).
//!
//! Only the commands of `COMMANDS` run: the others would stop the process
//! (`shutdown`), stall it (`fsync` with a lock, `sleep`, fail points) or change what
//! every later input meets (parameters, users, the replica set). A `getMore` is sent
//! to the newest cursor an earlier command of the input opened, so that cursors are
//! read; it waits at most `MAX_AWAIT_MS`, and every other command's `maxTimeMS` is at
//! most `MAX_TIME_MS` (a script that loops forever stops there, as on mongod).
#![no_main]

use bson::{Bson, Document};
use libfuzzer_sys::fuzz_target;
use std::sync::{Mutex, OnceLock};
use tailstream_server::embedded::Embedded;

const DB: &str = "fuzz";
const MAX_COMMANDS: usize = 8;
const MAX_TIME_MS: i64 = 2_000;
const MAX_AWAIT_MS: i64 = 5;
const COMMANDS: &[&str] = &[
    "insert",
    "find",
    "update",
    "delete",
    "findAndModify",
    "aggregate",
    "count",
    "distinct",
    "createIndexes",
    "dropIndexes",
    "listIndexes",
    "create",
    "collMod",
    "drop",
    "listCollections",
    "validate",
    "explain",
    "getMore",
    "killCursors",
    "mapReduce",
    "dbStats",
    "collStats",
];

struct Server {
    runtime: tokio::runtime::Runtime,
    embedded: Embedded,
}

fn server() -> &'static Mutex<Server> {
    static SERVER: OnceLock<Mutex<Server>> = OnceLock::new();
    SERVER.get_or_init(|| {
        // tmpfs where there is one: the commit's fsyncs cost nothing there.
        let base = std::path::Path::new("/dev/shm");
        let base = if base.is_dir() { base.to_path_buf() } else { std::env::temp_dir() };
        let dir = base.join(format!("tailstream-fuzz-command-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the store's directory");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let embedded = Embedded::open(&dir, &["--quiet", "--oplogSize", "64"]).expect("the embedded server");
        Mutex::new(Server { runtime, embedded })
    })
}

/// The input's BSON documents, in order, up to the first that is not one.
fn commands(mut data: &[u8]) -> Vec<Document> {
    let mut out = Vec::new();
    while out.len() < MAX_COMMANDS && data.len() >= 5 {
        let len = i32::from_le_bytes([data[0], data[1], data[2], data[3]]);
        let Ok(len) = usize::try_from(len) else { break };
        if len < 5 || len > data.len() {
            break;
        }
        let Ok(doc) = Document::from_reader(&data[..len]) else {
            break;
        };
        out.push(doc);
        data = &data[len..];
    }
    out
}

/// The command as the target sends it, or None when its name is not one it sends.
fn prepare(mut cmd: Document, cursor: Option<i64>) -> Option<Document> {
    let name = cmd.keys().next()?.clone();
    if !COMMANDS.contains(&name.as_str()) {
        return None;
    }
    cmd.insert("$db", DB);
    if name == "getMore" {
        cmd.insert("getMore", cursor?);
        let wait = match cmd.get("maxTimeMS") {
            Some(Bson::Int32(n)) => (*n as i64).clamp(0, MAX_AWAIT_MS),
            Some(Bson::Int64(n)) => (*n).clamp(0, MAX_AWAIT_MS),
            _ => MAX_AWAIT_MS,
        };
        cmd.insert("maxTimeMS", wait);
    } else {
        let limit = match cmd.get("maxTimeMS") {
            Some(Bson::Int32(n)) if (1..=MAX_TIME_MS).contains(&(*n as i64)) => *n as i64,
            Some(Bson::Int64(n)) if (1..=MAX_TIME_MS).contains(n) => *n,
            _ => MAX_TIME_MS,
        };
        cmd.insert("maxTimeMS", limit);
    }
    Some(cmd)
}

/// mongod's reply shape: `ok`, and with `ok: 0` the error's message, code and name.
fn check_reply(cmd: &Document, reply: &Document) {
    let ok = match reply.get("ok") {
        Some(Bson::Double(f)) => *f,
        Some(Bson::Int32(n)) => *n as f64,
        other => panic!("reply without a numeric ok ({other:?}) to {cmd}: {reply}"),
    };
    if ok == 0.0 {
        assert!(
            matches!(reply.get("errmsg"), Some(Bson::String(_))),
            "error without errmsg to {cmd}: {reply}"
        );
        assert!(
            matches!(reply.get("code"), Some(Bson::Int32(_))),
            "error without a code to {cmd}: {reply}"
        );
        assert!(
            matches!(reply.get("codeName"), Some(Bson::String(s)) if !s.is_empty()),
            "error without a codeName to {cmd}: {reply}"
        );
    } else {
        assert_eq!(ok, 1.0, "ok neither 0 nor 1 to {cmd}: {reply}");
    }
}

/// The id of the cursor the reply opened, if it left one open.
fn open_cursor(reply: &Document) -> Option<i64> {
    match reply.get_document("cursor").ok()?.get("id") {
        Some(Bson::Int64(id)) if *id != 0 => Some(*id),
        _ => None,
    }
}

fuzz_target!(|data: &[u8]| {
    let cmds = commands(data);
    if cmds.is_empty() {
        return;
    }
    let mut server = server().lock().unwrap_or_else(|e| e.into_inner());
    let Server { runtime, embedded } = &mut *server;
    runtime.block_on(async {
        let reply = embedded
            .run(bson::doc! {"dropDatabase": 1, "$db": DB})
            .await;
        check_reply(&bson::doc! {"dropDatabase": 1}, &reply);
        let mut cursor = None;
        for cmd in cmds {
            let Some(cmd) = prepare(cmd, cursor) else {
                continue;
            };
            let reply = embedded.run(cmd.clone()).await;
            check_reply(&cmd, &reply);
            if let Some(id) = open_cursor(&reply) {
                cursor = Some(id);
            }
        }
    });
});
