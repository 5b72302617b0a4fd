//! MongoDB-style errors: every failure that reaches a client carries a numeric
//! `code`, its `codeName` and a human message, exactly as mongod reports them.

use bson::Document;
use std::fmt;

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    pub code: i32,
    pub message: String,
    /// Extra fields merged into the error reply (e.g. `keyPattern`/`keyValue` for 11000).
    pub info: Option<Document>,
    /// `errorLabels` such as `ResumableChangeStreamError`.
    pub labels: Vec<String>,
}

impl Error {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Error {
            code,
            message: message.into(),
            info: None,
            labels: Vec::new(),
        }
    }
    pub fn with_info(mut self, info: Document) -> Self {
        self.info = Some(info);
        self
    }
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.labels.push(label.into());
        self
    }
    pub fn code_name(&self) -> String {
        code_name(self.code)
    }
    pub fn internal(msg: impl Into<String>) -> Self {
        Self::new(codes::INTERNAL_ERROR, msg)
    }
    pub fn bad_value(msg: impl Into<String>) -> Self {
        Self::new(codes::BAD_VALUE, msg)
    }
    pub fn failed_to_parse(msg: impl Into<String>) -> Self {
        Self::new(codes::FAILED_TO_PARSE, msg)
    }
    /// A required command field that is absent: mongod's command parser (IDL) says
    /// so with 40414 (IDLFailedToParse).
    pub fn missing_field(path: &str) -> Self {
        Self::new(
            40414,
            format!("BSON field '{path}' is missing but a required field"),
        )
    }
    pub fn type_mismatch(msg: impl Into<String>) -> Self {
        Self::new(codes::TYPE_MISMATCH, msg)
    }
    pub fn invalid_options(msg: impl Into<String>) -> Self {
        Self::new(codes::INVALID_OPTIONS, msg)
    }
    /// A "Location" error: mongod's numbered assertion sites (e.g. 40324 for an unknown stage).
    pub fn location(code: i32, msg: impl Into<String>) -> Self {
        Self::new(code, msg)
    }
    /// Errors that end the whole operation wherever they arise: it was interrupted
    /// (maxTimeMS, a client gone, killed) or its JavaScript failed. A filter that hits
    /// one fails the command instead of counting the document as not matching.
    pub fn ends_operation(&self) -> bool {
        matches!(
            self.code,
            codes::MAX_TIME_MS_EXPIRED
                | codes::INTERRUPTED
                | codes::CLIENT_DISCONNECT
                | codes::JS_INTERPRETER_FAILURE
                | codes::EXCEEDED_MEMORY_LIMIT
        ) || SCRIPT_ARGUMENT_ERRORS.contains(&self.code)
    }
}

/// Errors raised while evaluating `$function` / `$accumulator` arguments: like a
/// script's own failure they fail the operation rather than count as a non-match.
const SCRIPT_ARGUMENT_ERRORS: [i32; 4] = [31266, 4544711, 4544712, 4545000];

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.code_name(), self.code, self.message)
    }
}

impl std::error::Error for Error {}

/// Error codes used by this project, with mongod's numbering (src/mongo/base/error_codes.yml).
pub mod codes {
    pub const INTERNAL_ERROR: i32 = 1;
    pub const BAD_VALUE: i32 = 2;
    pub const NO_SUCH_KEY: i32 = 4;
    pub const GRAPH_CONTAINS_CYCLE: i32 = 5;
    pub const HOST_UNREACHABLE: i32 = 6;
    pub const FAILED_TO_PARSE: i32 = 9;
    pub const CANNOT_MUTATE_OBJECT: i32 = 10;
    pub const USER_NOT_FOUND: i32 = 11;
    pub const UNSUPPORTED_FORMAT: i32 = 12;
    pub const UNAUTHORIZED: i32 = 13;
    pub const PROTOCOL_ERROR: i32 = 17;
    pub const AUTHENTICATION_FAILED: i32 = 18;
    pub const ROLE_NOT_FOUND: i32 = 31;
    pub const INVALID_ROLE_MODIFICATION: i32 = 49;
    pub const MECHANISM_UNAVAILABLE: i32 = 334;
    /// createUser of a user that exists (mongod's Location51003).
    pub const USER_ALREADY_EXISTS: i32 = 51003;
    /// createRole of a role that exists (mongod's Location51002).
    pub const ROLE_ALREADY_EXISTS: i32 = 51002;
    pub const TYPE_MISMATCH: i32 = 14;
    pub const OVERFLOW: i32 = 15;
    pub const ILLEGAL_OPERATION: i32 = 20;
    pub const EMPTY_ARRAY_OPERATION: i32 = 21;
    pub const ALREADY_INITIALIZED: i32 = 23;
    pub const INVALID_BSON: i32 = 22;
    pub const NAMESPACE_NOT_FOUND: i32 = 26;
    pub const INDEX_NOT_FOUND: i32 = 27;
    pub const PATH_NOT_VIABLE: i32 = 28;
    pub const CANNOT_CREATE_INDEX: i32 = 67;
    pub const CONFLICTING_UPDATE_OPERATORS: i32 = 40;
    pub const CURSOR_NOT_FOUND: i32 = 43;
    pub const NO_MATCHING_DOCUMENT: i32 = 47;
    pub const NAMESPACE_EXISTS: i32 = 48;
    pub const MAX_TIME_MS_EXPIRED: i32 = 50;
    pub const DOLLAR_PREFIXED_FIELD_NAME: i32 = 52;
    pub const INVALID_ID_FIELD: i32 = 53;
    pub const NOT_SINGLE_VALUE_FIELD: i32 = 54;
    pub const COMMAND_NOT_FOUND: i32 = 59;
    pub const IMMUTABLE_FIELD: i32 = 66;
    pub const INVALID_OPTIONS: i32 = 72;
    pub const INVALID_NAMESPACE: i32 = 73;
    pub const INDEX_OPTIONS_CONFLICT: i32 = 85;
    pub const INDEX_KEY_SPECS_CONFLICT: i32 = 86;
    pub const INCOMPATIBLE_COLLATION_VERSION: i32 = 161;
    pub const AMBIGUOUS_INDEX_KEY_PATTERN: i32 = 181;
    pub const NOT_WRITABLE_PRIMARY: i32 = 10107;
    pub const OPERATION_FAILED: i32 = 96;
    pub const UNSATISFIABLE_WRITE_CONCERN: i32 = 100;
    pub const OUT_OF_DISK_SPACE: i32 = 14031;
    pub const INVALID_LENGTH: i32 = 16;
    pub const INVALID_PIPELINE_OPERATOR: i32 = 168;
    pub const COMMAND_NOT_SUPPORTED: i32 = 115;
    pub const DOCUMENT_VALIDATION_FAILURE: i32 = 121;
    pub const INVALID_INDEX_SPECIFICATION_OPTION: i32 = 197;
    pub const QUERY_FEATURE_NOT_ALLOWED: i32 = 224;
    pub const CAPPED_POSITION_LOST: i32 = 136;
    pub const QUERY_PLAN_KILLED: i32 = 175;
    pub const INTERRUPTED: i32 = 11601;
    pub const CHANGE_STREAM_FATAL_ERROR: i32 = 280;
    pub const CHANGE_STREAM_HISTORY_LOST: i32 = 286;
    /// Tailstream's own (issue 28): a consumer of a change stream group that no longer
    /// holds the bucket it reads or commits (no mongod code means this).
    pub const CHANGE_STREAM_CONSUMER_FENCED: i32 = 28400;
    pub const INVALID_RESUME_TOKEN: i32 = 260;
    pub const BSON_OBJECT_TOO_LARGE: i32 = 10334;
    pub const DUPLICATE_KEY: i32 = 11000;
    pub const INDEX_ALREADY_EXISTS: i32 = 68;
    pub const NO_SUCH_TRANSACTION: i32 = 251;
    pub const WRITE_CONFLICT: i32 = 112;
    pub const SNAPSHOT_TOO_OLD: i32 = 239;
    pub const TRANSACTION_TOO_LARGE: i32 = 257;
    pub const TRANSACTION_TOO_OLD: i32 = 225;
    pub const TRANSACTION_COMMITTED: i32 = 256;
    pub const CONFLICTING_OPERATION_IN_PROGRESS: i32 = 117;
    pub const TOO_MANY_LOGICAL_SESSIONS: i32 = 261;
    pub const UNRECOGNIZED_COMMAND_FIELD: i32 = 40415;
    pub const OPERATION_NOT_SUPPORTED_IN_TRANSACTION: i32 = 263;
    pub const API_STRICT_ERROR: i32 = 323;
    pub const API_VERSION_ERROR: i32 = 322;
    pub const API_PARAMETERS_WITHOUT_VERSION: i32 = 4886600;
    pub const API_VERSION_REQUIRED: i32 = 498870;
    pub const JS_INTERPRETER_FAILURE: i32 = 139;
    pub const EXCEEDED_MEMORY_LIMIT: i32 = 146;
    pub const CLIENT_DISCONNECT: i32 = 279;
}

/// mongod's `codeName` for a code; unnamed assertion sites are reported as `Location<code>`.
pub fn code_name(code: i32) -> String {
    let name = match code {
        0 => "OK",
        1 => "InternalError",
        2 => "BadValue",
        4 => "NoSuchKey",
        47 => "NoMatchingDocument",
        5 => "GraphContainsCycle",
        6 => "HostUnreachable",
        8 => "UnknownError",
        9 => "FailedToParse",
        10 => "CannotMutateObject",
        11 => "UserNotFound",
        12 => "UnsupportedFormat",
        13 => "Unauthorized",
        14 => "TypeMismatch",
        15 => "Overflow",
        16 => "InvalidLength",
        17 => "ProtocolError",
        18 => "AuthenticationFailed",
        20 => "IllegalOperation",
        21 => "EmptyArrayOperation",
        22 => "InvalidBSON",
        23 => "AlreadyInitialized",
        24 => "LockTimeout",
        26 => "NamespaceNotFound",
        27 => "IndexNotFound",
        28 => "PathNotViable",
        29 => "NonExistentPath",
        30 => "InvalidPath",
        31 => "RoleNotFound",
        40 => "ConflictingUpdateOperators",
        43 => "CursorNotFound",
        48 => "NamespaceExists",
        49 => "InvalidRoleModification",
        50 => "MaxTimeMSExpired",
        51 => "DollarPrefixedFieldName",
        52 => "DollarPrefixedFieldName",
        53 => "InvalidIdField",
        54 => "NotSingleValueField",
        55 => "InvalidDBRef",
        56 => "EmptyFieldName",
        57 => "DottedFieldName",
        59 => "CommandNotFound",
        61 => "ShardKeyNotFound",
        66 => "ImmutableField",
        67 => "CannotCreateIndex",
        68 => "IndexAlreadyExists",
        72 => "InvalidOptions",
        73 => "InvalidNamespace",
        64 => "WriteConcernFailed",
        74 => "NodeNotFound",
        79 => "UnknownReplWriteConcern",
        85 => "IndexOptionsConflict",
        86 => "IndexKeySpecsConflict",
        91 => "ShutdownInProgress",
        93 => "InvalidReplicaSetConfig",
        95 => "NotSecondary",
        103 => "NewReplicaSetConfigurationIncompatible",
        189 => "PrimarySteppedDown",
        96 => "OperationFailed",
        100 => "UnsatisfiableWriteConcern",
        14031 => "OutOfDiskSpace",
        112 => "WriteConflict",
        115 => "CommandNotSupported",
        117 => "ConflictingOperationInProgress",
        121 => "DocumentValidationFailure",
        125 => "CommandFailed",
        136 => "CappedPositionLost",
        175 => "QueryPlanKilled",
        139 => "JSInterpreterFailure",
        146 => "ExceededMemoryLimit",
        166 => "CommandNotSupportedOnView",
        168 => "InvalidPipelineOperator",
        161 => "IncompatibleCollationVersion",
        171 => "CannotIndexParallelArrays",
        181 => "AmbiguousIndexKeyPattern",
        197 => "InvalidIndexSpecificationOption",
        224 => "QueryFeatureNotAllowed",
        239 => "SnapshotTooOld",
        225 => "TransactionTooOld",
        251 => "NoSuchTransaction",
        256 => "TransactionCommitted",
        257 => "TransactionTooLarge",
        334 => "MechanismUnavailable",
        260 => "InvalidResumeToken",
        261 => "TooManyLogicalSessions",
        262 => "ExceededTimeLimit",
        263 => "OperationNotSupportedInTransaction",
        276 => "IndexBuildAborted",
        279 => "ClientDisconnect",
        280 => "ChangeStreamFatalError",
        286 => "ChangeStreamHistoryLost",
        28400 => "ChangeStreamConsumerFenced",
        291 => "NoQueryExecutionPlans",
        292 => "QueryExceededMemoryLimitNoDiskUseAllowed",
        322 => "APIVersionError",
        323 => "APIStrictError",
        10107 => "NotWritablePrimary",
        10334 => "BSONObjectTooLarge",
        11000 => "DuplicateKey",
        11600 => "InterruptedAtShutdown",
        11601 => "Interrupted",
        11602 => "InterruptedDueToReplStateChange",
        13435 => "NotPrimaryNoSecondaryOk",
        13436 => "NotPrimaryOrSecondary",
        40415 => "Location40415",
        _ => return format!("Location{code}"),
    };
    name.to_string()
}
