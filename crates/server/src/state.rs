//! State shared by every connection: configuration, the engine, counters.

use crate::config::Config;
use crate::sessions::RetryCache;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tailstream_engine::Engine;

/// `opcounters` of serverStatus.
#[derive(Default)]
pub struct OpCounters {
    pub insert: AtomicU64,
    pub query: AtomicU64,
    pub update: AtomicU64,
    pub delete: AtomicU64,
    pub getmore: AtomicU64,
    pub command: AtomicU64,
}

pub struct ServerState {
    pub config: Config,
    pub engine: Arc<Engine>,
    pub started: Instant,
    /// `topologyVersion.processId`: new on every start, so drivers notice restarts.
    pub process_id: bson::oid::ObjectId,
    pub next_connection_id: AtomicI64,
    pub current_connections: AtomicI64,
    pub total_connections: AtomicU64,
    pub retry_cache: RetryCache,
    /// Sessions' multi-document transactions.
    pub transactions: crate::transactions::Transactions,
    /// Snapshots of snapshot reads outside transactions.
    pub snapshots: crate::transactions::Snapshots,
    pub opcounters: OpCounters,
    /// Time and count of the commands on each collection (`top`).
    pub top: crate::top::Top,
    /// Index filters of query shapes (`planCacheSetFilter`).
    pub index_filters: crate::index_filters::IndexFilters,
    /// Server parameters settable at run time (setParameter).
    pub parameters: RwLock<bson::Document>,
    /// Fail points for drivers' test suites (only with enableTestCommands).
    pub fail_points: crate::commands::FailPoints,
    /// Sessions seen in commands' `lsid` (`$listLocalSessions`).
    pub local_sessions: crate::local_sessions::LocalSessions,
    /// The connection establishment rate limiter (off unless its parameter is set).
    pub ingress: crate::ingress::IngressLimiter,
    /// The database profiler (`profile` command, `<db>.system.profile`).
    pub profiler: crate::profiler::Profiler,
    /// serverStatus's network, latency and activity figures.
    pub metrics: crate::metrics::Metrics,
    /// Open connections and the commands they run (`currentOp`, `killOp`).
    pub current_ops: crate::current_op::Registry,
    /// The free-space floor for commands that add data.
    pub disk_space: crate::disk_space::DiskSpace,
    /// The default read and write concerns (`setDefaultRWConcern`).
    pub rw_defaults: crate::rw_defaults::RwDefaults,
    /// The `shutdown` command's request: the server stops as on SIGTERM.
    pub shutdown_requested: tokio::sync::Notify,
    /// TLS on the TCP listeners (`--tlsMode`; disabled by default, set by `main` once the
    /// options and files were read).
    pub tls: crate::tls::Tls,
    /// This server's member of a replica set of several members, once it is one.
    pub repl: crate::replset::ReplState,
    /// `__system@local`, the members' user, with `--keyFile` (set by `main`).
    pub system_user: Option<bson::Document>,
}

impl ServerState {
    pub fn new(config: Config, engine: Arc<Engine>) -> Result<ServerState, String> {
        let mut parameters = bson::doc! {
            "enableTestCommands": config.test_commands_enabled(),
            "requireApiVersion": false,
            "ttlMonitorEnabled": true,
            "ttlMonitorSleepSecs": 60,
            "cursorTimeoutMillis": 600_000i64,
            "internalQueryMaxBlockingSortMemoryUsageBytes":
                tailstream_engine::read::spill_sort::DEFAULT_MAX_SORT_BYTES as i64,
            "internalDocumentSourceGroupMaxMemoryBytes":
                tailstream_engine::query::pipeline::DEFAULT_MAX_GROUP_BYTES as i64,
            "maxBSONDepth": 100,
            "featureCompatibilityVersion": {"version": "7.0"},
            "transactionLifetimeLimitSeconds": 60,
            // The mechanisms clients may authenticate with (mongod's default set).
            "authenticationMechanisms": ["MONGODB-X509", "SCRAM-SHA-1", "SCRAM-SHA-256"],
            crate::ingress::ENABLED: false,
            crate::ingress::RATE_PER_SEC: i32::MAX,
            crate::ingress::BURST_CAPACITY_SECS: f64::MAX,
            crate::ingress::MAX_QUEUE_DEPTH: 0,
            "logLevel": 0,
            "quiet": config.quiet,
            crate::disk_space::PARAMETER: crate::disk_space::DEFAULT_MB,
        };
        for p in &config.set_parameter {
            let Some((k, v)) = p.split_once('=') else {
                return Err(format!("--setParameter takes name=value, got '{p}'"));
            };
            let value = match v {
                "true" => bson::Bson::Boolean(true),
                "false" => bson::Bson::Boolean(false),
                _ => match v.parse::<i64>() {
                    Ok(n) if k == "enableTestCommands" => bson::Bson::Boolean(n != 0),
                    Ok(n) if n >= i32::MIN as i64 && n <= i32::MAX as i64 => {
                        bson::Bson::Int32(n as i32)
                    }
                    Ok(n) => bson::Bson::Int64(n),
                    Err(_) => bson::Bson::String(v.to_string()),
                },
            };
            parameters.insert(k, value);
        }
        if let Some(version) = crate::fcv::load(&engine) {
            parameters.insert(
                "featureCompatibilityVersion",
                crate::fcv::parameter(&version),
            );
        }
        apply_engine_parameters(&parameters);
        let rw_defaults = crate::rw_defaults::RwDefaults::load(&engine);
        let slow_ms = config.slow_ms;
        Ok(ServerState {
            config,
            engine,
            rw_defaults,
            started: Instant::now(),
            process_id: bson::oid::ObjectId::new(),
            next_connection_id: AtomicI64::new(1),
            current_connections: AtomicI64::new(0),
            total_connections: AtomicU64::new(0),
            retry_cache: RetryCache::new(),
            transactions: Default::default(),
            snapshots: Default::default(),
            opcounters: OpCounters::default(),
            top: Default::default(),
            index_filters: Default::default(),
            parameters: RwLock::new(parameters),
            fail_points: Default::default(),
            local_sessions: Default::default(),
            ingress: Default::default(),
            profiler: crate::profiler::Profiler::new(slow_ms),
            metrics: Default::default(),
            current_ops: Default::default(),
            disk_space: Default::default(),
            shutdown_requested: Default::default(),
            tls: Default::default(),
            repl: Default::default(),
            system_user: None,
        })
    }

    /// The most bytes a find's blocking sort holds in memory before it spills:
    /// `internalQueryMaxBlockingSortMemoryUsageBytes` (setParameter; a value that is not
    /// a positive number keeps mongod's 100 MiB).
    pub fn max_blocking_sort_bytes(&self) -> Option<usize> {
        self.positive_parameter("internalQueryMaxBlockingSortMemoryUsageBytes")
    }

    /// The most bytes an aggregation's `$group` holds before it spills:
    /// `internalDocumentSourceGroupMaxMemoryBytes` (setParameter; a value that is not a
    /// positive number keeps mongod's 100 MiB).
    pub fn max_group_bytes(&self) -> Option<usize> {
        self.positive_parameter("internalDocumentSourceGroupMaxMemoryBytes")
    }

    /// Parameter `name` when it is a positive number (None: not, or not set).
    fn positive_parameter(&self, name: &str) -> Option<usize> {
        self.parameters
            .read()
            .get(name)
            .and_then(tailstream_engine::find::as_i64)
            .filter(|b| *b > 0)
            .and_then(|b| usize::try_from(b).ok())
    }

    /// How long a cursor may stay idle before it is closed: the `cursorTimeoutMillis`
    /// parameter (set at startup or with setParameter), mongod's 10 minutes by default;
    /// a value that is not a positive number keeps the default.
    pub fn cursor_timeout(&self) -> std::time::Duration {
        self.parameters
            .read()
            .get("cursorTimeoutMillis")
            .and_then(tailstream_engine::find::as_i64)
            .filter(|ms| *ms > 0)
            .map_or(tailstream_engine::cursor::IDLE_TIMEOUT, |ms| {
                std::time::Duration::from_millis(ms as u64)
            })
    }

    pub fn new_connection_id(&self) -> i64 {
        self.next_connection_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// Pushes parameters the engine reads from globals (TTL monitor settings).
/// The `requireApiVersion` parameter, read by every command (kept here so that read
/// is one atomic load, not a lookup in the parameter document under its lock).
pub static REQUIRE_API_VERSION: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

pub fn apply_engine_parameters(p: &bson::Document) {
    use tailstream_engine::ttl;
    REQUIRE_API_VERSION.store(
        matches!(p.get("requireApiVersion"), Some(bson::Bson::Boolean(true))),
        Ordering::Relaxed,
    );
    if let Some(v) = p
        .get("ttlMonitorSleepSecs")
        .and_then(tailstream_engine::find::as_i64)
    {
        ttl::TTL_MONITOR_SLEEP_SECS.store(v.max(1) as u64, Ordering::Relaxed);
    }
    if let Some(mb) = p
        .get(crate::disk_space::PARAMETER)
        .and_then(tailstream_engine::find::as_i64)
    {
        crate::disk_space::MIN_FREE_BYTES.store(mb.max(0) as u64 * 1024 * 1024, Ordering::Relaxed);
    }
    if let Some(v) = p.get("ttlMonitorEnabled").and_then(|v| v.as_bool()) {
        ttl::TTL_MONITOR_ENABLED.store(v, Ordering::Relaxed);
    }
}
