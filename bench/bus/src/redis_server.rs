//! The redis-server the benchmark starts for the Redis rows (Tailstream is
//! started by tailstream-bench-common, as in the other benchmarks).

use std::path::{Path, PathBuf};

use anyhow::Result;
use tailstream_bench_common::server::{free_port, fresh_dir, ServerProc};

/// redis-server on $PATH.
pub fn find() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("redis-server"))
        .find(|p| p.is_file())
}

/// redis-server on a free port of 127.0.0.1, its working directory a fresh
/// directory under `parent`. `appendfsync`: None = no persistence at all (no
/// RDB snapshots, no AOF); Some("everysec" | "always") = AOF on with that policy
/// (and still no RDB snapshots).
pub fn start(bin: PathBuf, parent: &Path, appendfsync: Option<&str>) -> Result<ServerProc> {
    let dir = fresh_dir(parent, "tailstream-bench-bus-redis")?;
    let port = free_port()?;
    let mut args: Vec<String> = vec![
        "--port".into(),
        port.to_string(),
        "--bind".into(),
        "127.0.0.1".into(),
        "--dir".into(),
        dir.display().to_string(),
        "--daemonize".into(),
        "no".into(),
        "--save".into(),
        "".into(),
        "--loglevel".into(),
        "warning".into(),
    ];
    match appendfsync {
        None => args.extend(["--appendonly".into(), "no".into()]),
        Some(policy) => args.extend([
            "--appendonly".into(),
            "yes".into(),
            "--appendfsync".into(),
            policy.into(),
        ]),
    }
    ServerProc::spawn("redis-server", bin, dir, port, &args)
}
