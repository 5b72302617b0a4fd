//! mongod's error categories behind the labels the server puts on errors: a retryable
//! write's `RetryableWriteError` and a transaction's `TransientTransactionError` both
//! follow mongod's `ErrorCodes::isRetriableError` (see `transactions::label_transient`
//! and the fail points of `commands::testing`).

/// mongod's RetriableError category: network and primary-change errors after which a
/// retryable write, or a whole transaction, may be run again.
pub const RETRYABLE_WRITE_CODES: &[i32] = &[
    6,     // HostUnreachable
    7,     // HostNotFound
    89,    // NetworkTimeout
    91,    // ShutdownInProgress
    189,   // PrimarySteppedDown
    262,   // ExceededTimeLimit
    9001,  // SocketException
    10107, // NotWritablePrimary
    11600, // InterruptedAtShutdown
    11602, // InterruptedDueToReplStateChange
    13435, // NotPrimaryNoSecondaryOk
    13436, // NotPrimaryOrSecondary
];
