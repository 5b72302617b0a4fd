//! openraft's `SnapshotData`: a snapshot file (`tailstream_engine::repl::snapshot`)
//! with its path, so openraft's chunked transport reads and writes it on disk (the
//! sender reads it, the receiver writes it at the offsets sent) and the state machine
//! knows which file to install.
//!
//! [`SnapshotFile::none`] stands for the bytes of a snapshot just built: openraft
//! 0.9 keeps only the metadata of what `build_snapshot` returns, and the file is
//! written when a member first needs it (`get_current_snapshot`). It reads as empty
//! and refuses writes.
//!
//! A file made to receive into ([`SnapshotFile::create`]) is deleted when dropped:
//! openraft drops a received snapshot without installing it when it is no newer than
//! what the member has committed (a leader that resent it after a slow install), and
//! the bytes of a send abandoned midway with it. An installed one was renamed away
//! first (the engine's `repl_snapshot_install`), so its deletion finds nothing.

use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

pub struct SnapshotFile {
    file: Option<(tokio::fs::File, PathBuf)>,
    /// Received: the path is deleted on drop (see the module's doc).
    remove_on_drop: bool,
}

impl SnapshotFile {
    /// No file (see the module's doc).
    pub fn none() -> SnapshotFile {
        SnapshotFile {
            file: None,
            remove_on_drop: false,
        }
    }

    /// The file at `path`, to send.
    pub async fn open(path: &Path) -> std::io::Result<SnapshotFile> {
        let file = tokio::fs::File::open(path).await?;
        Ok(SnapshotFile {
            file: Some((file, path.to_path_buf())),
            remove_on_drop: false,
        })
    }

    /// A new file at `path`, to receive into; deleted when dropped unless it was
    /// moved away.
    pub async fn create(path: &Path) -> std::io::Result<SnapshotFile> {
        let file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .await?;
        Ok(SnapshotFile {
            file: Some((file, path.to_path_buf())),
            remove_on_drop: true,
        })
    }

    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(|(_, p)| p.as_path())
    }

    fn file(&mut self) -> Option<Pin<&mut tokio::fs::File>> {
        self.file.as_mut().map(|(f, _)| Pin::new(f))
    }
}

impl Drop for SnapshotFile {
    fn drop(&mut self) {
        if let (true, Some((_, path))) = (self.remove_on_drop, &self.file) {
            // Not found when it was installed (renamed away): nothing to do.
            let _ = std::fs::remove_file(path);
        }
    }
}

fn no_file() -> std::io::Error {
    std::io::Error::other("a snapshot not written to a file")
}

impl AsyncRead for SnapshotFile {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut().file() {
            Some(f) => f.poll_read(cx, buf),
            None => Poll::Ready(Ok(())),
        }
    }
}

impl AsyncWrite for SnapshotFile {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut().file() {
            Some(f) => f.poll_write(cx, buf),
            None => Poll::Ready(Err(no_file())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut().file() {
            Some(f) => f.poll_flush(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut().file() {
            Some(f) => f.poll_shutdown(cx),
            None => Poll::Ready(Ok(())),
        }
    }
}

impl AsyncSeek for SnapshotFile {
    fn start_seek(self: Pin<&mut Self>, position: SeekFrom) -> std::io::Result<()> {
        match self.get_mut().file() {
            Some(f) => f.start_seek(position),
            None => Ok(()),
        }
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<u64>> {
        match self.get_mut().file() {
            Some(f) => f.poll_complete(cx),
            None => Poll::Ready(Ok(0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

    /// Written at offsets as openraft's receiver writes chunks, read back whole as its
    /// sender reads; no file reads as empty and takes no writes.
    #[tokio::test]
    async fn a_file_takes_chunks_at_offsets_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.snap");
        let mut f = SnapshotFile::create(&path).await.unwrap();
        f.write_all(b"hello ").await.unwrap();
        f.seek(SeekFrom::Start(6)).await.unwrap();
        f.write_all(b"world").await.unwrap();
        f.shutdown().await.unwrap();
        assert_eq!(f.path(), Some(path.as_path()));
        let mut back = String::new();
        SnapshotFile::open(&path)
            .await
            .unwrap()
            .read_to_string(&mut back)
            .await
            .unwrap();
        assert_eq!(back, "hello world");
        let mut none = SnapshotFile::none();
        let mut empty = Vec::new();
        none.read_to_end(&mut empty).await.unwrap();
        assert!(empty.is_empty());
        assert!(none.write_all(b"x").await.is_err());
    }

    /// A received file dropped without being installed leaves nothing; one moved away
    /// (installed) stays where it was moved; a file opened to send is kept.
    #[tokio::test]
    async fn a_received_file_is_deleted_unless_moved_away() {
        let dir = tempfile::tempdir().unwrap();
        let dropped = dir.path().join("receiving-1.snap");
        let mut f = SnapshotFile::create(&dropped).await.unwrap();
        f.write_all(b"half a snapshot").await.unwrap();
        f.flush().await.unwrap();
        assert!(dropped.exists());
        drop(f);
        assert!(!dropped.exists(), "a dropped receive's file was left");

        let received = dir.path().join("receiving-2.snap");
        let installed = dir.path().join("installing.snap");
        let mut f = SnapshotFile::create(&received).await.unwrap();
        f.write_all(b"whole").await.unwrap();
        f.flush().await.unwrap();
        std::fs::rename(&received, &installed).unwrap();
        drop(f);
        assert_eq!(std::fs::read(&installed).unwrap(), b"whole");

        drop(SnapshotFile::open(&installed).await.unwrap());
        assert!(installed.exists(), "a file opened to send was deleted");
    }
}
