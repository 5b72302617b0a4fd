//! One task per client connection: read a message, run its command, write the
//! reply, in order. A malformed or oversized message closes this connection only.

use crate::commands::{self, Conn};
use crate::state::ServerState;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use tailstream_engine::query::error::codes;
use tailstream_wire::{self as wire, msg_flags, Request};
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

static NEXT_REQUEST_ID: AtomicI32 = AtomicI32::new(1);

fn next_request_id() -> i32 {
    NEXT_REQUEST_ID.fetch_add(1, Ordering::Relaxed)
}

/// Sends what the writer still holds of a reply. A TCP or Unix socket holds nothing
/// (this returns at once); TLS may keep the last records of a reply in rustls's buffer
/// when the socket was full, and they would wait there for the next reply.
async fn flush(wr: &mut (impl AsyncWrite + Unpin)) -> Result<(), String> {
    wr.flush().await.map_err(|e| format!("write failed: {e}"))
}

/// A reply stream the client allowed with `exhaustAllowed`: the command is run again and
/// again, each reply flagged `moreToCome` and answering the one before, without the
/// client asking, while `goes_on` says the reply continues the stream (an error reply is
/// never flagged, as the spec requires). Used by:
/// - an exhaust getMore: every batch while its cursor stays open;
/// - the streaming protocol of server monitoring: an awaitable `hello` (with
///   `topologyVersion` and `maxAwaitTimeMS`) answered each time its wait passes or the
///   topology changes (`handshake::hello` waits it), as mongod does; each next wait
///   starts from the `topologyVersion` the reply before carried.
///   Drivers that get one reply without `moreToCome` fail the heartbeat and clear their
///   pool.
///
/// The client going away ends it (the next write fails).
async fn stream_replies(
    state: &Arc<ServerState>,
    conn: &mut Conn,
    (rd, wr): (
        &mut (impl AsyncBufRead + Unpin),
        &mut (impl AsyncWriteExt + Unpin),
    ),
    (cmd, request_id, compressor): (bson::Document, i32, Option<wire::Compressor>),
    goes_on: fn(&commands::Body) -> bool,
) -> Result<(), String> {
    let mut response_to = request_id;
    let mut cmd = cmd;
    loop {
        let info = conn.info.clone();
        // The client closing meanwhile kills the command's operation, which ends an
        // awaitable hello's or an awaiting getMore's wait.
        let command = std::pin::pin!(commands::dispatch(
            state,
            conn,
            Arc::new(cmd.clone()),
            None,
            None
        ));
        let reply = until_client_gone(rd, &info, &state.current_ops, command).await;
        if reply.close_connection {
            return Err("closed by a failCommand fail point".into());
        }
        let more = goes_on(&reply.body);
        if let (true, Some(tv)) = (
            cmd.contains_key("topologyVersion"),
            reply.body.topology_version(),
        ) {
            cmd.insert("topologyVersion", tv);
        }
        let id = next_request_id();
        let flags = if more { msg_flags::MORE_TO_COME } else { 0 };
        let written = reply
            .body
            .into_msg(id, response_to, flags)
            .write_to(wr, compressor)
            .await
            .map_err(|e| format!("write failed: {e}"))?;
        flush(wr).await?;
        state.metrics.message_out(written);
        if !more {
            return Ok(());
        }
        response_to = id;
    }
}

/// Whether a command is an awaitable hello (streaming server monitoring).
fn is_awaitable_hello(body: &bson::Document) -> bool {
    matches!(
        body.keys().next().map(String::as_str),
        Some("hello" | "isMaster" | "ismaster")
    ) && body.contains_key("topologyVersion")
        && body.contains_key("maxAwaitTimeMS")
}

/// Runs a command while watching the client: if it closes the connection meanwhile,
/// the command's operation is killed (ClientDisconnect), as mongod does, so a long
/// `$where` or `sleep()` stops instead of running for nobody.
/// The command comes pinned by the caller: a command's future is kilobytes, and taken
/// by value it was copied into this function's own state once more per command.
async fn until_client_gone<R: AsyncBufRead + Unpin, T>(
    rd: &mut R,
    info: &crate::current_op::ConnInfo,
    kills: &crate::current_op::Registry,
    mut command: std::pin::Pin<&mut impl std::future::Future<Output = T>>,
) -> T {
    let mut watching = true;
    loop {
        tokio::select! {
            // The command first: one that finishes at its first poll (most do) costs no
            // read attempt on the socket.
            biased;
            out = command.as_mut() => return out,
            // `fill_buf` is cancel safe and consumes nothing: bytes the client sends
            // (its next message) stay for the next read.
            filled = rd.fill_buf(), if watching => {
                watching = false;
                let gone = match filled {
                    Ok(buf) => buf.is_empty(),
                    Err(_) => true,
                };
                if gone {
                    if let Some(r) = info.running.lock().as_ref() {
                        r.op.kill(codes::CLIENT_DISCONNECT);
                    }
                    kills.signal_kill();
                }
            }
        }
    }
}

/// A socket the server accepts clients on: TCP (`--bind_ip`, `--port`) or a Unix
/// domain socket (`/tmp/mongodb-<port>.sock` by default, as mongod's; paths in
/// `--bind_ip`). Same-host clients on the Unix socket skip the TCP/IP stack.
pub enum Listener {
    Tcp(TcpListener),
    /// The socket file, removed again when the server shuts down.
    Unix(UnixListener, PathBuf),
}

/// How mongod names a Unix-socket peer (its address has no name: "anonymous"; with no
/// port in it, the default one is shown), in whatsmyuri, currentOp and the logs.
const UNIX_PEER: &str = "anonymous unix socket:27017";

pub async fn accept_loop(listener: Listener, state: Arc<ServerState>) {
    loop {
        let accepted = match &listener {
            Listener::Tcp(l) => l.accept().await.map(|(sock, peer)| {
                let _ = sock.set_nodelay(true);
                (Accepted::Tcp(sock), peer.to_string())
            }),
            Listener::Unix(l, _) => l
                .accept()
                .await
                .map(|(sock, _)| (Accepted::Unix(sock), UNIX_PEER.to_string())),
        };
        match accepted {
            Ok((sock, peer)) => {
                if state.current_connections.load(Ordering::Relaxed)
                    >= state.config.max_conns as i64
                {
                    tracing::warn!(%peer, "connection refused: too many open connections");
                    drop(sock);
                    continue;
                }
                let state = state.clone();
                crate::io_threads::spawn_connection(serve(sock, peer, state));
            }
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}

/// An accepted connection, before TLS (TCP only) is negotiated.
enum Accepted {
    Tcp(TcpStream),
    Unix(UnixStream),
}

async fn serve(sock: Accepted, peer: String, state: Arc<ServerState>) {
    if !state.ingress.admit(&state).await {
        tracing::debug!(%peer, "connection closed: establishment rate limit");
        return;
    }
    let mut conn = Conn::register(&state, peer);
    let id = conn.id;
    let count = state.current_connections.fetch_add(1, Ordering::Relaxed) + 1;
    state.total_connections.fetch_add(1, Ordering::Relaxed);
    tracing::info!(
        id = crate::logging::ID_CONNECTION_ACCEPTED,
        conn = id,
        remote = %conn.peer,
        connectionId = id,
        connectionCount = count,
        "Connection accepted"
    );
    // The two directions are owned separately, so a command can watch the read side
    // for the client going away while its reply is being written.
    let result = match sock {
        Accepted::Tcp(sock) => serve_tcp(sock, &mut conn, &state).await,
        // The Unix domain socket stays plain, whatever --tlsMode says (as mongod's).
        Accepted::Unix(sock) => {
            let (rd, wr) = sock.into_split();
            session(rd, wr, &mut conn, &state).await
        }
    };
    if let Err(why) = result {
        tracing::info!(conn = id, remote = %conn.peer, error = %why, "Connection closed on an error");
    }
    state.current_ops.disconnect(id);
    let count = state.current_connections.fetch_sub(1, Ordering::Relaxed) - 1;
    tracing::info!(
        id = crate::logging::ID_CONNECTION_ENDED,
        conn = id,
        remote = %conn.peer,
        connectionId = id,
        connectionCount = count,
        "Connection ended"
    );
}

/// mongod's code and log line for a TLS connection that could not be set up.
const SSL_HANDSHAKE_FAILED: i32 = 141;
const ID_ENDING_CONNECTION: i64 = 22988;

/// A TCP connection: plain when TLS is disabled; otherwise its first message header
/// decides (`tls::starts_tls`), and a TLS one is served through rustls once the
/// handshake (and the client certificate's verification) succeeded.
async fn serve_tcp(
    sock: TcpStream,
    conn: &mut Conn,
    state: &Arc<ServerState>,
) -> Result<(), String> {
    let (mut rd, wr) = sock.into_split();
    let Some(acceptor) = state.tls.acceptor() else {
        return session(rd, wr, conn, state).await;
    };
    let mut header = [0u8; wire::HEADER_LEN];
    if let Err(e) = rd.read_exact(&mut header).await {
        // Closed before a whole header: nothing to serve.
        return match e.kind() {
            std::io::ErrorKind::UnexpectedEof => Ok(()),
            _ => Err(format!("read failed: {e}")),
        };
    }
    // The header read goes back in front of the rest.
    let rd = std::io::Cursor::new(header).chain(rd);
    if !crate::tls::starts_tls(&header) {
        match state.tls.mode {
            crate::tls::Mode::RequireTls => {
                log_handshake_failure(
                    conn,
                    "The server is configured to only allow SSL connections",
                );
                return Ok(());
            }
            crate::tls::Mode::PreferTls => tracing::info!(
                conn = conn.id,
                "SSL mode is set to 'preferred' and connection {} to {} is not using SSL.",
                conn.id,
                conn.peer
            ),
            _ => {}
        }
        return session(rd, wr, conn, state).await;
    }
    let started = std::time::Instant::now();
    let stream = match acceptor.accept(tokio::io::join(rd, wr)).await {
        Ok(stream) => stream,
        Err(e) => {
            log_handshake_failure(conn, &format!("SSL handshake failed: {e}"));
            return Ok(());
        }
    };
    let tls = stream.get_ref().1;
    state.tls.count(tls.protocol_version());
    let chain = tls.peer_certificates().unwrap_or_default();
    let subject = chain.first().and_then(crate::tls::subject_name);
    if let Some(verified) = state.tls.verified_subject(chain) {
        tracing::debug!(conn = conn.id, peerSubjectName = %verified, "Accepted TLS connection from peer");
        let _ = conn.info.peer_subject.set(verified);
    }
    tracing::info!(
        conn = conn.id,
        durationMillis = started.elapsed().as_millis() as i64,
        tlsVersion = crate::tls::version_name(tls.protocol_version()),
        cipher = tls
            .negotiated_cipher_suite()
            .and_then(|c| c.suite().as_str())
            .unwrap_or("unknown"),
        peerSubject = subject.as_deref().unwrap_or(""),
        "Ingress TLS handshake complete"
    );
    let (rd, wr) = tokio::io::split(stream);
    session(crate::tls::EndWithoutNotify(rd), wr, conn, state).await
}

/// mongod's line for a connection ended before its first message: TLS required and
/// not offered, or a handshake that failed (a client certificate missing, expired or
/// of another CA; bytes that are not TLS).
fn log_handshake_failure(conn: &Conn, errmsg: &str) {
    crate::logging::emit(
        "I",
        "NETWORK",
        ID_ENDING_CONNECTION,
        &format!("conn{}", conn.id),
        "Error receiving request from client. Ending connection from remote",
        bson::doc! {
            "error": {"code": SSL_HANDSHAKE_FAILED, "codeName": "SSLHandshakeFailed", "errmsg": errmsg},
            "remote": &conn.peer,
            "connectionId": conn.id,
        },
    );
}

/// Serves a connection's messages until it closes or fails.
async fn session(
    rd: impl AsyncRead + Unpin,
    mut wr: impl AsyncWrite + Unpin,
    conn: &mut Conn,
    state: &Arc<ServerState>,
) -> Result<(), String> {
    let mut rd = BufReader::with_capacity(64 * 1024, rd);
    // The previous command's body, decoded again for the next one (see wire's `reuse`).
    let mut bodies = wire::BodyCache::default();
    async {
        loop {
            let (header, body) = match wire::read_message(&mut rd, wire::MAX_MESSAGE_SIZE).await {
                Ok(Some(m)) => m,
                Ok(None) => return Ok(()),
                Err(e) => return Err(format!("bad message: {e}")),
            };
            state
                .metrics
                .message_in(usize::try_from(header.message_length).unwrap_or(0));
            let (request, compressor) = wire::decode_request_reusing(&header, &body, &mut bodies)
                .map_err(|e| format!("malformed message: {e}"))?;
            let reply = match request {
                Request::Msg(mut msg) => {
                    let fire_and_forget = msg.flags & msg_flags::MORE_TO_COME != 0;
                    let exhaust_allowed = msg.flags & msg_flags::EXHAUST_ALLOWED != 0;
                    let exhaust = exhaust_allowed
                        && msg.body.keys().next().map(String::as_str) == Some("getMore");
                    let streaming_hello = exhaust_allowed && is_awaitable_hello(&msg.body);
                    // An insert's documents stay raw BSON all the way to storage.
                    let payload = match msg.body.keys().next().map(String::as_str) {
                        Some("insert") => msg.take_sequence("documents").map(|s| s.documents),
                        _ => None,
                    };
                    // Streamed replies rerun the command as a whole document.
                    let cluster_time = match exhaust || streaming_hello {
                        true => None,
                        false => msg.cluster_time.take(),
                    };
                    let reusable = msg.command_is_body();
                    let cmd = msg
                        .into_command()
                        .map_err(|e| format!("malformed message: {e}"))?;
                    if exhaust {
                        let stream = (cmd, header.request_id, compressor);
                        stream_replies(state, conn, (&mut rd, &mut wr), stream, |b| {
                            b.is_ok_with_open_cursor()
                        })
                        .await?;
                        continue;
                    }
                    if streaming_hello {
                        let stream = (cmd, header.request_id, compressor);
                        stream_replies(state, conn, (&mut rd, &mut wr), stream, |b| b.is_ok())
                            .await?;
                        continue;
                    }
                    let info = conn.info.clone();
                    let cmd = Arc::new(cmd);
                    let command = std::pin::pin!(commands::dispatch(
                        state,
                        conn,
                        Arc::clone(&cmd),
                        payload,
                        cluster_time
                    ));
                    let reply =
                        until_client_gone(&mut rd, &info, &state.current_ops, command).await;
                    // Unless a report still holds it (a currentOp under way).
                    if let (true, Ok(cmd)) = (reusable, Arc::try_unwrap(cmd)) {
                        bodies.give_back(cmd);
                    }
                    if fire_and_forget {
                        continue;
                    }
                    if reply.close_connection {
                        return Err("closed by a failCommand fail point".into());
                    }
                    reply.body.into_msg(next_request_id(), header.request_id, 0)
                }
                Request::Query(q) => {
                    let reply = commands::dispatch_legacy(state, conn, q).await;
                    if reply.close_connection {
                        return Err("closed by a failCommand fail point".into());
                    }
                    let body = reply.body.into_document();
                    commands::Outgoing::Flat(wire::encode_reply(
                        next_request_id(),
                        header.request_id,
                        8,
                        0,
                        0,
                        &[body],
                    ))
                }
            };
            let written = reply
                .write_to(&mut wr, compressor)
                .await
                .map_err(|e| format!("write failed: {e}"))?;
            flush(&mut wr).await?;
            state.metrics.message_out(written);
        }
    }
    .await
}
