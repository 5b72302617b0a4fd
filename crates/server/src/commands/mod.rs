//! Commands. A command is a BSON document whose first field names it. `registry` has
//! one spec per command (its handler and everything checked before it runs);
//! `gates::run` takes a command from its document to its reply through a chain of
//! small gates that read its spec; each family of commands lives in its own file
//! (admin, ddl, handshake, read, write) and turns the document into an engine call
//! and the engine's answer into mongod's reply shape.

mod admin;
mod apply_ops;
pub(crate) mod args;
mod ddl;
pub(crate) mod gates;
mod handshake;
mod maintenance;
mod map_reduce;
mod parallel_stream;
mod read;
pub(crate) mod registry;
pub(crate) mod retryable;
mod stages;
pub(crate) mod testing;
pub(crate) mod write;

pub use admin::{hostname, server_status};
pub use args::*;
pub use handshake::VERSION as SERVER_VERSION;
pub use testing::FailPoints;

use crate::state::ServerState;
use bson::{doc, Bson, Document, RawDocumentBuf};
use std::sync::Arc;
use tailstream_engine::query::error::{code_name, codes, Error, Result};
use tailstream_engine::query::script::Operation;
use tailstream_engine::Engine;
use tailstream_wire::OpQuery;

/// Per-connection state a command may read or change.
pub struct Conn {
    pub id: i64,
    /// The client's address as mongod shows it (`127.0.0.1:51234`; for a Unix-socket
    /// client `anonymous unix socket:27017`).
    pub peer: String,
    /// This connection in the server's registry: the command running now (for
    /// `currentOp`, `killOp`, and the connection task to kill when the client goes away).
    pub info: Arc<crate::current_op::ConnInfo>,
    /// What the connection has proven about itself (see `auth`).
    pub auth: crate::auth::Session,
}

impl Conn {
    /// A new connection from `peer`, given the next id and registered for `currentOp`
    /// (the caller ends it with `current_ops.disconnect`).
    pub fn register(state: &crate::state::ServerState, peer: String) -> Conn {
        let id = state.new_connection_id();
        let info = state.current_ops.connect(id, peer.clone());
        Conn {
            id,
            peer,
            info,
            auth: Default::default(),
        }
    }
}

/// What a command's handler is given (see `registry::Handler`).
pub struct Call<'a> {
    pub state: &'a Arc<ServerState>,
    pub conn: &'a mut Conn,
    pub spec: &'static registry::Spec,
    /// The name it was run as: its name or an alias.
    pub name: &'a str,
    pub db: &'a str,
    pub cmd: &'a Document,
    /// An insert's documents when they came as a raw document sequence.
    pub payload: Option<Vec<RawDocumentBuf>>,
}

tokio::task_local! {
    /// The operation of the command this task is running: [`blocking`] makes it the
    /// current operation of the pool thread (scripts obey its deadline and kill).
    pub(crate) static OPERATION: Arc<Operation>;
}

/// The operation a command runs as: `maxTimeMS` is its deadline (on a getMore it is the
/// time to await data instead).
fn operation_for(name: &str, cmd: &Document) -> Arc<Operation> {
    let max_time_ms = match cmd.get("maxTimeMS") {
        _ if name == "getMore" => None,
        Some(Bson::Int32(n)) => Some(*n as i64),
        Some(Bson::Int64(n)) => Some(*n),
        Some(Bson::Double(f)) if f.is_finite() => Some(*f as i64),
        _ => None,
    };
    Operation::with_max_time_ms(max_time_ms)
}

/// A reply body, and whether the connection must close after it (fail points).
pub struct Reply {
    pub body: Body,
    pub close_connection: bool,
}

impl Reply {
    fn body(body: Body) -> Reply {
        Reply {
            body,
            close_connection: false,
        }
    }

    /// mongod's error reply (see [`error_reply`]).
    fn error(state: &ServerState, e: &Error) -> Reply {
        Reply::body(Body::Doc(error_reply(state, e)))
    }

    /// No reply: the connection closes (fail points).
    fn close() -> Reply {
        Reply {
            body: Body::Doc(Document::new()),
            close_connection: true,
        }
    }
}

/// A reply body: a document, or an OP_MSG already holding the encoded body at
/// `MSG_BODY_OFFSET` (change-stream events go from the oplog to the socket as BSON,
/// written once into the message buffer).
pub enum Body {
    Doc(Document),
    Msg(Vec<u8>),
    /// A cursor batch `{cursor: {...}, ok: 1}` of raw documents kept in their own
    /// buffers (written to the socket from them when large), and whether its cursor
    /// stays open (known when it was built: no need to read the reply back).
    Pieced {
        msg: tailstream_wire::PiecedMsg,
        cursor_open: bool,
    },
}

/// An encoded reply, ready for the socket.
pub enum Outgoing {
    Flat(Vec<u8>),
    Pieced(tailstream_wire::PiecedMsg),
}

impl Outgoing {
    /// Writes the reply, compressed with `compressor` if the client asked for it;
    /// returns the bytes written.
    pub async fn write_to<W: tokio::io::AsyncWrite + Unpin>(
        self,
        w: &mut W,
        compressor: Option<tailstream_wire::Compressor>,
    ) -> std::io::Result<usize> {
        use tokio::io::AsyncWriteExt;
        match (self, compressor) {
            (Outgoing::Flat(b), None) => w.write_all(&b).await.map(|()| b.len()),
            (Outgoing::Flat(b), Some(c)) => {
                let out = tailstream_wire::compress(&b, c);
                w.write_all(&out).await.map(|()| out.len())
            }
            (Outgoing::Pieced(p), None) => {
                let len = p.len();
                p.write_to(w).await.map(|()| len)
            }
            (Outgoing::Pieced(p), Some(c)) => {
                let out = tailstream_wire::compress(&p.flatten(), c);
                w.write_all(&out).await.map(|()| out.len())
            }
        }
    }
}

/// Pieced replies of at least this many bytes go out pieced (writev from the events'
/// own buffers); smaller ones are copied into one buffer. Even a change stream's
/// 10-event batch saves its copy: 1.2% of a hundred streams' server CPU.
const PIECED_REPLY_BYTES: usize = 4 << 10;

impl Body {
    fn raw_body(buf: &[u8]) -> Option<&bson::RawDocument> {
        bson::RawDocument::from_bytes(&buf[tailstream_wire::MSG_BODY_OFFSET..]).ok()
    }

    /// A pieced body in one buffer (for the rare readers of a whole reply).
    fn flat(self) -> Body {
        match self {
            Body::Pieced { msg, .. } => Body::Msg(msg.flatten()),
            other => other,
        }
    }

    /// `ok: 1` (a streaming hello goes on then).
    pub fn is_ok(&self) -> bool {
        match self {
            Body::Pieced { .. } => true,
            Body::Doc(d) => d.get_f64("ok").unwrap_or(0.0) == 1.0,
            Body::Msg(m) => Self::raw_body(m)
                .map(|r| r.get_f64("ok").unwrap_or(0.0) == 1.0)
                .unwrap_or(false),
        }
    }

    /// The reply's `topologyVersion` (a streaming hello's next wait starts from it).
    pub fn topology_version(&self) -> Option<Document> {
        match self {
            Body::Pieced { .. } => None,
            Body::Doc(d) => d.get_document("topologyVersion").ok().cloned(),
            Body::Msg(m) => Self::raw_body(m)
                .and_then(|r| r.get_document("topologyVersion").ok())
                .and_then(|tv| Document::try_from(tv).ok()),
        }
    }

    /// `ok: 1` with a cursor that stays open (exhaust getMore keeps streaming then).
    pub fn is_ok_with_open_cursor(&self) -> bool {
        match self {
            Body::Pieced { cursor_open, .. } => *cursor_open,
            Body::Doc(d) => {
                d.get_f64("ok").unwrap_or(0.0) == 1.0
                    && d.get_document("cursor")
                        .and_then(|c| c.get_i64("id"))
                        .unwrap_or(0)
                        != 0
            }
            Body::Msg(m) => Self::raw_body(m)
                .map(|r| {
                    r.get_f64("ok").unwrap_or(0.0) == 1.0
                        && r.get_document("cursor")
                            .ok()
                            .and_then(|c| c.get_i64("id").ok())
                            .unwrap_or(0)
                            != 0
                })
                .unwrap_or(false),
        }
    }

    pub fn into_msg(self, request_id: i32, response_to: i32, flags: u32) -> Outgoing {
        use tailstream_wire::msg_flags::CHECKSUM_PRESENT;
        match self {
            Body::Doc(d) => Outgoing::Flat(tailstream_wire::encode_msg(
                request_id,
                response_to,
                flags,
                &d,
            )),
            Body::Msg(m) => Outgoing::Flat(tailstream_wire::finish_msg_in_place(
                m,
                request_id,
                response_to,
                flags,
            )),
            // A small batch goes out in one buffer (one `write`, and the copy costs
            // little); a checksum needs the whole message in one buffer.
            Body::Pieced { msg, .. }
                if msg.len() < PIECED_REPLY_BYTES || flags & CHECKSUM_PRESENT != 0 =>
            {
                Body::Msg(msg.flatten()).into_msg(request_id, response_to, flags)
            }
            Body::Pieced { mut msg, .. } => {
                msg.finish(request_id, response_to, flags);
                Outgoing::Pieced(msg)
            }
        }
    }

    pub fn into_document(self) -> Document {
        match self.flat() {
            Body::Doc(d) => d,
            Body::Msg(m) => Self::raw_body(&m)
                .and_then(|r| Document::try_from(r).ok())
                .unwrap_or_default(),
            Body::Pieced { .. } => unreachable!("flattened above"),
        }
    }
}

/// A command's successful result.
pub enum Output {
    Doc(Document),
    /// A cursor batch of raw documents (change streams).
    Cursor(RawCursor),
}

pub struct RawCursor {
    /// `firstBatch` (aggregate) or `nextBatch` (getMore).
    pub first: bool,
    pub docs: Vec<std::sync::Arc<RawDocumentBuf>>,
    pub post_batch_resume_token: Option<Document>,
    /// A bucket of a parallel change stream: fields its cursor document adds (the
    /// stream's `combinedResumeToken`, a group consumer's `rejoin`).
    pub bucket_fields: Option<Box<Document>>,
    pub id: i64,
    pub ns: String,
}

/// Writes an element header and reserves the length of a document/array value;
/// returns where the length goes.
fn open(out: &mut Vec<u8>, kind: u8, name: &str) -> usize {
    out.push(kind);
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    at
}

/// Ends the document whose length goes at `at`: its final 0, then the length.
fn close(out: &mut Vec<u8>, at: usize) {
    out.push(0);
    let len = (out.len() - at) as i32;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

/// The reply of a raw cursor batch, `{cursor: {<batch>: [...], postBatchResumeToken, id, ns},
/// ok: 1, ...}`, written in one pass with no intermediate documents: the events stay in
/// their own buffers (see [`Body::into_msg`] for when they are copied into one).
fn raw_cursor_reply(state: &ServerState, c: RawCursor) -> Body {
    /// The elements of an encoded document (without its length and final 0).
    fn elements_of(out: &mut Vec<u8>, doc: &[u8]) {
        out.extend_from_slice(&doc[4..doc.len() - 1]);
    }
    /// The framing around the batch: header, `cursor`, `id`, `ok`, `$clusterTime`,
    /// `operationTime` (the namespace apart); and per document its array key (type,
    /// up to 7 digits, NUL). An estimate: what is over it grows the framing.
    const ENVELOPE_BYTES: usize = 256;
    const KEY_BYTES: usize = 9;
    let docs_len: usize = c.docs.iter().map(|d| d.as_bytes().len()).sum();
    let framing_bytes = ENVELOPE_BYTES + c.ns.len() + c.docs.len() * KEY_BYTES;
    // Sized once: grown as written, the lists and framing were 800 instructions of a
    // bus message read by 8 consumers (callgrind, 2026-11-28).
    let mut msg = tailstream_wire::PiecedMsg::with_capacity(c.docs.len(), framing_bytes);
    let out = msg.framing();
    let body_at = out.len();
    out.extend_from_slice(&[0; 4]);
    let cursor_at = open(out, 0x03, "cursor");
    let array_at = open(out, 0x04, if c.first { "firstBatch" } else { "nextBatch" });
    // Array keys "0", "1", ...: `itoa` rather than `write!` (whose formatting
    // machinery showed at 1% of a catch-up's server CPU).
    let mut name = itoa::Buffer::new();
    for (i, d) in c.docs.into_iter().enumerate() {
        let out = msg.framing();
        out.push(0x03);
        out.extend_from_slice(name.format(i).as_bytes());
        out.push(0);
        msg.push_doc(d);
    }
    let out = msg.framing();
    out.push(0);
    let array_end = out.len();
    let mut tail = RawDocumentBuf::new();
    if let Some(t) = c.post_batch_resume_token {
        if let Ok(raw) = RawDocumentBuf::from_document(&t) {
            tail.append("postBatchResumeToken", raw);
        }
    }
    if let Some(fields) = c.bucket_fields {
        if let Ok(raw) = RawDocumentBuf::from_document(&fields) {
            for (k, v) in raw.iter().flatten() {
                tail.append(k, v.to_raw_bson());
            }
        }
    }
    tail.append("id", c.id);
    tail.append("ns", c.ns);
    elements_of(out, tail.as_bytes());
    out.push(0);
    let cursor_end = out.len();
    // ok, $clusterTime and operationTime, as ok_reply adds them, written raw.
    push_ok(out);
    push_cluster_time(out, state.engine.cluster_time());
    out.push(0);
    // The three documents around the batch: their lengths count the events too (all
    // of them lie inside each), which the framing does not hold.
    let body_end = out.len();
    for (at, end) in [
        (array_at, array_end),
        (cursor_at, cursor_end),
        (body_at, body_end),
    ] {
        let len = i32::try_from(end - at + docs_len).expect("a reply under 2 GiB");
        out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }
    Body::Pieced {
        msg,
        cursor_open: c.id != 0,
    }
}

/// Appends the element `ok: 1.0` to a document being written.
fn push_ok(out: &mut Vec<u8>) {
    out.push(0x01);
    out.extend_from_slice(b"ok\0");
    out.extend_from_slice(&1.0f64.to_le_bytes());
}

/// Appends the elements every reply ends with, `$clusterTime: {clusterTime: ts,
/// signature: {hash: <20 zero bytes>, keyId: 0}}` and `operationTime: ts`, to a
/// document being written (what [`append_cluster_time`] inserts into a `Document`).
fn push_cluster_time(out: &mut Vec<u8>, ts: bson::Timestamp) {
    // A BSON timestamp is the increment then the seconds, each u32 little-endian.
    let push_ts = |out: &mut Vec<u8>| {
        out.extend_from_slice(&ts.increment.to_le_bytes());
        out.extend_from_slice(&ts.time.to_le_bytes());
    };
    let cluster_time = open(out, 0x03, "$clusterTime");
    out.push(0x11);
    out.extend_from_slice(b"clusterTime\0");
    push_ts(out);
    let signature = open(out, 0x03, "signature");
    out.push(0x05);
    out.extend_from_slice(b"hash\0");
    out.extend_from_slice(&20i32.to_le_bytes());
    out.push(0x00); // binary subtype: generic
    out.extend_from_slice(&[0; 20]);
    out.push(0x12);
    out.extend_from_slice(b"keyId\0");
    out.extend_from_slice(&0i64.to_le_bytes());
    close(out, signature);
    close(out, cluster_time);
    out.push(0x11);
    out.extend_from_slice(b"operationTime\0");
    push_ts(out);
}

/// A successful command's reply: `body`, `ok: 1` unless it has `ok`, `$clusterTime` and
/// `operationTime`, written straight into an OP_MSG buffer. The same bytes as
/// `Body::Doc(ok_reply(..))`, without inserting the cluster-time fields into the
/// document (a map insertion each, two nested documents) only to encode them again:
/// every insert's and update's reply takes this path.
fn raw_ok_reply(state: &ServerState, body: Document) -> Body {
    match raw_ok_body(&body, state.engine.cluster_time()) {
        Some(out) => Body::Msg(out),
        None => Body::Doc(ok_reply(state, body)),
    }
}

/// The OP_MSG buffer of [`raw_ok_reply`] (the body at `MSG_BODY_OFFSET`), or None where
/// the document path must do it: a body that already has `$clusterTime` or
/// `operationTime` (ok_reply replaces them in place) or that cannot be encoded (the
/// codec reports that).
fn raw_ok_body(body: &Document, ts: bson::Timestamp) -> Option<Vec<u8>> {
    if body.contains_key("$clusterTime") || body.contains_key("operationTime") {
        return None;
    }
    let mut out = Vec::with_capacity(tailstream_wire::MSG_BODY_OFFSET + 256);
    // The body's length, set by `close`.
    out.resize(tailstream_wire::MSG_BODY_OFFSET + 4, 0);
    if !push_scalar_elements(&mut out, body) {
        out.truncate(tailstream_wire::MSG_BODY_OFFSET);
        // `to_writer` serializes fully before writing: on failure nothing was appended.
        body.to_writer(&mut out).ok()?;
        out.pop(); // the body's final 0: the reply's own elements follow
    }
    if !body.contains_key("ok") {
        push_ok(&mut out);
    }
    push_cluster_time(&mut out, ts);
    close(&mut out, tailstream_wire::MSG_BODY_OFFSET);
    Some(out)
}

/// Appends `body`'s elements (not its length or final 0) when every value is a plain
/// scalar (a write's `{n: 1}`, `{n, nModified}`); false otherwise, having appended part
/// of them (the caller truncates). bson's `to_writer` goes through serde into a buffer
/// of its own and copies it: 944 of an insert reply's instructions for `{n: 1}`
/// (callgrind, 2026-11-28).
fn push_scalar_elements(out: &mut Vec<u8>, body: &Document) -> bool {
    for (key, value) in body {
        // A key with a NUL cannot be written: bson's encoder reports it.
        if key.contains('\0') {
            return false;
        }
        out.push(value.element_type() as u8);
        out.extend_from_slice(key.as_bytes());
        out.push(0);
        match value {
            Bson::Int32(i) => out.extend_from_slice(&i.to_le_bytes()),
            Bson::Int64(i) => out.extend_from_slice(&i.to_le_bytes()),
            Bson::Double(f) => out.extend_from_slice(&f.to_le_bytes()),
            Bson::Boolean(b) => out.push(u8::from(*b)),
            Bson::String(text) => {
                out.extend_from_slice(&(text.len() as i32 + 1).to_le_bytes());
                out.extend_from_slice(text.as_bytes());
                out.push(0);
            }
            Bson::Null => {}
            _ => return false,
        }
    }
    true
}

/// Runs one OP_MSG command and builds its reply (never fails: errors become `ok: 0` replies).
/// `payload` holds an insert's documents when they came as a raw document sequence.
/// `cmd` is shared while the command runs (currentOp shows it) and let go when it ends.
pub async fn dispatch(
    state: &Arc<ServerState>,
    conn: &mut Conn,
    cmd: Arc<Document>,
    payload: Option<Vec<RawDocumentBuf>>,
    cluster_time: Option<tailstream_wire::KeptField>,
) -> Reply {
    let db = match cmd.get("$db") {
        Some(Bson::String(db)) => db.clone(),
        _ => {
            return Reply::error(
                state,
                &Error::new(40571, "OP_MSG requests require a $db argument"),
            )
        }
    };
    gates::run(state, conn, &db, cmd, payload, cluster_time).await
}

/// Runs a legacy OP_QUERY command (drivers' first `isMaster` before they know the server speaks OP_MSG).
pub async fn dispatch_legacy(state: &Arc<ServerState>, conn: &mut Conn, q: OpQuery) -> Reply {
    let reply = |body| Reply {
        body: Body::Doc(body),
        close_connection: false,
    };
    let Some(db) = q.full_collection_name.strip_suffix(".$cmd") else {
        return reply(error_reply(
            state,
            &Error::new(
                5739101,
                "OP_QUERY is no longer supported except for commands on <db>.$cmd",
            ),
        ));
    };
    let db = db.to_string();
    // Legacy commands may be wrapped as {$query: {...}, $readPreference: ...}.
    let cmd = match q.query.get("$query") {
        Some(Bson::Document(inner)) => inner.clone(),
        _ => q.query.clone(),
    };
    let name = cmd
        .keys()
        .next()
        .map(|s| s.to_ascii_lowercase())
        .unwrap_or_default();
    if !matches!(name.as_str(), "ismaster" | "hello") {
        return reply(error_reply(
            state,
            &Error::new(352, format!("Unsupported OP_QUERY command: {name}. The client driver may require an upgrade.")),
        ));
    }
    gates::run(state, conn, &db, Arc::new(cmd), None, None).await
}

/// Adds `ok: 1` and the cluster time fields drivers expect on every reply.
fn ok_reply(state: &ServerState, mut body: Document) -> Document {
    if !body.contains_key("ok") {
        body.insert("ok", 1.0);
    }
    append_cluster_time(state, &mut body);
    body
}

/// mongod's error reply: `ok: 0`, `errmsg`, `code`, `codeName`, plus any extra info and labels.
pub fn error_reply(state: &ServerState, e: &Error) -> Document {
    state.metrics.user_assert();
    let mut body = doc! {"ok": 0.0, "errmsg": e.message.clone(), "code": e.code, "codeName": code_name(e.code)};
    if let Some(info) = &e.info {
        for (k, v) in info {
            body.insert(k.clone(), v.clone());
        }
    }
    if !e.labels.is_empty() {
        body.insert("errorLabels", e.labels.clone());
    }
    crate::replset::add_topology_version(state, e.code, &mut body);
    append_cluster_time(state, &mut body);
    body
}

fn append_cluster_time(state: &ServerState, body: &mut Document) {
    insert_cluster_time(body, state.engine.cluster_time());
}

fn insert_cluster_time(body: &mut Document, ts: bson::Timestamp) {
    body.insert(
        "$clusterTime",
        doc! {
            "clusterTime": ts,
            "signature": {"hash": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![0; 20] }, "keyId": 0i64},
        },
    );
    body.insert("operationTime", ts);
}

/// Runs a small engine operation right on the connection's task: handing it to the
/// blocking pool costs two thread switches, more than the operation itself (a small
/// insert commits in microseconds: it does not wait for the disk, durable writers wait
/// asynchronously afterwards). Larger operations go to [`blocking`], and so does a
/// small one while a write not declared short holds the writer lock (a large write on
/// the blocking pool): waiting for it here would stall every connection of this
/// thread. Another connection thread's small write is waited for in place
/// (`core::writer_lock`).
pub async fn small_or_blocking<T, F>(state: &Arc<ServerState>, small: bool, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce(&Engine) -> Result<T> + Send + 'static,
{
    // On a member of a set every write waits for its Raft round with the writer lock
    // held, so none waits for that lock on a connection thread (which openraft's tasks
    // share): with one such thread the member stopped whole.
    if small && state.repl.member().is_none() && !state.engine.writer_held_long() {
        let op = OPERATION.try_with(|op| op.clone()).ok();
        let _current = op.as_ref().map(|op| op.enter());
        // Declared short: another connection thread's small write waits for this one
        // in place instead of going to the pool.
        tailstream_engine::core::writer_lock::short_writes(|| f(&state.engine))
    } else {
        blocking(state, f).await
    }
}

/// Runs an engine operation on the command's open transaction, on the blocking pool.
pub async fn in_transaction<T, F>(
    state: &Arc<ServerState>,
    t: crate::transactions::OpenTransaction,
    f: F,
) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce(&Engine, &mut tailstream_engine::transaction::Transaction) -> Result<T>
        + Send
        + 'static,
{
    blocking(state, move |e| match t.lock().as_mut() {
        Some(txn) => f(e, txn),
        None => Err(Error::new(
            codes::NO_SUCH_TRANSACTION,
            "the transaction has been committed",
        )
        .with_label("TransientTransactionError")),
    })
    .await
}

/// Runs a blocking engine call on the blocking pool, so storage I/O never stalls the
/// connection tasks. An engine panic becomes an error reply instead of a crash.
pub async fn blocking<T, F>(state: &Arc<ServerState>, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce(&Engine) -> Result<T> + Send + 'static,
{
    let engine = state.engine.clone();
    let op = OPERATION.try_with(|op| op.clone()).ok();
    tokio::task::spawn_blocking(move || {
        let _current = op.as_ref().map(|op| op.enter());
        engine.forget_seen_writes();
        let result = f(&engine);
        // A replica set's reply waits for the pipelined commits its writes read.
        engine.await_seen_writes()?;
        result
    })
    .await
    .map_err(|e| Error::internal(format!("operation failed: {e}")))?
}

#[cfg(test)]
mod raw_reply_tests {
    use super::*;

    /// What ok_reply makes of `body`, encoded.
    fn document_path(mut body: Document, ts: bson::Timestamp) -> Vec<u8> {
        if !body.contains_key("ok") {
            body.insert("ok", 1.0);
        }
        insert_cluster_time(&mut body, ts);
        let mut out = Vec::new();
        body.to_writer(&mut out).unwrap();
        out
    }

    #[test]
    fn raw_ok_body_is_byte_for_byte_the_document_path() {
        let ts = bson::Timestamp {
            time: 1_795_412_187,
            increment: 0x0102_0304,
        };
        for body in [
            doc! {},
            doc! {"n": 1i64},
            doc! {"n": 2i64, "writeErrors": [{"index": 0, "code": 11000, "errmsg": "dup"}]},
            doc! {"ok": 1.0, "value": {"a": [1, "x", null]}},
            doc! {"ok": 0.0, "note": "an ok already present stays as it is"},
            doc! {"n": 1},
            doc! {"n": 3, "nModified": 2i64, "upserted": null, "d": -0.5, "t": true, "f": false},
            doc! {"s": "", "é": "a\0b ünï"},
            doc! {"n": 1, "then": [1]},
        ] {
            let raw = raw_ok_body(&body, ts).expect("encodable");
            assert_eq!(
                raw[tailstream_wire::MSG_BODY_OFFSET..],
                document_path(body.clone(), ts)[..],
                "{body}"
            );
        }
    }

    #[test]
    fn bodies_with_cluster_time_fields_take_the_document_path() {
        let ts = bson::Timestamp {
            time: 1,
            increment: 1,
        };
        assert!(raw_ok_body(&doc! {"operationTime": ts}, ts).is_none());
        assert!(raw_ok_body(&doc! {"$clusterTime": {}}, ts).is_none());
    }

    /// A key bson cannot encode fails the raw path as it fails the document's.
    #[test]
    fn a_key_with_a_nul_is_not_encoded() {
        let ts = bson::Timestamp {
            time: 1,
            increment: 1,
        };
        let body = doc! {"bad\0key": 1};
        assert!(body.to_writer(&mut Vec::new()).is_err());
        assert!(raw_ok_body(&body, ts).is_none());
    }
}
