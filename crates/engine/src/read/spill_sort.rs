//! A sort no index serves and no limit bounds, past its memory limit: sorted runs
//! written to temporary files and merged as the cursor is read (mongod's external sort).
//!
//! mongod holds at most `internalQueryMaxBlockingSortMemoryUsageBytes` (100 MiB) of a
//! blocking sort in memory; past it the sort spills to files under the data directory
//! (`allowDiskUse`, the default since `allowDiskUseByDefault`), or fails with
//! QueryExceededMemoryLimitNoDiskUseAllowed when the operation said `allowDiskUse:
//! false`. Before this, a `find().sort(...)` over an unindexed field held every match
//! (a collection larger than memory took the server down).
//!
//! Each run is sorted stably and written as consecutive BSON documents to an unnamed
//! file (`tempfile_in`: unlinked at once, so it is gone when the cursor is, or after a
//! crash). The merge takes, at each step, the smallest head among the runs, the earliest
//! run on a tie: runs hold documents in the order they came, so the whole stays a stable
//! sort. The last run stays in memory. Memory during the merge: one document per run.

use bson::{Bson, Document};
use std::cmp::Ordering;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use tailstream_query::bson_size::memory_len;
use tailstream_query::error::{Error, Result};
use tailstream_query::sort::{SortSpec, TopK};

/// mongod's `internalQueryMaxBlockingSortMemoryUsageBytes` default.
pub const DEFAULT_MAX_SORT_BYTES: usize = 100 * 1024 * 1024;

/// mongod's code for a blocking stage past its memory limit with `allowDiskUse: false`.
const QUERY_EXCEEDED_MEMORY_LIMIT_NO_DISK_USE_ALLOWED: i32 = 292;

/// Bytes of a run's file read or written per system call.
const RUN_IO_BUFFER_BYTES: usize = 1 << 20;

/// What a blocking sort may hold, and where it may spill.
#[derive(Debug, Clone)]
pub struct SortMemory {
    /// The most bytes of documents held in memory (as they take it: `memory_len`, not
    /// their encoded size, which small documents exceed several times over).
    pub max_bytes: usize,
    /// The folder runs are written to; None: the operation forbade spilling.
    pub spill_dir: Option<PathBuf>,
}

pub(crate) struct SpillSort {
    spec: SortSpec,
    memory: SortMemory,
    run: TopK,
    run_bytes: usize,
    runs: Vec<File>,
}

/// A finished sort: all in memory, or runs to merge.
pub(crate) enum Sorted {
    Memory(VecDeque<Document>),
    Merged(Merge),
}

impl Sorted {
    /// The next document in the sort's order (None: all given).
    pub(crate) fn next(&mut self) -> Result<Option<Document>> {
        match self {
            Sorted::Memory(docs) => Ok(docs.pop_front()),
            Sorted::Merged(merge) => merge.next_document(),
        }
    }
}

impl SpillSort {
    pub(crate) fn new(spec: SortSpec, memory: SortMemory) -> SpillSort {
        assert!(memory.max_bytes > 0, "a sort may hold something");
        SpillSort {
            run: TopK::new(spec.clone(), None),
            spec,
            memory,
            run_bytes: 0,
            runs: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, doc: Document) -> Result<()> {
        self.run_bytes += memory_len(&doc);
        self.run.push(doc);
        if self.run_bytes > self.memory.max_bytes {
            self.spill()?;
        }
        Ok(())
    }

    fn spill(&mut self) -> Result<()> {
        let Some(dir) = &self.memory.spill_dir else {
            return Err(Error::new(
                QUERY_EXCEEDED_MEMORY_LIMIT_NO_DISK_USE_ALLOWED,
                format!(
                    "Sort exceeded memory limit of {} bytes, but did not opt in to external \
                     sorting.",
                    self.memory.max_bytes
                ),
            ));
        };
        let run = std::mem::replace(&mut self.run, TopK::new(self.spec.clone(), None));
        self.run_bytes = 0;
        let file = write_run(dir, run.finish()).map_err(|e| {
            Error::internal(format!(
                "cannot write a sort's run under {}: {e}",
                dir.display()
            ))
        })?;
        self.runs.push(file);
        tailstream_query::script::Operation::count_current(|s| s.note_used_disk());
        Ok(())
    }

    pub(crate) fn finish(self) -> Result<Sorted> {
        let last = self.run.finish();
        if self.runs.is_empty() {
            return Ok(Sorted::Memory(last.into()));
        }
        let mut sources: Vec<Run> = self
            .runs
            .into_iter()
            .map(|f| Run::File(BufReader::with_capacity(RUN_IO_BUFFER_BYTES, f)))
            .collect();
        sources.push(Run::Memory(last.into()));
        Merge::new(self.spec, sources).map(Sorted::Merged)
    }
}

fn write_run(dir: &Path, docs: Vec<Document>) -> std::io::Result<File> {
    std::fs::create_dir_all(dir)?;
    let mut w = BufWriter::with_capacity(RUN_IO_BUFFER_BYTES, tempfile::tempfile_in(dir)?);
    for d in &docs {
        d.to_writer(&mut w).map_err(std::io::Error::other)?;
    }
    w.flush()?;
    let mut file = w.into_inner().map_err(|e| e.into_error())?;
    file.seek(SeekFrom::Start(0))?;
    Ok(file)
}

enum Run {
    File(BufReader<File>),
    Memory(VecDeque<Document>),
}

impl Run {
    fn next(&mut self) -> Result<Option<Document>> {
        match self {
            Run::Memory(q) => Ok(q.pop_front()),
            Run::File(r) => read_document(r)
                .map_err(|e| Error::internal(format!("cannot read a sort's run back: {e}"))),
        }
    }
}

/// The next document of a run's file; None at its end.
fn read_document(r: &mut BufReader<File>) -> std::io::Result<Option<Document>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let total = i32::from_le_bytes(len);
    let total = usize::try_from(total)
        .ok()
        .filter(|n| *n >= 5)
        .ok_or_else(|| std::io::Error::other(format!("a document of length {total}")))?;
    let mut bytes = vec![0u8; total];
    bytes[..4].copy_from_slice(&len);
    r.read_exact(&mut bytes[4..])?;
    Document::from_reader(bytes.as_slice())
        .map(Some)
        .map_err(std::io::Error::other)
}

/// The runs merged: each call gives the smallest of their heads.
pub struct Merge {
    spec: SortSpec,
    runs: Vec<Run>,
    /// Each run's next document with its sort key.
    heads: Vec<Option<(Vec<Bson>, Document)>>,
}

impl Merge {
    fn new(spec: SortSpec, mut runs: Vec<Run>) -> Result<Merge> {
        let mut heads = Vec::with_capacity(runs.len());
        for run in &mut runs {
            heads.push(run.next()?.map(|d| (spec.key(&d), d)));
        }
        Ok(Merge { spec, runs, heads })
    }

    pub fn next_document(&mut self) -> Result<Option<Document>> {
        let mut best: Option<usize> = None;
        for (i, head) in self.heads.iter().enumerate() {
            let Some((key, _)) = head else { continue };
            let better = match best.and_then(|b| self.heads[b].as_ref()) {
                None => true,
                // Strictly smaller: on a tie the earlier run's document goes first.
                Some((best_key, _)) => self.spec.compare_keys(key, best_key) == Ordering::Less,
            };
            if better {
                best = Some(i);
            }
        }
        let Some(b) = best else {
            return Ok(None);
        };
        let next = self.runs[b].next()?.map(|d| (self.spec.key(&d), d));
        let (_, doc) = std::mem::replace(&mut self.heads[b], next).expect("the best head");
        Ok(Some(doc))
    }

    pub fn is_empty(&self) -> bool {
        self.heads.iter().all(Option::is_none)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn sort_all(memory: SortMemory, docs: &[Document]) -> Result<(usize, Vec<Document>)> {
        let spec = SortSpec::parse(&doc! {"x": 1}).unwrap();
        let mut s = SpillSort::new(spec, memory);
        for d in docs {
            s.push(d.clone())?;
        }
        let runs = s.runs.len();
        let out = match s.finish()? {
            Sorted::Memory(q) => q.into(),
            Sorted::Merged(mut m) => {
                let mut out = Vec::new();
                while let Some(d) = m.next_document()? {
                    out.push(d);
                }
                assert!(m.is_empty());
                out
            }
        };
        Ok((runs, out))
    }

    /// 2,000 documents with 37 distinct sort values (many ties) and their arrival order.
    fn documents() -> Vec<Document> {
        (0..2_000)
            .map(|i: i32| doc! {"x": (i * 7_919) % 37, "i": i, "pad": "p".repeat(100)})
            .collect()
    }

    #[test]
    fn spilled_runs_merge_into_the_stable_sort() {
        let dir = tempfile::tempdir().unwrap();
        let docs = documents();
        let mut expected = docs.clone();
        expected.sort_by_key(|d| d.get_i32("x").unwrap()); // stable
        for max_bytes in [1, 10_000, 100_000, usize::MAX / 2] {
            let memory = SortMemory {
                max_bytes,
                spill_dir: Some(dir.path().join("_tmp")),
            };
            let (runs, out) = sort_all(memory, &docs).unwrap();
            assert_eq!(out, expected, "max_bytes {max_bytes}, {runs} runs");
            if max_bytes < 100_000 {
                assert!(runs > 1, "max_bytes {max_bytes}: {runs} runs");
            } else if max_bytes > 1 << 30 {
                assert_eq!(runs, 0);
            }
        }
        // The runs' files were unnamed: nothing is left in the folder.
        assert_eq!(
            std::fs::read_dir(dir.path().join("_tmp")).unwrap().count(),
            0
        );
    }

    #[test]
    fn without_disk_use_the_limit_is_an_error() {
        let memory = SortMemory {
            max_bytes: 10_000,
            spill_dir: None,
        };
        let err = sort_all(memory, &documents()).unwrap_err();
        assert_eq!(err.code, 292);
        assert_eq!(err.code_name(), "QueryExceededMemoryLimitNoDiskUseAllowed");
        assert!(err.message.contains("10000 bytes"), "{}", err.message);
        // Under the limit it sorts in memory.
        let memory = SortMemory {
            max_bytes: 10_000_000,
            spill_dir: None,
        };
        assert_eq!(sort_all(memory, &documents()).unwrap().1.len(), 2_000);
    }
}
