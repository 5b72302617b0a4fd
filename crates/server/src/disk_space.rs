//! The free-space floor for writes. Below `minFreeDiskSpaceMB` free under the data
//! directory, commands that add data (inserts, updates, creates, index builds, ...) fail
//! with mongod's OutOfDiskSpace (14031), while reads, deletes and drops go on, so the
//! space can be freed from a client and writes resume by themselves.
//!
//! Why a floor: RocksDB needs room to finish what it has begun (flush a memtable,
//! compact), and a write of its log that fails for want of space makes it refuse every
//! write until it is reopened (see `tailstream_storage::Store`). Refusing writes a
//! little before the disk is full keeps the server out of that state. Tailstream's own
//! parameter (mongod has the like only for index builds,
//! `indexBuildMinAvailableDiskSpaceMB`, default 500 MB).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tailstream_engine::query::error::{codes, Error, Result};

pub const PARAMETER: &str = "minFreeDiskSpaceMB";
pub const DEFAULT_MB: i64 = 256;

/// Free space is asked of the filesystem at most this often (one `statvfs`); a write
/// in between uses the last answer.
const CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// The floor in bytes (0: none), set from the parameter.
pub static MIN_FREE_BYTES: AtomicU64 = AtomicU64::new(DEFAULT_MB as u64 * 1024 * 1024);

pub struct DiskSpace {
    /// Times are measured from here.
    epoch: Instant,
    /// When free space was last asked (µs since `epoch`; 0: never) and the answer in
    /// bytes. Atomics, not a lock: every write command reads them. Two commands may
    /// both ask the filesystem at the turn of an interval, which is harmless.
    checked_at_micros: AtomicU64,
    free_bytes: AtomicU64,
}

impl Default for DiskSpace {
    fn default() -> Self {
        DiskSpace {
            epoch: Instant::now(),
            checked_at_micros: AtomicU64::new(0),
            free_bytes: AtomicU64::new(0),
        }
    }
}

impl DiskSpace {
    /// Whether a command that adds data may run: fails with OutOfDiskSpace when less
    /// than the floor is free under `dbpath`.
    pub fn check(&self, dbpath: &Path) -> Result<()> {
        self.check_floor(MIN_FREE_BYTES.load(Ordering::Relaxed), dbpath)
    }

    fn check_floor(&self, floor: u64, dbpath: &Path) -> Result<()> {
        if floor == 0 {
            return Ok(());
        }
        // +1: 0 stays "never asked" even right at the epoch.
        let now = self.epoch.elapsed().as_micros() as u64 + 1;
        let checked = self.checked_at_micros.load(Ordering::Acquire);
        let free =
            if checked != 0 && now.saturating_sub(checked) < CHECK_INTERVAL.as_micros() as u64 {
                self.free_bytes.load(Ordering::Relaxed)
            } else {
                // A filesystem that cannot say is taken as roomy: the floor is a
                // precaution, the store's own errors still apply.
                let free = fs2::available_space(dbpath).unwrap_or(u64::MAX);
                self.free_bytes.store(free, Ordering::Relaxed);
                self.checked_at_micros.store(now, Ordering::Release);
                free
            };
        if free >= floor {
            return Ok(());
        }
        Err(Error::new(
            codes::OUT_OF_DISK_SPACE,
            format!(
                "out of disk space: {} MB free under {}, below the {} MB that writes leave \
                 free ({PARAMETER}); writes are refused until space is freed (deletes and \
                 drops still run)",
                free >> 20,
                dbpath.display(),
                floor >> 20,
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_decides_and_zero_turns_it_off() {
        let dir = std::env::temp_dir();
        let free = fs2::available_space(&dir).unwrap();
        // The free space is cached, so one object can be asked with several floors.
        let space = DiskSpace::default();
        let refused = space
            .check_floor(free.saturating_add(1 << 40), &dir)
            .unwrap_err();
        assert_eq!(refused.code, codes::OUT_OF_DISK_SPACE);
        assert!(refused.message.contains(PARAMETER), "{}", refused.message);
        assert!(space.check_floor(1, &dir).is_ok());
        let fresh = DiskSpace::default();
        assert!(fresh
            .check_floor(0, Path::new("/no/such/directory"))
            .is_ok());
    }
}
