//! The tailstream server as a library: connections, command dispatch, one file per
//! command family. The `tailstream` binary (main.rs) starts it on its listeners;
//! [`embedded`] runs commands in-process without a socket (the `command` fuzz target).

pub mod auth;
pub mod commands;
pub mod config;
pub mod config_file;
pub mod conn;
pub mod current_op;
pub mod disk_space;
pub mod embedded;
pub mod error_labels;
pub mod fcv;
pub mod http;
pub mod index_filters;
pub mod ingress;
pub mod io_threads;
pub mod local_sessions;
pub mod logging;
pub mod metrics;
pub mod profiler;
pub mod replset;
pub mod rw_defaults;
pub mod sessions;
pub mod state;
pub mod tls;
pub mod top;
pub mod transactions;
