//! `--config <file>` (`-f`): mongod's YAML configuration file. Its settings become the
//! command-line options they stand for, placed before the ones given on the command
//! line, which therefore win (as mongod lets the command line override the file).
//!
//! The layout is mongod's (`net`, `storage`, `replication`, `systemLog`,
//! `operationProfiling`, `setParameter`): a file written for mongod starts Tailstream
//! with the same port, paths and parameters. A setting mongod has but that means nothing
//! here (the storage engine's own tuning, a journal that cannot be turned off) is
//! ignored with a warning on stderr; one mongod does not know is an error, as mongod
//! makes it ("Unrecognized option: ...", exit code 2). The YAML parser is the
//! `yaml-rust2` crate (maintained, no unsafe code), not a hand-written one.

use std::ffi::OsString;
use yaml_rust2::{Yaml, YamlLoader};

/// mongod's settings that Tailstream accepts and ignores (mongod's defaults hold here,
/// or the engine has no such knob), each with why.
const IGNORED: &[(&str, &str)] = &[
    ("storage.engine", "the storage engine is RocksDB"),
    ("storage.wiredTiger", "the storage engine is RocksDB"),
    (
        "storage.directoryPerDB",
        "one RocksDB store holds every database",
    ),
    (
        "storage.syncPeriodSecs",
        "plain writes reach the disk within 100 ms",
    ),
    ("systemLog.logAppend", "the log file is always appended to"),
    ("systemLog.timeStampFormat", "log times are ISO 8601 in UTC"),
    ("systemLog.verbosity", "use TAILSTREAM_LOG=debug for more"),
    ("processManagement.timeZoneInfo", "time zones come built in"),
    ("processManagement.pidFilePath", "no pid file is written"),
    (
        "net.compression",
        "snappy, zlib and zstd are always offered",
    ),
    ("net.ipv6", "the addresses in bindIp decide"),
];

/// The command line with the file's settings spliced in where `--config`/`-f` stood.
pub fn expand(argv: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let Some(pos) = argv
        .iter()
        .position(|a| a == "--config" || a == "-f" || a.to_string_lossy().starts_with("--config="))
    else {
        return Ok(argv);
    };
    let (path, taken) = match argv[pos].to_string_lossy().strip_prefix("--config=") {
        Some(p) => (p.to_string(), 1),
        None => match argv.get(pos + 1) {
            Some(p) => (p.to_string_lossy().into_owned(), 2),
            None => return Err("--config needs a file".into()),
        },
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("Error reading config file: {path}: {e}"))?;
    let mut expanded: Vec<OsString> = argv[..1].to_vec();
    // Kept, for getCmdLineOpts' `parsed.config`.
    expanded.extend([OsString::from("--config"), OsString::from(&path)]);
    expanded.extend(args_from_yaml(&text)?.into_iter().map(OsString::from));
    expanded.extend(argv[1..pos].iter().cloned());
    expanded.extend(argv[pos + taken..].iter().cloned());
    Ok(expanded)
}

/// The command-line options a configuration file stands for.
pub fn args_from_yaml(text: &str) -> Result<Vec<String>, String> {
    let docs = YamlLoader::load_from_str(text)
        .map_err(|e| format!("Error parsing YAML config file: {e}"))?;
    let mut args = Vec::new();
    let Some(root) = docs.first() else {
        return Ok(args);
    };
    let mut settings = Vec::new();
    flatten("", root, &mut settings)?;
    for (key, value) in settings {
        setting(&key, &value, &mut args)?;
    }
    Ok(args)
}

/// A YAML scalar as the text the option takes.
enum Value {
    Text(String),
    Bool(bool),
}

/// Dotted keys and their scalars (`setParameter`'s map kept as `setParameter.<name>`).
fn flatten(prefix: &str, node: &Yaml, out: &mut Vec<(String, Value)>) -> Result<(), String> {
    match node {
        Yaml::Hash(map) => {
            for (k, v) in map {
                let Yaml::String(k) = k else {
                    return Err(format!(
                        "Error parsing YAML config file: a key under '{prefix}' is not a string"
                    ));
                };
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                if let Some((ignored, why)) = IGNORED.iter().find(|(i, _)| key == *i) {
                    eprintln!("tailstream: ignoring {ignored} in the config file: {why}");
                    continue;
                }
                flatten(&key, v, out)?;
            }
            Ok(())
        }
        Yaml::Boolean(b) => {
            out.push((prefix.to_string(), Value::Bool(*b)));
            Ok(())
        }
        Yaml::String(s) | Yaml::Real(s) => {
            out.push((prefix.to_string(), Value::Text(s.clone())));
            Ok(())
        }
        Yaml::Integer(n) => {
            out.push((prefix.to_string(), Value::Text(n.to_string())));
            Ok(())
        }
        Yaml::Array(items) => {
            // bindIp may be given as a list; mongod takes comma-separated text.
            let parts: Vec<String> = items
                .iter()
                .map(|i| match i {
                    Yaml::String(s) => Ok(s.clone()),
                    Yaml::Integer(n) => Ok(n.to_string()),
                    _ => Err(format!(
                        "Error parsing YAML config file: {prefix} holds a non-scalar"
                    )),
                })
                .collect::<Result<_, _>>()?;
            out.push((prefix.to_string(), Value::Text(parts.join(","))));
            Ok(())
        }
        Yaml::Null => Ok(()),
        _ => Err(format!(
            "Error parsing YAML config file: unreadable value at {prefix}"
        )),
    }
}

/// One setting as its command-line option(s).
fn setting(key: &str, value: &Value, args: &mut Vec<String>) -> Result<(), String> {
    let text = || match value {
        Value::Text(t) => Ok(t.clone()),
        Value::Bool(b) => Err(format!(
            "Bad value for {key}: {b} (a number or text expected)"
        )),
    };
    let flag = |on_flag: &str, args: &mut Vec<String>, invert: bool| -> Result<(), String> {
        match value {
            Value::Bool(b) => {
                if *b != invert {
                    args.push(on_flag.to_string());
                }
                Ok(())
            }
            Value::Text(t) => Err(format!("Bad value for {key}: {t} (true or false expected)")),
        }
    };
    let option = |name: &str, args: &mut Vec<String>| -> Result<(), String> {
        args.push(name.to_string());
        args.push(text()?);
        Ok(())
    };
    match key {
        "net.port" => option("--port", args),
        "net.bindIp" => option("--bind_ip", args),
        "net.bindIpAll" => flag("--bind_ip_all", args, false),
        "net.maxIncomingConnections" => option("--maxConns", args),
        "net.unixDomainSocket.enabled" => flag("--nounixsocket", args, true),
        "net.unixDomainSocket.pathPrefix" => option("--unixSocketPrefix", args),
        "net.unixDomainSocket.filePermissions" => option("--filePermissions", args),
        "net.tls.mode" => option("--tlsMode", args),
        "net.tls.certificateKeyFile" => option("--tlsCertificateKeyFile", args),
        "net.tls.CAFile" => option("--tlsCAFile", args),
        "net.tls.allowConnectionsWithoutCertificates" => {
            flag("--tlsAllowConnectionsWithoutCertificates", args, false)
        }
        "net.tls.allowInvalidCertificates" => flag("--tlsAllowInvalidCertificates", args, false),
        "storage.dbPath" => option("--dbpath", args),
        "replication.replSetName" => option("--replSet", args),
        "replication.oplogSizeMB" => option("--oplogSize", args),
        "systemLog.quiet" => flag("--quiet", args, false),
        "systemLog.path" => option("--logpath", args),
        "systemLog.logRotate" => option("--logRotate", args),
        "systemLog.destination" => match text()?.as_str() {
            // With `file`, `path` says where; the console is the default.
            "file" | "console" => Ok(()),
            other => Err(format!("Bad value for systemLog.destination: {other} (file or console)")),
        },
        "operationProfiling.slowOpThresholdMs" => option("--slowms", args),
        "security.authorization" => match text()?.as_str() {
            "enabled" => {
                args.push("--auth".into());
                Ok(())
            }
            "disabled" => Ok(()),
            other => Err(format!(
                "Invalid value for security.authorization: {other} (enabled or disabled)"
            )),
        },
        "security.keyFile" => option("--keyFile", args),
        "operationProfiling.mode" => match text()?.as_str() {
            "off" => Ok(()),
            other => Err(format!(
                "operationProfiling.mode: {other} is not supported: set a database's level with the profile command"
            )),
        },
        _ if key.starts_with("setParameter.") => {
            let name = &key["setParameter.".len()..];
            let v = match value {
                Value::Text(t) => t.clone(),
                Value::Bool(b) => b.to_string(),
            };
            args.push("--setParameter".into());
            args.push(format!("{name}={v}"));
            Ok(())
        }
        _ if key.starts_with("security") => Err(format!(
            "{key}: not supported yet (of security, only authorization and keyFile are)"
        )),
        _ if key.starts_with("processManagement.fork") => {
            Err("processManagement.fork: run the server under a service manager instead".into())
        }
        _ => Err(format!("Unrecognized option: {key}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mongod_config_file_becomes_options() {
        let args = args_from_yaml(
            "# as mongod.conf\n\
             storage:\n  dbPath: /var/lib/tailstream\n  engine: wiredTiger\n\
             systemLog:\n  destination: file\n  path: /var/log/ts.log\n  logAppend: true\n  quiet: true\n\
             net:\n  port: 27018\n  bindIp: [127.0.0.1, 10.0.0.5]\n  unixDomainSocket:\n    enabled: false\n\
             replication:\n  replSetName: rs1\n  oplogSizeMB: 2048\n\
             operationProfiling:\n  slowOpThresholdMs: 250\n\
             setParameter:\n  enableTestCommands: 1\n  ttlMonitorSleepSecs: 5\n",
        )
        .unwrap();
        assert_eq!(
            args,
            [
                "--dbpath",
                "/var/lib/tailstream",
                "--logpath",
                "/var/log/ts.log",
                "--quiet",
                "--port",
                "27018",
                "--bind_ip",
                "127.0.0.1,10.0.0.5",
                "--nounixsocket",
                "--replSet",
                "rs1",
                "--oplogSize",
                "2048",
                "--slowms",
                "250",
                "--setParameter",
                "enableTestCommands=1",
                "--setParameter",
                "ttlMonitorSleepSecs=5",
            ]
        );
    }

    #[test]
    fn net_tls_becomes_the_tls_options() {
        let args = args_from_yaml(
            "net:\n  tls:\n    mode: requireTLS\n    certificateKeyFile: /etc/ssl/ts.pem\n    \
             CAFile: /etc/ssl/ca.pem\n    allowConnectionsWithoutCertificates: true\n    \
             allowInvalidCertificates: false\n",
        )
        .unwrap();
        assert_eq!(
            args,
            [
                "--tlsMode",
                "requireTLS",
                "--tlsCertificateKeyFile",
                "/etc/ssl/ts.pem",
                "--tlsCAFile",
                "/etc/ssl/ca.pem",
                "--tlsAllowConnectionsWithoutCertificates",
            ]
        );
        assert!(args_from_yaml("net:\n  tls:\n    allowInvalidCertificates: maybe\n").is_err());
    }

    #[test]
    fn unknown_and_unsupported_settings_are_errors() {
        assert_eq!(
            args_from_yaml("net:\n  portt: 1\n").unwrap_err(),
            "Unrecognized option: net.portt"
        );
        assert_eq!(
            args_from_yaml("security:\n  authorization: enabled\n").unwrap(),
            ["--auth"]
        );
        assert!(args_from_yaml("security:\n  authorization: maybe\n").is_err());
        assert_eq!(
            args_from_yaml("security:\n  keyFile: /k\n").unwrap(),
            ["--keyFile", "/k"]
        );
        assert!(args_from_yaml("security:\n  clusterAuthMode: x509\n")
            .unwrap_err()
            .contains("not supported yet"));
        assert!(args_from_yaml("net:\n  bindIpAll: yes please\n").is_err());
        assert!(args_from_yaml("net: [\n")
            .unwrap_err()
            .starts_with("Error parsing YAML"));
        assert!(args_from_yaml("").unwrap().is_empty());
    }

    #[test]
    fn the_command_line_comes_after_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ts.conf");
        std::fs::write(&path, "net:\n  port: 27018\n").unwrap();
        let argv = [
            "tailstream",
            "--quiet",
            "-f",
            path.to_str().unwrap(),
            "--port",
            "1",
        ]
        .map(OsString::from)
        .to_vec();
        let expanded: Vec<String> = expand(argv)
            .unwrap()
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        let path = path.to_str().unwrap();
        assert_eq!(
            expanded,
            [
                "tailstream",
                "--config",
                path,
                "--port",
                "27018",
                "--quiet",
                "--port",
                "1"
            ]
        );
        let missing = [
            OsString::from("tailstream"),
            OsString::from("--config=/no/such/file"),
        ];
        assert!(expand(missing.to_vec())
            .unwrap_err()
            .contains("/no/such/file"));
    }
}
