//! What the change-stream benchmark reads from and does to this machine beyond
//! tailstream-bench-common: the monotonic clock as i64, the page cache, free
//! disk space, the open-files limit.

use std::{fs, path::Path};

/// CLOCK_MONOTONIC in nanoseconds (tailstream-bench-common's `mono_ns`) as an
/// i64: the send stamp travels in the document as a BSON int64, and a latency
/// is the difference of two such stamps.
pub fn mono_ns() -> i64 {
    tailstream_bench_common::machine::mono_ns() as i64
}

/// Empties the page cache (root only), so that a read afterwards comes from the disk.
pub fn drop_caches() -> bool {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

/// Bytes available to us on the filesystem of `path`.
pub fn free_disk_bytes(path: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs fills the struct we pass; `c` is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Raises the soft limit of open files to the hard limit: 1,000 streams are
/// 1,000 connections on each side, and the server inherits the limit from us.
pub fn raise_nofile_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit on a struct we own.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 0;
        }
        r.rlim_cur = r.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur as u64
    }
}
