//! Snapshots of the state machine (every space but the replicated log) as files, so
//! a store of any size reaches a new or far-behind member through bounded memory.
//!
//! Sending: a held read view ([`Engine::repl_snapshot_view`], a RocksDB snapshot: its
//! applied marker and its data are one read) is written to a file in pieces
//! ([`SnapshotView::write_file`]); the consensus layer sends the file in chunks.
//!
//! The file: [`MAGIC`], then pieces, each a u32 little-endian length and an encoded
//! [`Ops`] of puts (at most [`MAX_PIECE_BYTES`]), then a zero length, then nothing.
//! A file is checked whole before anything of it is installed: a cut or corrupt one
//! is refused, never half-installed.
//!
//! Installing ([`Engine::repl_snapshot_install`]), in this order:
//! 1. the file is checked whole, and the member's own oplog must not be newer than
//!    the snapshot's (a member joins a set empty, as mongod's must);
//! 2. it becomes `<dbpath>/repl-snapshots/installing.snap`, synced with its folder;
//! 3. one batch clears the state machine and writes the installing marker (the
//!    applied marker to set at the end); the pieces follow, a batch each, unsynced;
//! 4. one batch sets the applied marker and removes the installing marker, synced;
//! 5. the file is deleted and the engine's memory read again from the store.
//!
//! A crash between 3 and 4 leaves the installing marker: the next open starts again
//! at 3 from the file before it reads anything ([`finish_interrupted_install`]), so a
//! member never runs on half a snapshot, and its log (a voter's promise) is never
//! touched. Whatever else a crash leaves in the folder (a file being sent or
//! received, one installed but not yet deleted) is deleted by the next open. While
//! it installs, the engine says so ([`Engine::repl_installing`]): the member serves
//! no reads meanwhile (mongod's initial sync, its STARTUP2 state, serves none either).

use super::apply::APPLIED_KEY;
use crate::core::bus::CommitNotice;
use crate::core::clock::ClusterClock;
use crate::core::time::ClusterTime;
use crate::core::{keys, storage_err};
use crate::oplog::txn::Writer;
use crate::Engine;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use tailstream_query::error::{Error, Result};
use tailstream_storage::{Op, Ops, Space, Store};

/// The folder under `--dbpath` that holds snapshot files.
pub const SNAPSHOT_DIR: &str = "repl-snapshots";

/// The name of the file being installed (see the module's doc).
const INSTALLING_FILE: &str = "installing.snap";

/// The installing marker's key in `Meta` (its value: the applied marker to set).
const INSTALLING_KEY: &[u8] = b"repl_installing";

/// A snapshot file's first bytes (the format's version in the last).
const MAGIC: &[u8; 8] = b"TSSNAP\x00\x01";

/// The size a piece is cut at when written: large enough that a batch's fixed cost
/// disappears, small enough that reading and writing one stays in the caches.
const PIECE_BYTES: usize = 4 << 20;

/// The largest piece a file may hold: one cut at [`PIECE_BYTES`] whose last put is
/// as large as an operation may be.
const MAX_PIECE_BYTES: usize = PIECE_BYTES + 2 * tailstream_storage::MAX_PART_BYTES;

/// The spaces a snapshot holds: the whole state machine, every space but the log.
pub(super) fn snapshot_spaces() -> Vec<Space> {
    Space::ALL
        .into_iter()
        .filter(|s| *s != Space::ReplLog)
        .collect()
}

fn file_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::internal(format!("snapshot file {}: {e}", path.display()))
}

/// A held read view of the state machine (see [`Engine::repl_snapshot_view`]). While
/// it lives, the store keeps what it can read: the oplog's retired files among them
/// (`Store::reclaim` waits for older views).
pub struct SnapshotView {
    view: tailstream_storage::OwnedSnapshot,
}

impl SnapshotView {
    /// The applied marker as of the view.
    pub fn applied(&self) -> Result<Option<Vec<u8>>> {
        self.view.get(Space::Meta, APPLIED_KEY).map_err(storage_err)
    }

    /// [`Engine::repl_snapshot_export`] as of the view (in one piece: for tests).
    pub fn export(&self) -> Result<Ops> {
        self.view.export(&snapshot_spaces()).map_err(storage_err)
    }

    /// Writes the view to a new file at `path` (see the module's doc for its form);
    /// returns its size. Not synced: a file being sent is not kept across a restart.
    pub fn write_file(&self, path: &Path) -> Result<u64> {
        self.write_file_in(path, PIECE_BYTES)
    }

    fn write_file_in(&self, path: &Path, piece_bytes: usize) -> Result<u64> {
        let file = std::fs::File::create(path).map_err(|e| file_error(path, e))?;
        let mut out = BufWriter::new(file);
        let mut bytes = MAGIC.len() as u64;
        out.write_all(MAGIC).map_err(|e| file_error(path, e))?;
        self.view
            .export_pieces(&snapshot_spaces(), piece_bytes, |piece| {
                let len = u32::try_from(piece.as_bytes().len()).expect("a piece under 4 GiB");
                out.write_all(&len.to_le_bytes())?;
                out.write_all(piece.as_bytes())?;
                bytes += 4 + u64::from(len);
                Ok(())
            })
            .map_err(storage_err)?;
        out.write_all(&0u32.to_le_bytes())
            .and_then(|_| out.flush())
            .map_err(|e| file_error(path, e))?;
        Ok(bytes + 4)
    }
}

/// Reads a snapshot file's pieces in order.
struct Pieces {
    path: PathBuf,
    input: BufReader<std::fs::File>,
}

impl Pieces {
    fn open(path: &Path) -> Result<Pieces> {
        let file = std::fs::File::open(path).map_err(|e| file_error(path, e))?;
        let mut input = BufReader::new(file);
        let mut magic = [0u8; MAGIC.len()];
        input
            .read_exact(&mut magic)
            .map_err(|e| file_error(path, e))?;
        if &magic != MAGIC {
            return Err(file_error(path, "not a snapshot of this format"));
        }
        Ok(Pieces {
            path: path.to_path_buf(),
            input,
        })
    }

    /// The next piece; none after the last (the zero length).
    fn next_piece(&mut self) -> Result<Option<Ops>> {
        let mut len = [0u8; 4];
        self.input
            .read_exact(&mut len)
            .map_err(|e| file_error(&self.path, e))?;
        let len = u32::from_le_bytes(len) as usize;
        if len == 0 {
            return Ok(None);
        }
        if len > MAX_PIECE_BYTES {
            return Err(file_error(&self.path, "a piece over its limit"));
        }
        let mut bytes = vec![0u8; len];
        self.input
            .read_exact(&mut bytes)
            .map_err(|e| file_error(&self.path, e))?;
        Ops::decode(bytes)
            .map(Some)
            .map_err(|e| file_error(&self.path, e))
    }

    /// Whether the file ends here.
    fn at_end(&mut self) -> Result<bool> {
        let mut one = [0u8; 1];
        let n = self
            .input
            .read(&mut one)
            .map_err(|e| file_error(&self.path, e))?;
        Ok(n == 0)
    }
}

/// Checks a whole snapshot file (every piece decodes, holds only puts into the state
/// machine's spaces, and the file ends after its last); returns its newest oplog time.
fn check_file(path: &Path) -> Result<ClusterTime> {
    let spaces = snapshot_spaces();
    let mut pieces = Pieces::open(path)?;
    let mut newest = ClusterTime::ZERO;
    while let Some(piece) = pieces.next_piece()? {
        for op in piece.iter() {
            let Op::Put { space, key, .. } = op else {
                return Err(file_error(path, "a write that is not a put"));
            };
            if !spaces.contains(&space) {
                return Err(file_error(path, "a write outside the state machine"));
            }
            if space == Space::Oplog {
                if key.len() != 8 {
                    return Err(file_error(path, "an oplog key that is not a time"));
                }
                newest = newest.max(keys::oplog_key_time(key));
            }
        }
    }
    if !pieces.at_end()? {
        return Err(file_error(path, "bytes after its last piece"));
    }
    Ok(newest)
}

/// Steps 3 and 4 of an install (see the module's doc), from a checked file, then the
/// file deleted.
fn install_from(store: &Store, path: &Path, applied: &[u8]) -> Result<()> {
    let spaces = snapshot_spaces();
    let mut first = Ops::new();
    first.put(Space::Meta, INSTALLING_KEY, applied);
    store.replace_begin(&spaces, &first).map_err(storage_err)?;
    let mut pieces = Pieces::open(path)?;
    while let Some(piece) = pieces.next_piece()? {
        store.replace_piece(&spaces, &piece).map_err(storage_err)?;
    }
    let mut last = Ops::new();
    last.put(Space::Meta, APPLIED_KEY, applied);
    last.delete(Space::Meta, INSTALLING_KEY);
    store.replace_piece(&spaces, &last).map_err(storage_err)?;
    store.sync().map_err(storage_err)?;
    std::fs::remove_file(path).map_err(|e| file_error(path, e))
}

/// Syncs a file and the folder that names it (a rename lasts once its folder is synced).
fn sync_file_and_folder(path: &Path) -> Result<()> {
    let sync = |p: &Path| std::fs::File::open(p).and_then(|f| f.sync_all());
    sync(path).map_err(|e| file_error(path, e))?;
    let folder = path.parent().expect("a snapshot file is in its folder");
    sync(folder).map_err(|e| file_error(folder, e))
}

/// At open, before anything is read from the store: finishes an install a crash cut
/// short (from step 3 again), then deletes every other file in the snapshot folder.
pub(crate) fn finish_interrupted_install(store: &Store, dbpath: &Path) -> Result<()> {
    let dir = dbpath.join(SNAPSHOT_DIR);
    if let Some(applied) = store
        .get(Space::Meta, INSTALLING_KEY)
        .map_err(storage_err)?
    {
        let path = dir.join(INSTALLING_FILE);
        if !path.exists() {
            return Err(file_error(
                &path,
                "an interrupted snapshot install's file is gone: start this member on an \
                 empty --dbpath to join the set again",
            ));
        }
        tracing::warn!(file = %path.display(), "finishing a snapshot install a restart interrupted");
        install_from(store, &path, &applied)?;
    }
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let _ = std::fs::remove_file(entry.path());
    }
    Ok(())
}

impl Engine {
    /// The folder for snapshot files (created if missing).
    pub fn repl_snapshot_dir(&self) -> Result<PathBuf> {
        let dir = self.options().dbpath.join(SNAPSHOT_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| file_error(&dir, e))?;
        Ok(dir)
    }

    /// Every key of the state machine's spaces, with the applied marker among them
    /// (in one piece: for tests and small stores).
    pub fn repl_snapshot_export(&self) -> Result<Ops> {
        self.store.export(&snapshot_spaces()).map_err(storage_err)
    }

    /// The state machine as of now, held (a RocksDB snapshot: nothing is copied until
    /// it is written out); its applied marker and its spaces are one read.
    pub fn repl_snapshot_view(&self) -> SnapshotView {
        SnapshotView {
            view: self.store.snapshot(),
        }
    }

    /// Whether a snapshot is being installed (the state machine is half the old one,
    /// half the new: no reads).
    pub fn repl_installing(&self) -> bool {
        self.installing.load(Ordering::Acquire)
    }

    /// Replaces the state machine with the snapshot file at `file` (written by
    /// [`SnapshotView::write_file`]) and sets the applied marker to `applied`, as the
    /// module's doc says; the log and its markers stay. A file in this engine's
    /// snapshot folder is moved, any other copied. The engine's memory is then read
    /// again from the store, as an open reads it.
    pub fn repl_snapshot_install(&self, file: &Path, applied: &[u8]) -> Result<()> {
        let newest = check_file(file)?;
        let mut w = self.writer.lock();
        // Oplog times, and every reader's position, only move forward.
        if newest < w.committed_ts {
            return Err(Error::internal(format!(
                "this member's oplog (to {}) is newer than the replica set's snapshot (to \
                 {newest}): start it on an empty --dbpath to join the set",
                w.committed_ts
            )));
        }
        let dir = self.repl_snapshot_dir()?;
        let installing = dir.join(INSTALLING_FILE);
        if file.parent() == Some(dir.as_path()) {
            std::fs::rename(file, &installing).map_err(|e| file_error(file, e))?;
        } else {
            std::fs::copy(file, &installing).map_err(|e| file_error(file, e))?;
        }
        sync_file_and_folder(&installing)?;
        // Before the store changes: nothing is known of its natural keys any more.
        self.evicted.clear();
        self.installing.store(true, Ordering::Release);
        // A failure leaves the flag set: the member holds half a state machine (its
        // state machine stops; a restart finishes the install).
        install_from(&self.store, &installing, applied)?;
        self.installing.store(false, Ordering::Release);
        self.reload_after_install(&mut w)
    }

    /// The engine's memory from a store whose state machine was replaced wholesale.
    fn reload_after_install(&self, w: &mut Writer) -> Result<()> {
        self.reload_catalog()?;
        self.capped.lock().clear();
        self.capped_modified.lock().clear();
        let last_ts = Writer::load_newest_time(&self.store)?;
        let (trim_ts, oplog_bytes) = Writer::load_oplog_state(&self.store)?;
        // Not older than this member's own (checked before the install); the same
        // when both are empty.
        let newer = (last_ts > w.committed_ts).then_some(last_ts);
        w.committed_ts = last_ts;
        w.clock = ClusterClock::after(last_ts.max(w.clock.last()));
        (w.oplog_bytes, w.state_bytes) = (oplog_bytes, oplog_bytes);
        w.trim_ts = trim_ts;
        // Moves either way: the point is the snapshot's, not a trim's.
        self.trim_ts.store(trim_ts, Ordering::Release);
        if trim_ts > ClusterTime::ZERO {
            self.store
                .retire_through(Space::Oplog, &keys::oplog_key(trim_ts.prev()));
        }
        self.recent.restart(last_ts.next());
        let seq = self.durability.committed(newer);
        // Every namespace may have changed.
        self.bus.publish(CommitNotice {
            seq,
            last_ts: last_ts.max(self.bus.last().last_ts),
            ns_mask: u64::MAX,
        });
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::catalog::namespace::Namespace;
    use crate::core::testing::TestEngine;
    use bson::doc;

    /// Sends `from`'s state machine to `to` as a member receives it: a file written
    /// (in pieces of `piece_bytes`) into `to`'s snapshot folder, then installed.
    pub(crate) fn send_snapshot(from: &Engine, to: &Engine, piece_bytes: usize) -> Result<()> {
        let view = from.repl_snapshot_view();
        let path = to.repl_snapshot_dir()?.join("receiving-test.snap");
        view.write_file_in(&path, piece_bytes)?;
        let applied = view.applied()?.unwrap_or_else(|| b"none".to_vec());
        to.repl_snapshot_install(&path, &applied)
    }

    fn names(e: &Engine) -> Vec<String> {
        e.catalog().colls.keys().cloned().collect()
    }

    /// A primary's state, written in many small pieces and installed on a member with
    /// its own: the member's store holds exactly the snapshot, its memory follows,
    /// and the file is gone.
    #[test]
    fn a_snapshot_file_in_many_pieces_installs_whole() {
        // The member's own writes come first: an oplog newer than the snapshot is
        // refused (it would be a member that wrote on its own), and the clocks' times
        // of two engines written the other way round straddled a second now and then.
        let member = TestEngine::open();
        let m = &member.engine;
        m.insert_documents(&Namespace::new("db", "mine"), vec![doc! {"_id": 1}], true)
            .unwrap();
        m.repl_log_append(&[(1, b"log".to_vec())]).unwrap();
        let primary = TestEngine::open();
        let p = &primary.engine;
        let ns = Namespace::new("db", "c");
        let docs = (0..200)
            .map(|i| doc! {"_id": i, "n": i, "pad": "x".repeat(100)})
            .collect();
        p.insert_documents(&ns, docs, true).unwrap();
        p.create_indexes(&ns, &[doc! {"key": {"n": 1}, "name": "n_1"}])
            .unwrap();
        p.repl_apply(&Ops::new(), b"applied 7").unwrap();
        send_snapshot(p, m, 1024).unwrap();
        assert_eq!(
            m.repl_snapshot_export().unwrap(),
            p.repl_snapshot_export().unwrap()
        );
        assert_eq!(m.repl_applied().unwrap(), Some(b"applied 7".to_vec()));
        assert_eq!(names(m), vec!["db.c".to_string()]);
        let newest = p.writer.lock().committed_ts;
        assert_eq!(m.writer.lock().committed_ts, newest);
        assert_eq!(m.bus.last().last_ts, newest);
        assert!(!m.repl_installing());
        // The log is not the state machine's: it stays.
        assert_eq!(m.repl_log_last().unwrap(), Some((1, b"log".to_vec())));
        let left: Vec<_> = std::fs::read_dir(m.repl_snapshot_dir().unwrap())
            .unwrap()
            .collect();
        assert!(left.is_empty(), "{left:?}");
        let own = m.write_noop("after the snapshot").unwrap();
        assert!(own.last_ts.unwrap() > newest);
    }

    /// A cut file, a flipped byte, bytes after the end: each is refused before anything
    /// of it is written, and the member keeps what it had.
    #[test]
    fn a_damaged_file_is_refused_and_changes_nothing() {
        let primary = TestEngine::open();
        let p = &primary.engine;
        let docs = (0..50).map(|i| doc! {"_id": i}).collect();
        p.insert_documents(&Namespace::new("db", "c"), docs, true)
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.snap");
        p.repl_snapshot_view().write_file_in(&good, 512).unwrap();
        let bytes = std::fs::read(&good).unwrap();
        let member = TestEngine::open();
        let m = &member.engine;
        let before = m.repl_snapshot_export().unwrap();
        let mut damaged = vec![
            bytes[..bytes.len() - 1].to_vec(),
            bytes[..bytes.len() / 2].to_vec(),
            [bytes.as_slice(), b"x"].concat(),
            b"not a snapshot".to_vec(),
        ];
        let mut flipped = bytes.clone();
        flipped[MAGIC.len() + 5] = 200; // the first put's space
        damaged.push(flipped);
        for (i, d) in damaged.iter().enumerate() {
            let path = dir.path().join(format!("bad-{i}.snap"));
            std::fs::write(&path, d).unwrap();
            assert!(m.repl_snapshot_install(&path, b"m").is_err(), "damage {i}");
            assert_eq!(m.repl_snapshot_export().unwrap(), before, "damage {i}");
        }
        m.repl_snapshot_install(&good, b"m").unwrap();
        assert_eq!(names(m), vec!["db.c".to_string()]);
        // A file from elsewhere is copied, not taken.
        assert!(good.exists());
    }

    /// An install that a crash cut after it began (the state machine cleared, some
    /// pieces written): the next open finishes it from the file before it reads the
    /// store, and deletes the other files a crash left.
    #[test]
    fn the_next_open_finishes_an_interrupted_install() {
        let primary = TestEngine::open();
        let p = &primary.engine;
        let ns = Namespace::new("db", "c");
        let docs = (0..100)
            .map(|i| doc! {"_id": i, "pad": "y".repeat(50)})
            .collect();
        p.insert_documents(&ns, docs, true).unwrap();
        let want = p.repl_snapshot_export().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let opts = crate::EngineOptions {
            dbpath: dir.path().to_path_buf(),
            oplog_size_bytes: 1 << 30,
        };
        {
            let m = Engine::open(opts.clone()).unwrap();
            m.insert_documents(&Namespace::new("db", "mine"), vec![doc! {"_id": 1}], true)
                .unwrap();
            let folder = m.repl_snapshot_dir().unwrap();
            let file = folder.join(INSTALLING_FILE);
            p.repl_snapshot_view().write_file_in(&file, 1024).unwrap();
            std::fs::write(folder.join("receiving-7.snap"), b"half").unwrap();
            // Step 3, cut after two pieces.
            let spaces = snapshot_spaces();
            let mut first = Ops::new();
            first.put(Space::Meta, INSTALLING_KEY, b"applied 9");
            m.store.replace_begin(&spaces, &first).unwrap();
            let mut pieces = Pieces::open(&file).unwrap();
            for _ in 0..2 {
                let piece = pieces.next_piece().unwrap().unwrap();
                m.store.replace_piece(&spaces, &piece).unwrap();
            }
            m.store.sync().unwrap();
            m.shutdown();
        }
        let m = Engine::open(opts).unwrap();
        assert_eq!(m.repl_applied().unwrap(), Some(b"applied 9".to_vec()));
        let got = m.repl_snapshot_export().unwrap();
        // The applied marker is the install's own; the rest is the primary's.
        let strip = |ops: &Ops| -> Vec<(Space, Vec<u8>, Vec<u8>)> {
            ops.iter()
                .filter_map(|op| match op {
                    Op::Put { space, key, value } if key != APPLIED_KEY => {
                        Some((space, key.to_vec(), value.to_vec()))
                    }
                    _ => None,
                })
                .collect()
        };
        assert_eq!(strip(&got), strip(&want));
        assert_eq!(names(&m), vec!["db.c".to_string()]);
        let left: Vec<_> = std::fs::read_dir(m.repl_snapshot_dir().unwrap())
            .unwrap()
            .collect();
        assert!(left.is_empty(), "{left:?}");
        m.shutdown();
    }
}
