//! `tailstream`: a MongoDB-wire-protocol server built for change notification.

mod commands;
mod config;
mod conn;
mod ingress;
mod local_sessions;
mod profiler;
mod sessions;
mod state;
mod transactions;

use clap::Parser;
use config::Config;
use state::ServerState;
use std::sync::Arc;
use tailstream_engine::{Engine, EngineOptions};
use tokio::net::TcpListener;

// Every request and event builds and drops many small BSON values; glibc's malloc
// spent more time consolidating free chunks than the server spent on the events.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    disable_transparent_huge_pages();
    let config = Config::parse();
    init_logging(&config);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.io_threads())
        .enable_all()
        .thread_name("tailstream")
        .thread_stack_size(8 << 20)
        .build()
        .expect("tokio runtime");
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
    // Even --quiet keeps the startup lines: launchers wait for "Waiting for connections".
    let default = if config.quiet {
        "warn,startup=info"
    } else {
        "info"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("TAILSTREAM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    match &config.logpath {
        Some(path) => match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            Ok(file) => builder
                .with_ansi(false)
                .with_writer(std::sync::Mutex::new(file))
                .init(),
            Err(e) => {
                eprintln!("cannot open log file {}: {e}", path.display());
                std::process::exit(1);
            }
        },
        None => {
            use std::io::IsTerminal;
            builder
                .with_ansi(std::io::stderr().is_terminal())
                .with_writer(std::io::stderr)
                .init()
        }
    }
}

async fn run(config: Config) -> i32 {
    let engine = match Engine::open(EngineOptions {
        dbpath: config.dbpath.clone(),
        oplog_size_bytes: config.oplog_size_mb() * 1024 * 1024,
    }) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("{}", e.message);
            eprintln!("tailstream: {}", e.message);
            return 100;
        }
    };
    let state = match ServerState::new(config.clone(), engine.clone()) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            eprintln!("tailstream: {e}");
            return 2;
        }
    };
    tailstream_engine::ttl::spawn(&engine);
    let addrs: Vec<String> = if config.bind_ip_all {
        vec![format!("0.0.0.0:{}", config.port)]
    } else {
        config
            .bind_ip
            .split(',')
            .map(|ip| ip.trim())
            .filter(|ip| !ip.is_empty())
            .map(|ip| {
                if ip.contains(':') {
                    format!("[{ip}]:{}", config.port)
                } else {
                    format!("{ip}:{}", config.port)
                }
            })
            .collect()
    };
    let mut listeners = Vec::new();
    for addr in &addrs {
        match TcpListener::bind(addr).await {
            Ok(l) => listeners.push(l),
            Err(e) => {
                tracing::error!("cannot listen on {addr}: {e}");
                eprintln!("tailstream: cannot listen on {addr}: {e}");
                engine.shutdown();
                return 48;
            }
        }
    }
    tracing::info!(target: "startup", addrs = ?addrs, dbpath = %config.dbpath.display(), io_threads = config.io_threads(), "Waiting for connections");
    for listener in listeners {
        let state = state.clone();
        tokio::spawn(async move { conn::accept_loop(listener, state).await });
    }
    {
        let state = state.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(30));
            loop {
                tick.tick().await;
                let n = state
                    .engine
                    .cursors
                    .reap_idle(tailstream_engine::cursor::IDLE_TIMEOUT);
                if n > 0 {
                    tracing::info!(closed = n, "closed idle cursors");
                }
            }
        });
    }
    wait_for_signal().await;
    tracing::info!("shutting down");
    engine.shutdown();
    0
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
}
