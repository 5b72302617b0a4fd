//! The server's log, as mongod writes it since 4.4: one JSON document per line,
//!
//! `{"t":{"$date":"2026-11-26T19:00:00.123Z"},"s":"I","c":"NETWORK","id":23016,"ctx":"listener","msg":"Waiting for connections","attr":{"port":27017}}`
//!
//! with the severity (`F`, `E`, `W`, `I`, `D1`..), the component, a numeric id per log
//! statement, the thread or connection (`ctx`), a constant message and its attributes
//! (relaxed extended JSON), so that tools that read mongod's logs (and `jq`) read these.
//! `--logFormat plain` keeps the human-oriented text lines instead. Either way the last
//! lines are also kept in memory for `getLog` (`ram_log`), as JSON lines, as mongod
//! returns them.
//!
//! Two ways in: the `tracing` events of the whole server (through [`MongodLayer`]), and
//! [`emit`] for lines whose attributes are documents (the slow-operation line).

pub mod ram_log;

use bson::{doc, Bson, Document};
use ram_log::RamLog;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

/// `getLog: "global"`.
pub static GLOBAL: RamLog = RamLog::new(ram_log::GLOBAL_LINES);
/// `getLog: "startupWarnings"`: warnings logged before the server listened.
pub static STARTUP_WARNINGS: RamLog = RamLog::new(ram_log::STARTUP_WARNING_LINES);
/// Set once the server listens: later warnings are not startup warnings.
static STARTED: AtomicBool = AtomicBool::new(false);
/// Where lines go, set once by [`init`]; before it (tests, tools), nowhere but memory.
static OUTPUT: OnceLock<Output> = OnceLock::new();

/// mongod's log id of the line saying the server listens.
pub const ID_WAITING_FOR_CONNECTIONS: i64 = 23016;
/// mongod's log ids of a connection's start and end.
pub const ID_CONNECTION_ACCEPTED: i64 = 22943;
pub const ID_CONNECTION_ENDED: i64 = 22944;
/// mongod's log id of a slow operation's line.
pub const ID_SLOW_QUERY: i64 = 51803;

/// What `logRotate` (and SIGUSR1) does to a log file, as mongod's `--logRotate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Rotate {
    /// The file is renamed `<path>.<UTC time>` and a new one opened (mongod's default).
    Rename,
    /// The file is closed and opened again (after an outside tool such as logrotate(8)
    /// moved it).
    Reopen,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// mongod's structured lines (the default, as mongod has had since 4.4).
    Json,
    /// Text lines for a person at a terminal.
    Plain,
}

struct Output {
    format: Format,
    writer: parking_lot::Mutex<Box<dyn Write + Send>>,
    /// The log file (None: standard error, which is not rotated).
    path: Option<std::path::PathBuf>,
    rotate: Rotate,
}

/// Sends the log to `writer` in `format`; `path` is the file it writes, if any.
pub fn init(
    format: Format,
    writer: Box<dyn Write + Send>,
    path: Option<std::path::PathBuf>,
    rotate: Rotate,
) {
    let _ = OUTPUT.set(Output {
        format,
        writer: parking_lot::Mutex::new(writer),
        path,
        rotate,
    });
}

/// Opens the log file for appending.
pub fn open_log_file(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

/// `logRotate` and SIGUSR1: with a log file, renames it `<path>.<UTC time>` (or, with
/// `--logRotate reopen`, leaves the moving to an outside tool) and goes on in a new
/// file; with the log on standard error, nothing to do.
pub fn rotate() -> Result<(), String> {
    let Some(out) = OUTPUT.get() else {
        return Ok(());
    };
    let Some(path) = &out.path else { return Ok(()) };
    let mut writer = out.writer.lock();
    let _ = writer.flush();
    if out.rotate == Rotate::Rename {
        let stamp = chrono::Utc::now().format("%Y-%m-%dT%H-%M-%S");
        let mut renamed = path.clone().into_os_string();
        renamed.push(format!(".{stamp}"));
        std::fs::rename(path, &renamed)
            .map_err(|e| format!("renaming {} failed: {e}", path.display()))?;
    }
    let file =
        open_log_file(path).map_err(|e| format!("opening {} failed: {e}", path.display()))?;
    *writer = Box::new(file);
    drop(writer);
    tracing::info!(target: "startup", id = 23166, component = "CONTROL", "Log rotation initiated");
    Ok(())
}

/// The server listens: warnings from now on are not startup warnings.
pub fn started() {
    STARTED.store(true, Ordering::SeqCst);
}

/// One log line: kept for `getLog`, and written out.
pub fn emit(severity: &str, component: &str, id: i64, ctx: &str, msg: &str, attr: Document) {
    let startup_warning = severity == "W" && !STARTED.load(Ordering::SeqCst);
    let json = json_line(severity, component, id, ctx, msg, &attr, startup_warning);
    GLOBAL.push(&json);
    if startup_warning {
        STARTUP_WARNINGS.push(&json);
    }
    let Some(out) = OUTPUT.get() else { return };
    let mut w = out.writer.lock();
    // A log that cannot be written is not worth failing the operation for.
    let _ = match out.format {
        Format::Json => writeln!(w, "{json}"),
        Format::Plain => writeln!(w, "{}", plain_line(severity, component, msg, &attr)),
    };
    let _ = w.flush();
}

/// The `getLog` command: `"*"` names the logs; `"global"` and `"startupWarnings"` give
/// their newest lines (JSON strings, as mongod's) and how many were ever written.
pub fn get_log(cmd: &Document) -> tailstream_engine::query::error::Result<Document> {
    use tailstream_engine::query::error::{codes, Error};
    /// mongod's code for a required field given as null.
    const MISSING_REQUIRED_FIELD: i32 = 40414;
    let name = match tailstream_engine::query::args::Fields::command(cmd).opt_str("getLog")? {
        Some(name) => name,
        None => {
            return Err(Error::new(
                MISSING_REQUIRED_FIELD,
                "BSON field 'getLog.getLog' is missing but a required field",
            ))
        }
    };
    let log = match name {
        "*" => return Ok(doc! {"names": ["global", "startupWarnings"]}),
        "global" => &GLOBAL,
        "startupWarnings" => &STARTUP_WARNINGS,
        other => {
            return Err(Error::new(
                codes::OPERATION_FAILED,
                format!("No log named '{other}'"),
            ))
        }
    };
    let (total, lines) = log.snapshot();
    Ok(doc! {
        "totalLinesWritten": i64::try_from(total).unwrap_or(i64::MAX),
        "log": lines,
    })
}

/// The line in mongod's layout. Relaxed extended JSON, as mongod's log writes BSON. A
/// warning before the server listens carries mongod's `tags: ["startupWarnings"]`.
fn json_line(
    severity: &str,
    component: &str,
    id: i64,
    ctx: &str,
    msg: &str,
    attr: &Document,
    startup_warning: bool,
) -> String {
    let mut line = doc! {
        "t": bson::DateTime::now(),
        "s": severity,
        "c": component,
        "id": id,
        "ctx": ctx,
        "msg": msg,
    };
    if !attr.is_empty() {
        line.insert("attr", attr.clone());
    }
    if startup_warning {
        line.insert("tags", vec!["startupWarnings"]);
    }
    Bson::Document(line).into_relaxed_extjson().to_string()
}

fn plain_line(severity: &str, component: &str, msg: &str, attr: &Document) -> String {
    let now = bson::DateTime::now()
        .try_to_rfc3339_string()
        .unwrap_or_default();
    let mut line = format!("{now} {severity} {component:<8} {msg}");
    if !attr.is_empty() {
        line.push(' ');
        line.push_str(
            &Bson::Document(attr.clone())
                .into_relaxed_extjson()
                .to_string(),
        );
    }
    line
}

/// mongod's severity letters; debug levels count from 1.
fn severity(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "E",
        Level::WARN => "W",
        Level::INFO => "I",
        Level::DEBUG => "D1",
        Level::TRACE => "D2",
    }
}

/// mongod's component for an event, from where it was logged.
fn component(target: &str) -> &'static str {
    const BY_PREFIX: &[(&str, &str)] = &[
        ("startup", "CONTROL"),
        ("tailstream_server::conn", "NETWORK"),
        ("tailstream_server::ingress", "NETWORK"),
        ("tailstream_server::profiler", "COMMAND"),
        ("tailstream_server::commands", "COMMAND"),
        ("tailstream_server::current_op", "COMMAND"),
        ("tailstream_server::disk_space", "STORAGE"),
        ("tailstream_server::logging", "CONTROL"),
        ("tailstream_engine::core::durability", "JOURNAL"),
        ("tailstream_engine::write::ttl", "INDEX"),
        ("tailstream_engine::oplog", "STORAGE"),
        ("tailstream_engine::catalog", "STORAGE"),
        ("tailstream_engine", "STORAGE"),
        ("tailstream_storage", "STORAGE"),
        ("tailstream", "CONTROL"),
    ];
    BY_PREFIX
        .iter()
        .find(|(prefix, _)| target.starts_with(prefix))
        .map_or("-", |(_, c)| c)
}

/// The server library's crate name and the binary's, as module paths begin.
const LIBRARY_CRATE: &str = "tailstream_server";
const BINARY_CRATE: &str = "tailstream";

/// A log statement's id when it does not give one: a hash of where it is (its
/// module and line), in mongod's range of ids (below 10,000,000).
fn callsite_id(meta: &tracing::Metadata<'_>) -> i64 {
    // FNV-1a: stable across builds and platforms, unlike the standard library's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    // The server's modules hash under the binary's crate name, where they were until
    // the server became a library (`tailstream_server`): their ids stay as they were.
    let path = meta.module_path().unwrap_or("");
    let path = match path.strip_prefix(LIBRARY_CRATE) {
        Some(rest) => format!("{BINARY_CRATE}{rest}"),
        None => path.to_string(),
    };
    let key = format!("{path}:{}", meta.line().unwrap_or(0));
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % 10_000_000) as i64
}

/// The `tracing` layer that turns the server's events into log lines.
pub struct MongodLayer;

impl<S: Subscriber> Layer<S> for MongodLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let ctx = match fields.conn {
            Some(n) => format!("conn{n}"),
            None => std::thread::current().name().unwrap_or("-").to_string(),
        };
        emit(
            severity(meta.level()),
            fields.component.unwrap_or_else(|| component(meta.target())),
            fields.id.unwrap_or_else(|| callsite_id(meta)),
            &ctx,
            &fields.msg,
            fields.attr,
        );
    }
}

/// An event's fields: `message` is the line's `msg`; `id`, `component` and `conn` (the
/// connection's number, shown as `ctx`) set the line's own fields; the rest are `attr`.
#[derive(Default)]
struct Fields {
    msg: String,
    id: Option<i64>,
    component: Option<&'static str>,
    conn: Option<u64>,
    attr: Document,
}

impl Visit for Fields {
    fn record_i64(&mut self, field: &Field, value: i64) {
        match field.name() {
            "id" => self.id = Some(value),
            "conn" => self.conn = u64::try_from(value).ok(),
            name => {
                self.attr.insert(name, value);
            }
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "id" => self.id = i64::try_from(value).ok(),
            "conn" => self.conn = Some(value),
            name => {
                let v = i64::try_from(value).map_or(Bson::Double(value as f64), Bson::Int64);
                self.attr.insert(name, v);
            }
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.attr.insert(field.name(), value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.attr.insert(field.name(), value);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.msg = value.to_string(),
            "component" => self.component = known_component(value),
            name => {
                self.attr.insert(name, value);
            }
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        match field.name() {
            "message" => self.msg = text,
            name => {
                self.attr.insert(name, text);
            }
        }
    }
}

/// mongod's component names (a `component` field must be one of them).
fn known_component(name: &str) -> Option<&'static str> {
    const COMPONENTS: &[&str] = &[
        "ACCESS", "COMMAND", "CONTROL", "ELECTION", "FTDC", "GEO", "INDEX", "INITSYNC", "JOURNAL",
        "NETWORK", "QUERY", "RECOVERY", "REPL", "REPL_HB", "ROLLBACK", "SHARDING", "STORAGE",
        "TXN", "WRITE",
    ];
    COMPONENTS.iter().copied().find(|c| *c == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_has_mongods_fields_in_mongods_order() {
        let line = json_line(
            "I",
            "NETWORK",
            23016,
            "listener",
            "Waiting for connections",
            &doc! {"port": 27017},
            false,
        );
        // The line is extended JSON: read it back as a driver would.
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        let parsed = match Bson::try_from(value).unwrap() {
            Bson::Document(d) => d,
            other => panic!("not a document: {other}"),
        };
        let keys: Vec<&str> = parsed.keys().map(String::as_str).collect();
        assert_eq!(keys, ["t", "s", "c", "id", "ctx", "msg", "attr"]);
        assert!(matches!(parsed.get("t"), Some(Bson::DateTime(_))), "{line}");
        assert_eq!(parsed.get_str("s").unwrap(), "I");
        assert_eq!(parsed.get("id"), Some(&Bson::Int32(23016)), "a JSON number");
        assert_eq!(parsed.get_document("attr").unwrap(), &doc! {"port": 27017});
        let bare = json_line("W", "-", 1, "main", "m", &Document::new(), false);
        assert!(!bare.contains("attr") && !bare.contains("tags"), "{bare}");
        let warning = json_line("W", "CONTROL", 22120, "main", "m", &Document::new(), true);
        assert!(
            warning.ends_with(r#""tags":["startupWarnings"]}"#),
            "{warning}"
        );
    }

    #[test]
    fn components_follow_the_module_that_logged() {
        assert_eq!(component("tailstream_server::conn"), "NETWORK");
        assert_eq!(component("tailstream_server::state"), "CONTROL");
        assert_eq!(component("tailstream"), "CONTROL");
        assert_eq!(component("tailstream_engine::core::durability"), "JOURNAL");
        assert_eq!(component("tailstream_engine::write::ttl"), "INDEX");
        assert_eq!(component("tailstream_engine::lib"), "STORAGE");
        assert_eq!(component("startup"), "CONTROL");
        assert_eq!(component("hyper"), "-");
        assert_eq!(known_component("REPL"), Some("REPL"));
        assert_eq!(known_component("repl"), None);
    }
}
