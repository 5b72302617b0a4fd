//! `tailstream`: a MongoDB-wire-protocol server built for change notification.

use clap::Parser;
use config::Config;
use state::ServerState;
use std::sync::Arc;
use tailstream_engine::Engine;
use tailstream_server::{
    auth, config, config_file, conn, http, io_threads, logging, replset, state, tls,
};
use tokio::net::TcpListener;

// Every request and event builds and drops many small BSON values; glibc's malloc
// spent more time consolidating free chunks than the server spent on the events.
#[global_allocator]
static GLOBAL: Mimalloc = Mimalloc;

/// mimalloc, asked for its plain allocation whenever that is aligned enough. (The
/// `mimalloc` crate passes every request to `mi_malloc_aligned`, which for blocks
/// over 1 KiB takes mimalloc's generic over-allocating path even for byte-aligned
/// data: a change event, an oplog entry, a document. That path was 8% of a
/// catch-up's server instructions.) Every mimalloc block is a multiple of 8 bytes
/// from a 16-byte-aligned page start, so alignments up to 8 hold for `mi_malloc`.
struct Mimalloc;

/// The alignment every mimalloc block has.
const MIMALLOC_WORD_ALIGN: usize = 8;

// SAFETY: each function hands the request to mimalloc with the layout's alignment
// honoured: plainly where every block already has it, through the aligned entry
// points otherwise; `mi_free` frees blocks from either.
unsafe impl std::alloc::GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        use libmimalloc_sys as mi;
        if layout.align() <= MIMALLOC_WORD_ALIGN {
            mi::mi_malloc(layout.size()).cast()
        } else {
            mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        use libmimalloc_sys as mi;
        if layout.align() <= MIMALLOC_WORD_ALIGN {
            mi::mi_zalloc(layout.size()).cast()
        } else {
            mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: std::alloc::Layout) {
        libmimalloc_sys::mi_free(ptr.cast());
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        use libmimalloc_sys as mi;
        if layout.align() <= MIMALLOC_WORD_ALIGN {
            mi::mi_realloc(ptr.cast(), new_size).cast()
        } else {
            mi::mi_realloc_aligned(ptr.cast(), new_size, layout.align()).cast()
        }
    }
}

fn main() {
    disable_transparent_huge_pages();
    let argv = match config_file::expand(std::env::args_os().collect()) {
        Ok(argv) => argv,
        Err(e) => {
            eprintln!("tailstream: {e}");
            // mongod's exit code for bad options.
            std::process::exit(2);
        }
    };
    let mut config = Config::parse_from(argv);
    // As mongod: a key file turns authorization on.
    config.auth |= config.key_file.is_some();
    init_logging(&config);
    // The main runtime's one worker is the first connection thread; `--ioThreads`
    // adds runtimes of one worker each (see `io_threads`).
    let runtime = io_threads::runtime_builder("tailstream")
        .build()
        .expect("tokio runtime");
    if let Err(e) = io_threads::start(runtime.handle().clone(), config.io_threads()) {
        eprintln!("tailstream: cannot start the connection threads: {e}");
        std::process::exit(1);
    }
    let code = runtime.block_on(run(config));
    std::process::exit(code);
}

/// Turns transparent huge pages off for this process (what mimalloc's
/// `MIMALLOC_ALLOW_THP=0` does at its start-up).
///
/// mimalloc asks for huge pages on its arenas and returns memory it has not used for
/// a second; touching such memory again faults in a whole 2 MiB page, which the
/// kernel zeroes first. With a request mix that frees and reallocates steadily (100
/// change streams woken 100 times a second) this zeroing took 1.5-6% of the
/// server's CPU in profiles; with 4 KiB pages a fault zeroes only what is touched.
/// It was also the tail of insert-to-event latency: at 20,000 inserts/s the events'
/// p99 was 6.9-9.2 ms with huge pages and 1.6-2.1 ms without (A/B, same machine;
/// a huge-page fault may also stall on the kernel's compaction), for 10-15% less CPU. RocksDB's memory does
/// not use huge pages either way (it never asks for them).
fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

fn init_logging(config: &Config) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    // Even --quiet keeps the startup lines: launchers wait for "Waiting for connections".
    let default = if config.quiet {
        "warn,startup=info"
    } else {
        "info"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("TAILSTREAM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let writer: Box<dyn std::io::Write + Send> = match &config.logpath {
        Some(path) => match logging::open_log_file(path) {
            Ok(file) => Box::new(file),
            Err(e) => {
                eprintln!("cannot open log file {}: {e}", path.display());
                std::process::exit(1);
            }
        },
        None => Box::new(std::io::stderr()),
    };
    logging::init(
        config.log_format,
        writer,
        config.logpath.clone(),
        config.log_rotate,
    );
    tracing_subscriber::registry()
        .with(filter)
        .with(logging::MongodLayer)
        .init();
}

/// With `--keyFile`: the key read and checked (mongod's rules), handed to the members'
/// network, and the `__system` user made from it.
fn members_key(config: &Config) -> Result<Option<bson::Document>, String> {
    let Some(path) = &config.key_file else {
        return Ok(None);
    };
    let key = auth::keyfile::read(path)?;
    let user = auth::keyfile::system_user(&key).map_err(|e| e.message)?;
    tailstream_replication::member_auth::set_key(key);
    Ok(Some(user))
}

async fn run(config: Config) -> i32 {
    // The TLS options and files are checked before anything is opened, as mongod's.
    let tls = match tls::Tls::load(&config.tls_options()) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!("{}", e.message);
            eprintln!("tailstream: {}", e.message);
            return e.exit_code;
        }
    };
    let engine = match Engine::open(config.engine_options()) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("{}", e.message);
            eprintln!("tailstream: {}", e.message);
            return 100;
        }
    };
    let system_user = match members_key(&config) {
        Ok(user) => user,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("tailstream: {e}");
            return 1;
        }
    };
    let state = match ServerState::new(config.clone(), engine.clone()) {
        Ok(mut s) => {
            s.tls = tls;
            s.system_user = system_user;
            Arc::new(s)
        }
        Err(e) => {
            eprintln!("tailstream: {e}");
            return 2;
        }
    };
    // mongod's own startup warning while it runs without authentication (mongosh shows
    // the startup warnings when it connects).
    tracing::warn!(
        target: "startup",
        id = 22120,
        "Access control is not enabled for the database. Read and write access to data and \
         configuration is unrestricted"
    );
    if let Err(e) = replset::restart(&state).await {
        eprintln!("tailstream: {}", e.message);
        return 100;
    }
    tailstream_engine::ttl::spawn(&engine);
    let (tcp_addrs, unix_paths) = config.listen_addrs();
    let mut listeners = Vec::new();
    // TCP first: a second server started on the same port fails here, before it could
    // unlink the first one's socket file.
    for addr in &tcp_addrs {
        match TcpListener::bind(addr).await {
            Ok(l) => listeners.push(conn::Listener::Tcp(l)),
            Err(e) => {
                tracing::error!("cannot listen on {addr}: {e}");
                eprintln!("tailstream: cannot listen on {addr}: {e}");
                engine.shutdown();
                return 48;
            }
        }
    }
    for path in &unix_paths {
        match bind_unix_socket(path, config.file_permissions) {
            Ok(l) => listeners.push(conn::Listener::Unix(l, path.clone())),
            Err(e) => {
                let path = path.display();
                tracing::error!("cannot listen on {path}: {e}");
                eprintln!("tailstream: cannot listen on {path}: {e}");
                for file in socket_files(&listeners) {
                    let _ = std::fs::remove_file(file);
                }
                engine.shutdown();
                return 48;
            }
        }
    }
    if let Some(port) = config.http_port {
        let addr = format!("{}:{port}", config.http_bind_ip);
        match http::bind(&addr).await {
            Ok(listener) => {
                tracing::info!(target: "startup", component = "NETWORK", address = %addr, "HTTP listener for /metrics and /health");
                tokio::spawn(http::serve(listener, state.clone()));
            }
            Err(e) => {
                tracing::error!("cannot listen on {addr}: {e}");
                eprintln!("tailstream: cannot listen on {addr}: {e}");
                for file in socket_files(&listeners) {
                    let _ = std::fs::remove_file(file);
                }
                engine.shutdown();
                return 48;
            }
        }
    }
    let unix_socket_files = socket_files(&listeners);
    // mongod's line (its `port` and `ssl`), with the addresses as arrays: written
    // directly, as a tracing field cannot hold one.
    logging::emit(
        "I",
        "NETWORK",
        logging::ID_WAITING_FOR_CONNECTIONS,
        "listener",
        "Waiting for connections",
        bson::doc! {
            "port": i32::from(config.port),
            "ssl": if state.tls.acceptor().is_some() { "on" } else { "off" },
            "addresses": &tcp_addrs,
            "unixSockets": unix_paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            "dbpath": config.dbpath.display().to_string(),
            "ioThreads": config.io_threads() as i32,
        },
    );
    logging::started();
    for listener in listeners {
        let state = state.clone();
        tokio::spawn(async move { conn::accept_loop(listener, state).await });
    }
    {
        let state = state.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(tailstream_engine::cursor::IDLE_CHECK_PERIOD);
            loop {
                tick.tick().await;
                let n = state.engine.cursors.reap_idle(state.cursor_timeout());
                if n > 0 {
                    tracing::info!(closed = n, "closed idle cursors");
                }
            }
        });
    }
    wait_for_signal(&state).await;
    tracing::info!("shutting down");
    for path in &unix_socket_files {
        if let Err(e) = std::fs::remove_file(path) {
            tracing::warn!("cannot remove the socket file {}: {e}", path.display());
        }
    }
    engine.shutdown();
    0
}

/// Listens on a Unix domain socket at `path` with the file mode `mode`, as mongod
/// does: a file already there (left by a server that was killed) is removed first;
/// the caller has bound the TCP port before, so that file is not a running server's.
fn bind_unix_socket(
    path: &std::path::Path,
    mode: u32,
) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(std::io::Error::new(
                e.kind(),
                format!("cannot remove the old socket file: {e}"),
            ))
        }
    }
    let listener = tokio::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(listener)
}

/// The files of the Unix domain sockets among `listeners`.
fn socket_files(listeners: &[conn::Listener]) -> Vec<std::path::PathBuf> {
    listeners
        .iter()
        .filter_map(|l| match l {
            conn::Listener::Unix(_, path) => Some(path.clone()),
            conn::Listener::Tcp(_) => None,
        })
        .collect()
}

/// Until SIGTERM, SIGINT or the `shutdown` command.
async fn wait_for_signal(state: &ServerState) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    // mongod rotates its log on SIGUSR1.
    let mut usr1 = signal(SignalKind::user_defined1()).expect("SIGUSR1 handler");
    loop {
        tokio::select! {
            _ = term.recv() => return,
            _ = int.recv() => return,
            _ = state.shutdown_requested.notified() => return,
            _ = usr1.recv() => {
                if let Err(e) = logging::rotate() {
                    tracing::warn!("log rotation failed: {e}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::alloc::{GlobalAlloc, Layout};

    /// Every block honours its layout's alignment, through allocation, zeroed
    /// allocation and growth, and keeps its bytes when it grows.
    #[test]
    fn allocator_honours_alignment_and_contents() {
        let a = super::Mimalloc;
        for align in [1, 2, 4, 8, 16, 32, 64, 4096] {
            for size in [1, 7, 8, 24, 100, 1000, 1025, 1300, 5000, 70_000] {
                let layout = Layout::from_size_align(size, align).unwrap();
                unsafe {
                    let p = a.alloc(layout);
                    assert!(
                        !p.is_null() && (p as usize).is_multiple_of(align),
                        "{size} {align}"
                    );
                    std::ptr::write_bytes(p, 0xAB, size);
                    let grown = a.realloc(p, layout, size * 3);
                    assert!(
                        (grown as usize).is_multiple_of(align),
                        "realloc {size} {align}"
                    );
                    assert!((0..size).all(|i| *grown.add(i) == 0xAB));
                    a.dealloc(grown, Layout::from_size_align(size * 3, align).unwrap());
                    let z = a.alloc_zeroed(layout);
                    assert!(
                        (z as usize).is_multiple_of(align) && (0..size).all(|i| *z.add(i) == 0)
                    );
                    a.dealloc(z, layout);
                }
            }
        }
    }
}
