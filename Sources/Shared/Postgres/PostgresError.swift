/// An error from PostgreSQL or from talking to it.
///
/// Server errors carry the SQLSTATE (`23505` is a unique violation) and PostgreSQL's primary message.
/// Of those, only data exceptions (class 22) quote a value they were given, and that quote is cut out,
/// so no bound value reaches a log through them.
public struct PostgresError: Error, Equatable, CustomStringConvertible {
    /// What kind of failure this is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Base: String, Hashable, Sendable {
            case connection, busy, server, decoding, closed, misuse
        }

        fileprivate let base: Base

        /// The server could not be reached, or the connection broke.
        public static let connection = Code(base: .connection)
        /// No connection of the pool came free in time: PostgreSQL answers, and every connection is busy (long
        /// statements, or callers queued behind a lock). Unavailable, but not an outage.
        public static let busy = Code(base: .busy)
        /// The server refused the statement; see ``PostgresError/sqlState``.
        public static let server = Code(base: .server)
        /// A value in a row is not of the Swift type asked for.
        public static let decoding = Code(base: .decoding)
        /// The client was shut down.
        public static let closed = Code(base: .closed)
        /// A session was used by two tasks at once, or after its lease (a defect of the caller).
        public static let misuse = Code(base: .misuse)

        public var description: String { self.base.rawValue }
    }

    /// The kind of failure.
    public let code: Code
    /// The five-character SQLSTATE for server errors.
    public let sqlState: String?
    /// A description for people.
    public let message: String
    /// Whether a change may have been committed though this error says the call failed: the connection was lost
    /// (``code`` is ``Code/connection``) after a statement that commits went out (or began to), before its answer
    /// came back. That is an autocommitted write, or a `COMMIT`. The server may have committed it and lost only the
    /// answer: a network cut, a crash or failover in between, or a backend terminated while it waited for a
    /// synchronous standby, which keeps what it committed locally. Never set for a single statement inside an
    /// open transaction (its transaction dies with the connection) or for a read. Whoever sent the change must look
    /// before sending it again.
    public let outcomeUnknown: Bool

    /// Creates an error.
    public init(_ code: Code, sqlState: String? = nil, _ message: String, outcomeUnknown: Bool = false) {
        self.code = code
        self.sqlState = sqlState
        self.message = message
        self.outcomeUnknown = outcomeUnknown
    }

    /// SQLSTATE 23505: a unique constraint refused the row.
    public var isUniqueViolation: Bool { self.sqlState == "23505" }

    /// Whether the failure is one of reaching PostgreSQL rather than of the statement.
    public var isConnectionFailure: Bool {
        self.code == .connection || self.code == .closed
            // Class 08 is connection exceptions; 57P01-57P03 are shutdowns and "cannot connect now".
            || (self.sqlState.map { $0.hasPrefix("08") || $0.hasPrefix("57P") } ?? false)
    }

    /// SQLSTATE 25006: the session's server takes no writes. A primary demoted in a failover (or a standby
    /// behind a stale address) keeps its sessions open; only a new connection can reach the new primary.
    public var isReadOnlyServer: Bool { self.sqlState == "25006" }

    /// SQLSTATE 42P01, 42703 or 42883: a table, column or function the statement names is not there. Tollgate's
    /// own statements meet that on a schema older than the binary (started before `migrate` finished, or after
    /// it failed), or through a defect: ``SchemaCheck`` tells which. Not ``isUnavailable``: a defect must not
    /// read as an outage.
    public var isSchemaBehind: Bool { ["42P01", "42703", "42883"].contains(self.sqlState) }

    /// Whether PostgreSQL cannot serve right now and the same statement may succeed shortly: unreachable,
    /// no connection free in time, the statement cancelled by `statement_timeout` (57014) or
    /// `lock_timeout` (55P03), which is what a stalled server or a long-held lock looks like, a
    /// serialization failure or deadlock (40001, 40P01), a server that takes no writes (25006), or one
    /// short of resources (class 53: disk full, out of memory, too many connections) or failing its
    /// storage (class 58: an I/O error).
    public var isUnavailable: Bool {
        guard !self.isConnectionFailure, self.code != .busy else { return true }
        switch self.sqlState {
        case "57014", "55P03", "40001", "40P01", "25006": return true
        case let state?: return state.hasPrefix("53") || state.hasPrefix("58")
        case nil: return false
        }
    }

    public var description: String {
        let unknown = self.outcomeUnknown ? " (the change may have been committed)" : ""
        if let sqlState { return "PostgreSQL \(self.code) \(sqlState): \(self.message)\(unknown)" }
        return "PostgreSQL \(self.code): \(self.message)\(unknown)"
    }
}
