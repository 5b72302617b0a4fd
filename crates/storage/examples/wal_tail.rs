//! `wal_tail <store directory>`: where the newest write-ahead log file of a store ends,
//! as the server reads it before RocksDB's recovery (`tailstream_storage::wal_tail`).
//! Prints one line, `<file bytes> <whole records end> <dropped bytes> <file>`, or nothing
//! when the store has no WAL file. The crash campaign (tests/crash_campaign.py) uses it
//! to cut a WAL only inside records written after every write it saw acknowledged as
//! durable, and to know what the server must report.

use tailstream_storage::wal_tail::newest_wal_tail;

fn main() {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: wal_tail <store directory>");
        std::process::exit(2);
    };
    match newest_wal_tail(std::path::Path::new(&dir)) {
        Ok(Some(t)) => println!(
            "{} {} {} {}",
            t.file_bytes,
            t.whole_records_end,
            t.dropped_bytes,
            t.file.display()
        ),
        Ok(None) => {}
        Err(e) => {
            eprintln!("wal_tail: {e}");
            std::process::exit(1);
        }
    }
}
