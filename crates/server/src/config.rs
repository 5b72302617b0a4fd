//! Command-line options, spelled as mongod spells them.

use clap::Parser;
use std::path::PathBuf;

/// Connection threads when `--ioThreads` is not given (see `Config::io_threads`).
const DEFAULT_IO_THREADS: usize = 1;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "tailstream",
    version,
    about = "A MongoDB-compatible server built for change notification",
    // An option given twice takes its last value: the command line's over the
    // configuration file's (see `config_file`).
    args_override_self = true
)]
pub struct Config {
    /// mongod's YAML configuration file; options on the command line override it.
    /// (Read before the other options, by `config_file::expand`.)
    #[arg(short = 'f', long = "config")]
    pub config_file: Option<PathBuf>,
    /// TCP port to listen on.
    #[arg(long, default_value_t = 27017)]
    pub port: u16,
    /// Address(es) to bind, comma-separated.
    #[arg(long = "bind_ip", default_value = "127.0.0.1")]
    pub bind_ip: String,
    /// Bind every interface (as mongod's --bind_ip_all).
    #[arg(long = "bind_ip_all", default_value_t = false)]
    pub bind_ip_all: bool,
    /// Do not listen on the Unix domain socket.
    #[arg(long = "nounixsocket", default_value_t = false)]
    pub no_unix_socket: bool,
    /// Directory of the Unix domain socket `mongodb-<port>.sock`.
    #[arg(long = "unixSocketPrefix", default_value = "/tmp")]
    pub unix_socket_prefix: PathBuf,
    /// Permissions of the Unix domain socket file, in octal.
    #[arg(long = "filePermissions", default_value = "0700", value_parser = parse_file_permissions)]
    pub file_permissions: u32,
    /// Data directory (created if missing).
    #[arg(long, default_value = "./data/db")]
    pub dbpath: PathBuf,
    /// Oplog size in megabytes (default as mongod: 5% of the free disk space, 990 MB to 50 GB).
    #[arg(long = "oplogSize")]
    pub oplog_size_mb: Option<u64>,
    /// Replica set name this server presents as the single primary of.
    #[arg(long = "replSet", default_value = "rs0")]
    pub repl_set: String,
    /// Write the log to this file instead of stderr.
    #[arg(long)]
    pub logpath: Option<PathBuf>,
    /// Log less.
    #[arg(long, default_value_t = false)]
    pub quiet: bool,
    /// What logRotate and SIGUSR1 do to the log file: `rename` it with the time (as
    /// mongod's default) or `reopen` it (after logrotate(8) moved it).
    #[arg(long = "logRotate", value_enum, default_value = "rename")]
    pub log_rotate: crate::logging::Rotate,
    /// The log's lines: mongod's structured JSON (`json`), or text (`plain`).
    #[arg(long = "logFormat", value_enum, default_value = "json")]
    pub log_format: crate::logging::Format,
    /// Operations slower than this (milliseconds) are logged, and profiled at level 1.
    #[arg(long = "slowms")]
    pub slow_ms: Option<i64>,
    /// Server parameters, `name=value` (repeatable), e.g. enableTestCommands=1.
    #[arg(long = "setParameter")]
    pub set_parameter: Vec<String>,
    /// Most simultaneous connections.
    #[arg(long = "maxConns", default_value_t = 10_000)]
    pub max_conns: usize,
    /// Require authentication and check every command's privileges (mongod's
    /// `--auth`, `security.authorization: enabled`).
    #[arg(long, default_value_t = false)]
    pub auth: bool,
    /// The replica set's shared key (mongod's `--keyFile`, `security.keyFile`): members
    /// authenticate to one another with it; it turns authorization on.
    #[arg(long = "keyFile")]
    pub key_file: Option<PathBuf>,
    /// Port of the HTTP listener serving `/metrics` and `/health` (off without it).
    #[arg(long = "httpPort")]
    pub http_port: Option<u16>,
    /// Address of the HTTP listener.
    #[arg(long = "httpBindIp", default_value = "127.0.0.1")]
    pub http_bind_ip: String,
    /// TLS on the TCP listeners: disabled, allowTLS, preferTLS or requireTLS (as mongod's).
    #[arg(long = "tlsMode", value_enum, default_value = "disabled")]
    pub tls_mode: crate::tls::Mode,
    /// PEM file with the server's certificate chain and its private key.
    #[arg(long = "tlsCertificateKeyFile")]
    pub tls_certificate_key_file: Option<PathBuf>,
    /// PEM file of the CA that client certificates must chain to (with it, clients are
    /// asked for a certificate).
    #[arg(long = "tlsCAFile")]
    pub tls_ca_file: Option<PathBuf>,
    /// With --tlsCAFile, let clients without a certificate connect.
    #[arg(
        long = "tlsAllowConnectionsWithoutCertificates",
        default_value_t = false
    )]
    pub tls_allow_connections_without_certificates: bool,
    /// Take client certificates that do not verify against --tlsCAFile (mongod warns).
    #[arg(long = "tlsAllowInvalidCertificates", default_value_t = false)]
    pub tls_allow_invalid_certificates: bool,
    /// Threads that run the connections, each serving its own (default: one).
    #[arg(long = "ioThreads", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub io_threads: Option<u16>,
}

/// `--filePermissions`: an octal mode such as `0700` or `777`.
fn parse_file_permissions(s: &str) -> Result<u32, String> {
    match u32::from_str_radix(s, 8) {
        Ok(mode) if mode <= 0o7777 => Ok(mode),
        _ => Err(format!("{s:?} is not a file mode in octal (such as 0700)")),
    }
}

impl Config {
    /// The addresses to listen on as TCP `ip:port`, and the Unix domain socket paths:
    /// mongod's `/tmp/mongodb-<port>.sock` unless `--nounixsocket`, and every
    /// `--bind_ip` entry that is a path (contains a `/`), as mongod takes those.
    pub fn listen_addrs(&self) -> (Vec<String>, Vec<PathBuf>) {
        let mut tcp = Vec::new();
        let mut unix = Vec::new();
        if self.bind_ip_all {
            tcp.push(format!("0.0.0.0:{}", self.port));
        } else {
            for ip in self.bind_ip.split(',').map(str::trim) {
                if ip.is_empty() {
                    continue;
                }
                if ip.contains('/') {
                    unix.push(PathBuf::from(ip));
                } else if ip.contains(':') {
                    tcp.push(format!("[{ip}]:{}", self.port));
                } else {
                    tcp.push(format!("{ip}:{}", self.port));
                }
            }
        }
        if !self.no_unix_socket {
            let path = self
                .unix_socket_prefix
                .join(format!("mongodb-{}.sock", self.port));
            if !unix.contains(&path) {
                unix.push(path);
            }
        }
        (tcp, unix)
    }

    /// The `host:port` this server calls itself in `hello` (`me`, `hosts`, `primary`).
    pub fn advertised_host(&self) -> String {
        let ip = self
            .bind_ip
            .split(',')
            .map(str::trim)
            .find(|ip| !ip.is_empty() && !ip.contains('/'))
            .unwrap_or("127.0.0.1");
        let ip = if self.bind_ip_all || ip == "0.0.0.0" || ip == "::" {
            "127.0.0.1"
        } else {
            ip
        };
        if ip.contains(':') {
            format!("[{ip}]:{}", self.port)
        } else {
            format!("{ip}:{}", self.port)
        }
    }

    /// The store the engine opens: the data directory and the oplog's cap.
    pub fn engine_options(&self) -> tailstream_engine::EngineOptions {
        tailstream_engine::EngineOptions {
            dbpath: self.dbpath.clone(),
            oplog_size_bytes: self.oplog_size_mb() * 1024 * 1024,
        }
    }

    /// The oplog cap in megabytes: as given, or mongod's default for the data directory's disk.
    pub fn oplog_size_mb(&self) -> u64 {
        if let Some(mb) = self.oplog_size_mb {
            return mb.max(1);
        }
        let probe = if self.dbpath.exists() {
            self.dbpath.clone()
        } else {
            std::path::PathBuf::from(".")
        };
        let free_mb = fs2::available_space(&probe).map(|b| b >> 20).unwrap_or(0);
        (free_mb / 20).clamp(990, 50 * 1024)
    }

    /// How many threads run the connections' tasks: as given, or one.
    ///
    /// Why one, not one per CPU (tokio's default) nor half the CPUs (the default until
    /// 2026-11-27): the connection threads' work per message is small (decode, a small
    /// insert, a getMore from memory, encode, send), and with several workers in one
    /// runtime every further thread made it hand woken tasks to parked siblings (a
    /// futex wake, a context switch, a migration); several threads are now runtimes of
    /// one worker each (`io_threads`), not yet measured on the 16-core device. Queries, updates, deletes and large inserts run on the blocking pool
    /// whatever this is. Measured on the 16-core device, the message bus's durable full
    /// speed row with the server on 4 cores: 3.64 s of server CPU per 100,000 messages
    /// with one thread against 9.51 with two and 9.68 with four, at 26,580 against
    /// 24,316 / 25,807 msg/s, context switches 0.56 M against 1.45 / 1.86 M; on 8 cores
    /// 3.40 against 8.19 / 9.93 s at equal throughput; 1,000 change streams 20% less
    /// CPU (bench/history/2026-11-27-device-iothreads.md). On 2 CPUs one thread was
    /// already the default and measured best (BENCHMARKS.md, message bus run 6).
    pub fn io_threads(&self) -> usize {
        match self.io_threads {
            Some(n) => usize::from(n),
            None => DEFAULT_IO_THREADS,
        }
    }

    /// The TLS options, for `tls::Tls::load`.
    pub fn tls_options(&self) -> crate::tls::Options<'_> {
        crate::tls::Options {
            mode: self.tls_mode,
            certificate_key_file: self.tls_certificate_key_file.as_deref(),
            ca_file: self.tls_ca_file.as_deref(),
            allow_connections_without_certificates: self.tls_allow_connections_without_certificates,
            allow_invalid_certificates: self.tls_allow_invalid_certificates,
        }
    }

    pub fn parameter(&self, name: &str) -> Option<&str> {
        self.set_parameter.iter().rev().find_map(|p| {
            p.split_once('=')
                .filter(|(k, _)| *k == name)
                .map(|(_, v)| v)
        })
    }

    pub fn test_commands_enabled(&self) -> bool {
        matches!(
            self.parameter("enableTestCommands"),
            Some("1") | Some("true")
        )
    }

    /// The arguments as getCmdLineOpts reports them.
    pub fn argv() -> Vec<String> {
        std::env::args().collect()
    }
}
