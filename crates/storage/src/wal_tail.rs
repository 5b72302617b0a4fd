//! What a crash left at the end of the write-ahead log, read before RocksDB opens the
//! store so that the server can say what recovery drops.
//!
//! RocksDB recovers a crashed store with its point-in-time recovery: it replays the WAL
//! up to the first record it cannot read and silently drops the rest. After a crash the
//! newest WAL file may end in a record cut short (a write the disk took only in part).
//! Such a record was never acknowledged as journaled (a journaled write is acknowledged
//! after the fsync that made its whole record durable), unless the disk lied.
//!
//! The format read here is RocksDB's log format (`db/log_format.h`): the file is a run of
//! 32 KiB blocks; a block holds physical records, each a header and a payload, and ends
//! in zeros when fewer bytes than a header are left. A header is a masked CRC-32C (4
//! bytes, of the type byte, then the log number for the recyclable kinds, then the
//! payload), the payload's length (2 bytes) and the record's type (1 byte); the
//! recyclable kinds (the store reuses WAL files) add the low 32 bits of the file's log
//! number (4 bytes). A write batch larger than a block is split into first, middle and
//! last fragments. A reused file's bytes after the last record of its current life are
//! records of an older log number: its stale tail, not a torn write.
//!
//! Bounds: only the newest WAL file is read, sequentially, in blocks; a record's length
//! is a `u16`, so no read is larger than a block.

use std::io::Read;
use std::path::{Path, PathBuf};

/// A WAL block (`kBlockSize`).
const BLOCK_BYTES: u64 = 32 * 1024;
/// A header of the legacy kinds: CRC, length, type (`kHeaderSize`).
const HEADER_BYTES: usize = 7;
/// A header of the recyclable kinds: the legacy one and the log number
/// (`kRecyclableHeaderSize`).
const RECYCLABLE_HEADER_BYTES: usize = 11;
/// Added to a rotated CRC to store it (`crc32c::kMaskDelta`).
const CRC_MASK_DELTA: u32 = 0xa282_ead8;

/// The record types (`log::RecordType`).
mod kind {
    pub const ZERO: u8 = 0;
    pub const FULL: u8 = 1;
    pub const FIRST: u8 = 2;
    pub const MIDDLE: u8 = 3;
    pub const LAST: u8 = 4;
    pub const RECYCLABLE_FULL: u8 = 5;
    pub const RECYCLABLE_FIRST: u8 = 6;
    pub const RECYCLABLE_MIDDLE: u8 = 7;
    pub const RECYCLABLE_LAST: u8 = 8;
    pub const RECYCLABLE_TIMESTAMP_SIZE: u8 = 11;
    pub const RECYCLABLE_PREDECESSOR_INFO: u8 = 131;
}

/// The end of a WAL file: where its last whole logical record ends, and what follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalTail {
    pub file: PathBuf,
    pub file_bytes: u64,
    /// Where the last whole record (a write batch, all its fragments) ends.
    pub whole_records_end: u64,
    /// What recovery drops after it, when it is a write cut short or damaged (0 when the
    /// file ends cleanly: at a record's end, in a block's zero padding, preallocated
    /// zeros, or a reused file's records of an older life).
    pub dropped_bytes: u64,
    /// Why the bytes are dropped (empty when none are).
    pub reason: &'static str,
}

/// Reads the newest WAL file (`<number>.log`) of the store in `dir`; None when there is
/// none (a new store, or one shut down cleanly after its WAL was emptied and removed).
pub fn newest_wal_tail(dir: &Path) -> std::io::Result<Option<WalTail>> {
    let newest = wal_files(dir)?
        .into_iter()
        .max_by_key(|(number, _)| *number);
    match newest {
        Some((number, path)) => {
            let file = std::fs::File::open(&path)?;
            let mut tail = read_tail(std::io::BufReader::new(file), number)?;
            tail.file = path;
            Ok(Some(tail))
        }
        None => Ok(None),
    }
}

/// The store's WAL files (`<number>.log`) with their log numbers; none when `dir` does
/// not exist.
pub fn wal_files(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let number = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(number) = number {
            files.push((number, path));
        }
    }
    Ok(files)
}

/// Walks the records of a WAL whose log number is `log_number`, block by block.
pub fn read_tail(mut file: impl Read, log_number: u64) -> std::io::Result<WalTail> {
    let mut tail = WalTail {
        file: PathBuf::new(),
        file_bytes: 0,
        whole_records_end: 0,
        dropped_bytes: 0,
        reason: "",
    };
    let mut block = vec![0u8; BLOCK_BYTES as usize];
    let mut in_fragments = false;
    loop {
        let filled = read_block(&mut file, &mut block)?;
        let block_start = tail.file_bytes;
        tail.file_bytes += filled as u64;
        match walk_block(&block[..filled], log_number, &mut in_fragments) {
            Walk::Whole(end) => {
                if let Some(end) = end {
                    tail.whole_records_end = block_start + end as u64;
                }
            }
            Walk::Ends(end) => {
                if let Some(end) = end {
                    tail.whole_records_end = block_start + end as u64;
                }
                break;
            }
            Walk::Dropped(end, reason) => {
                if let Some(end) = end {
                    tail.whole_records_end = block_start + end as u64;
                }
                // The rest of the file is not read: recovery stops at the same place.
                let rest = std::io::copy(&mut file, &mut std::io::sink())?;
                tail.file_bytes += rest;
                tail.dropped_bytes = tail.file_bytes - tail.whole_records_end;
                tail.reason = reason;
                return Ok(tail);
            }
        }
        if (filled as u64) < BLOCK_BYTES {
            break;
        }
    }
    if in_fragments {
        // The file ended inside a batch split over blocks: its first fragments are there,
        // its last is not.
        tail.dropped_bytes = tail.file_bytes - tail.whole_records_end;
        tail.reason = "a write batch's fragments without its last";
    }
    Ok(tail)
}

/// Fills `block` from the file as far as it goes; the bytes read.
fn read_block(file: &mut impl Read, block: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < block.len() {
        match file.read(&mut block[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// How a block's walk ended; each carries where the last whole record in the block
/// ended, if one did.
enum Walk {
    /// Every record in the block read (the next block goes on).
    Whole(Option<usize>),
    /// The log ends cleanly in this block.
    Ends(Option<usize>),
    /// The log ends in a record recovery cannot read: the rest is dropped.
    Dropped(Option<usize>, &'static str),
}

fn walk_block(block: &[u8], log_number: u64, in_fragments: &mut bool) -> Walk {
    let mut pos = 0usize;
    let mut whole_end = None;
    let block_is_full = block.len() as u64 == BLOCK_BYTES;
    loop {
        let left = block.len() - pos;
        if left < RECYCLABLE_HEADER_BYTES && block[pos..].iter().all(|&b| b == 0) {
            // A block's last bytes, too few for a header, are zeros (the writer pads the
            // block and goes on in the next one); in the file's last block, the end.
            return if block_is_full {
                Walk::Whole(whole_end)
            } else {
                Walk::Ends(whole_end)
            };
        }
        if left < HEADER_BYTES {
            return Walk::Dropped(whole_end, "a record header cut short");
        }
        let length = u16::from_le_bytes([block[pos + 4], block[pos + 5]]) as usize;
        let record_kind = block[pos + 6];
        if record_kind == kind::ZERO && length == 0 {
            // Preallocated, never written.
            return Walk::Ends(whole_end);
        }
        let recyclable = matches!(
            record_kind,
            kind::RECYCLABLE_FULL
                | kind::RECYCLABLE_FIRST
                | kind::RECYCLABLE_MIDDLE
                | kind::RECYCLABLE_LAST
                | kind::RECYCLABLE_TIMESTAMP_SIZE
                | kind::RECYCLABLE_PREDECESSOR_INFO
        );
        let header = if recyclable {
            RECYCLABLE_HEADER_BYTES
        } else {
            HEADER_BYTES
        };
        if left < header {
            return Walk::Dropped(whole_end, "a record header cut short");
        }
        if recyclable {
            let number = u32::from_le_bytes([
                block[pos + 7],
                block[pos + 8],
                block[pos + 9],
                block[pos + 10],
            ]);
            if u64::from(number) != log_number & 0xFFFF_FFFF {
                // A reused file's record from an earlier life: the current one ended.
                return Walk::Ends(whole_end);
            }
        }
        if left < header + length {
            return Walk::Dropped(whole_end, "a record cut short");
        }
        let stored =
            u32::from_le_bytes([block[pos], block[pos + 1], block[pos + 2], block[pos + 3]]);
        let mut crc = crc32c::crc32c(&block[pos + 6..pos + 7]);
        if recyclable {
            crc = crc32c::crc32c_append(crc, &block[pos + 7..pos + 11]);
        }
        crc = crc32c::crc32c_append(crc, &block[pos + header..pos + header + length]);
        if mask(crc) != stored {
            return Walk::Dropped(whole_end, "a record whose checksum does not match");
        }
        pos += header + length;
        match record_kind {
            kind::FIRST | kind::RECYCLABLE_FIRST => *in_fragments = true,
            kind::MIDDLE | kind::RECYCLABLE_MIDDLE => {}
            kind::LAST | kind::RECYCLABLE_LAST | kind::FULL | kind::RECYCLABLE_FULL => {
                *in_fragments = false;
                whole_end = Some(pos);
            }
            // Metadata records (compression, timestamp sizes, the predecessor's info).
            _ => {
                if !*in_fragments {
                    whole_end = Some(pos);
                }
            }
        }
    }
}

/// A CRC as RocksDB stores it (`crc32c::Mask`).
fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(CRC_MASK_DELTA)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One physical record of `kind` for log `number`, as RocksDB's writer emits it.
    fn record(record_kind: u8, number: u32, payload: &[u8]) -> Vec<u8> {
        let recyclable = (kind::RECYCLABLE_FULL..=kind::RECYCLABLE_LAST).contains(&record_kind);
        let mut crc = crc32c::crc32c(&[record_kind]);
        if recyclable {
            crc = crc32c::crc32c_append(crc, &number.to_le_bytes());
        }
        crc = crc32c::crc32c_append(crc, payload);
        let mut out = mask(crc).to_le_bytes().to_vec();
        out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
        out.push(record_kind);
        if recyclable {
            out.extend_from_slice(&number.to_le_bytes());
        }
        out.extend_from_slice(payload);
        out
    }

    fn tail_of(bytes: &[u8], number: u64) -> WalTail {
        read_tail(bytes, number).unwrap()
    }

    #[test]
    fn whole_records_end_cleanly() {
        let mut log = record(kind::RECYCLABLE_FULL, 9, b"first batch");
        log.extend(record(kind::RECYCLABLE_FULL, 9, b"second batch"));
        let t = tail_of(&log, 9);
        assert_eq!(
            (t.whole_records_end, t.dropped_bytes),
            (log.len() as u64, 0)
        );
        // Legacy records (a store written without recycling) too.
        let legacy = [record(kind::FULL, 0, b"a"), record(kind::FULL, 0, b"bc")].concat();
        assert_eq!(tail_of(&legacy, 3).dropped_bytes, 0);
    }

    #[test]
    fn a_record_cut_short_is_dropped_with_what_follows_the_last_whole_one() {
        let first = record(kind::RECYCLABLE_FULL, 9, b"first batch");
        let mut log = first.clone();
        log.extend(record(kind::RECYCLABLE_FULL, 9, b"second batch"));
        for cut in 1..log.len() - first.len() {
            let t = tail_of(&log[..log.len() - cut], 9);
            assert_eq!(t.whole_records_end, first.len() as u64, "cut {cut}");
            assert_eq!(
                t.dropped_bytes,
                (log.len() - cut - first.len()) as u64,
                "cut {cut}"
            );
            assert!(!t.reason.is_empty());
        }
    }

    #[test]
    fn a_damaged_record_is_dropped() {
        let first = record(kind::RECYCLABLE_FULL, 9, b"first batch");
        let mut log = first.clone();
        log.extend(record(kind::RECYCLABLE_FULL, 9, b"second batch"));
        let last = log.len() - 1;
        log[last] ^= 0x40;
        let t = tail_of(&log, 9);
        assert_eq!(t.whole_records_end, first.len() as u64);
        assert_eq!(t.reason, "a record whose checksum does not match");
    }

    #[test]
    fn a_reused_files_older_records_and_zeros_are_no_torn_write() {
        let mut log = record(kind::RECYCLABLE_FULL, 9, b"this life");
        let end = log.len() as u64;
        log.extend(record(kind::RECYCLABLE_FULL, 5, b"an earlier life"));
        log.extend(vec![0x55; 100]);
        let t = tail_of(&log, 9);
        assert_eq!((t.whole_records_end, t.dropped_bytes), (end, 0));
        let mut zeros = record(kind::RECYCLABLE_FULL, 9, b"x");
        let end = zeros.len() as u64;
        zeros.extend(vec![0; 4096]);
        let t = tail_of(&zeros, 9);
        assert_eq!((t.whole_records_end, t.dropped_bytes), (end, 0));
    }

    #[test]
    fn fragments_across_blocks_count_once_their_last_is_there() {
        // A batch in a first fragment filling block one and a last fragment in block two.
        let room = BLOCK_BYTES as usize - RECYCLABLE_HEADER_BYTES;
        let mut log = record(kind::RECYCLABLE_FIRST, 9, &vec![7u8; room]);
        assert_eq!(log.len() as u64, BLOCK_BYTES);
        let first_only = log.len();
        log.extend(record(kind::RECYCLABLE_LAST, 9, b"the rest"));
        let t = tail_of(&log, 9);
        assert_eq!(
            (t.whole_records_end, t.dropped_bytes),
            (log.len() as u64, 0)
        );
        let t = tail_of(&log[..first_only], 9);
        assert_eq!(
            (t.whole_records_end, t.dropped_bytes),
            (0, first_only as u64)
        );
        // A block's last bytes too few for a header are padding.
        for padding in [1, 6, 10] {
            let mut padded = record(kind::RECYCLABLE_FULL, 9, &vec![1u8; room - padding]);
            padded.resize(BLOCK_BYTES as usize, 0);
            padded.extend(record(kind::RECYCLABLE_FULL, 9, b"next block"));
            let t = tail_of(&padded, 9);
            let whole = (padded.len() as u64, 0);
            assert_eq!(
                (t.whole_records_end, t.dropped_bytes),
                whole,
                "padding {padding}"
            );
        }
    }

    #[test]
    fn a_store_without_wal_files_has_no_tail() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(newest_wal_tail(dir.path()).unwrap(), None);
        assert_eq!(newest_wal_tail(&dir.path().join("absent")).unwrap(), None);
    }
}
