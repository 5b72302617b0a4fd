//! What the Tailstream benchmarks (`bench/ingest`, `bench/bus`,
//! `bench/changestream`) share, so that each measures and reports the same way:
//!
//! - [`server`]: a Tailstream server started on a free port with a fresh
//!   temporary `--dbpath`, stopped and deleted at the end;
//! - [`machine`]: the clocks, the CPU ticks and I/O counters of a process
//!   (`/proc`), waiting for a process to go idle, and the machine for the
//!   report's header;
//! - [`stats`]: latency percentiles;
//! - [`fmt`]: how the reports write numbers.

pub mod fmt;
pub mod machine;
pub mod server;
pub mod stats;
