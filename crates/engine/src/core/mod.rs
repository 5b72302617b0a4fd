//! The engine's lowest layer: vocabulary and mechanisms every other layer uses and
//! that use no other layer: cluster time ([`time::ClusterTime`]) and the clock,
//! storage key layouts, durability (group commit), the fsync lock, message formatting,
//! the progress of long work.

pub mod bus;
pub mod clock;
pub mod durability;
pub mod evicted;
pub mod format;
pub mod fsync_lock;
pub mod keys;
pub mod progress;
pub(crate) mod raw_writer;
#[cfg(test)]
pub(crate) mod testing;
pub mod time;
pub mod workers;
pub mod writer_lock;

use tailstream_query::error::{codes, Error};

/// Largest document mongod accepts (BSONObjMaxUserSize).
pub const MAX_DOCUMENT_SIZE: usize = 16 * 1024 * 1024;
/// Deepest nesting of documents/arrays accepted in a stored document.
pub const MAX_NESTING_DEPTH: usize = 100;
/// Most write operations in one insert/update/delete command (maxWriteBatchSize).
pub const MAX_WRITE_BATCH: usize = 100_000;

/// A storage failure as a command error.
pub(crate) fn storage_err(e: tailstream_storage::StorageError) -> Error {
    if e.is_out_of_space() {
        // mongod's code for a write refused for want of disk space. After a failed
        // write of the write-ahead log RocksDB refuses writes until it is reopened
        // (see `Store::wal_writable`), hence the restart.
        return Error::new(
            codes::OUT_OF_DISK_SPACE,
            format!(
                "out of disk space ({e}); writes are refused: free disk space under the \
                 data directory and restart the server"
            ),
        );
    }
    Error::internal(e.to_string())
}

/// A number as mongod's catalog stores and reports it (`appendNumber`): a 32-bit int
/// when it fits, else a 64-bit one (so shells show `1024`, not `Long("1024")`).
pub fn stored_number(n: i64) -> bson::Bson {
    match i32::try_from(n) {
        Ok(small) => bson::Bson::Int32(small),
        Err(_) => bson::Bson::Int64(n),
    }
}

/// Where each commit's writes go once they are in the store, in commit order (called
/// under the writer lock): a replica set's shipping of commits (`repl`, issue 27). None:
/// commits are not recorded (a batch costs nothing extra).
pub type CommitSink = std::sync::Arc<dyn Fn(&tailstream_storage::Ops) + Send + Sync>;
