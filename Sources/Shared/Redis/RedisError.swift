/// An error talking to Redis.
///
/// Server errors carry Redis' own message (`ERR …`, `NOSCRIPT …`, `WRONGTYPE …`); connection errors carry
/// hiredis' description. Neither ever includes the command's arguments, so receipt data cannot leak into logs.
public struct RedisError: Error, Equatable, CustomStringConvertible {
    /// What kind of failure this is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Base: String, Hashable, Sendable {
            case connection, refused, server, protocolViolation, closed
        }

        fileprivate let base: Base

        /// The connection could not be made, or broke while the command was in flight.
        public static let connection = Code(base: .connection)
        /// Redis refused the connection's `AUTH` or `SELECT` (a wrong password, user or database number).
        public static let refused = Code(base: .refused)
        /// Redis answered with an error reply.
        public static let server = Code(base: .server)
        /// Redis answered with something this client does not understand.
        public static let protocolViolation = Code(base: .protocolViolation)
        /// The client was shut down.
        public static let closed = Code(base: .closed)

        public var description: String { self.base.rawValue }
    }

    /// The kind of failure.
    public let code: Code
    /// Redis' or hiredis' message.
    public let message: String
    /// Whether the command had gone out, or may have, when its connection ended without its answer: Redis
    /// may have run it and lost only the answer. `false` for a command that was never sent (no connection,
    /// a refused `AUTH`) and for every answer Redis gave.
    public private(set) var mayHaveRun = false

    /// Creates an error of a kind with a message.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// The failure of a connection's `AUTH` or `SELECT`, from Redis' error reply: a refusal, unless the
    /// server could not serve anyone just then. A server at `maxclients` writes its error to every new
    /// connection before closing it, which arrives as the answer to `AUTH`; a long script answers `BUSY`
    /// to `SELECT`. Those are outages (``isUnavailable``), not a bad `TOLLGATE_REDIS_URL`. Redis quotes
    /// the arguments of a command it does not know ("unknown command 'AUTH', with args beginning with:
    /// '<password>'", where AUTH is renamed away or a proxy lacks it): they are cut off.
    static func setupFailed(_ reply: String) -> RedisError {
        let message = reply.range(of: ", with args beginning with").map { String(reply[..<$0.lowerBound]) } ?? reply
        return RedisError(RedisError(.server, message).isServerBusy ? .connection : .refused, message)
    }

    /// This failure, for a command that was in flight on the connection it ended.
    func inFlight() -> RedisError {
        var error = self
        error.mayHaveRun = true
        return error
    }

    /// This failure, for a command that never went out (it waited behind one that failed, or for a script
    /// to be loaded).
    func notSent() -> RedisError {
        var error = self
        error.mayHaveRun = false
        return error
    }

    /// Whether Redis said it does not know a script's SHA (after a restart or `SCRIPT FLUSH`).
    public var isNoScript: Bool { self.code == .server && self.message.hasPrefix("NOSCRIPT") }

    /// Whether Redis said the stream's consumer group does not exist (its data was lost or flushed).
    public var isNoGroup: Bool { self.code == .server && self.message.hasPrefix("NOGROUP") }

    /// Whether the failure is one of reaching Redis rather than of the command itself.
    public var isConnectionFailure: Bool { self.code == .connection || self.code == .refused || self.code == .closed }

    /// Whether Redis refused Tollgate's credentials, database or permissions: a connection's `AUTH` or
    /// `SELECT` failed, or a command was refused for want of them (`NOAUTH`, `NOPERM`). What
    /// `TOLLGATE_REDIS_URL` says (or what Redis' ACL gives its user) must change; retrying will not help
    /// until it does.
    public var isAccessRefused: Bool {
        self.code == .refused || (self.code == .server && ["NOAUTH", "NOPERM", "WRONGPASS"].contains(self.errorCode))
    }

    /// Whether Redis cannot serve right now and the same command may succeed shortly: unreachable, or
    /// reachable but still loading its data, without a primary, mid-failover, out of memory (`maxmemory`
    /// with `noeviction`), unable to persist (`MISCONF`), busy with a long script, or short of replicas.
    /// A command refused inside a script counts too: Redis 7 puts its error code first, Redis 6 wraps it
    /// (`ERR Error running script (…): @user_script:12: -OOM …`).
    /// So is a server at `maxclients`, which answers a new connection with an error before closing it,
    /// and one that refuses Tollgate's access (``isAccessRefused``): nothing can be done until that changes.
    public var isUnavailable: Bool {
        self.isConnectionFailure || self.isAccessRefused || self.isServerBusy
    }

    /// Whether Redis answered, but cannot serve anyone right now: the server's conditions of ``isUnavailable``.
    private var isServerBusy: Bool {
        guard self.code == .server else { return false }
        if self.message.hasPrefix("ERR max number of clients reached") { return true }
        return ["LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "OOM", "MISCONF", "BUSY", "NOREPLICAS"].contains(self.errorCode)
    }

    /// Whether the server is a replica now (`READONLY`): a primary demoted in a failover whose address
    /// still leads to it. Only a new connection can reach the new primary.
    public var isReadOnly: Bool { self.code == .server && self.errorCode == "READONLY" }

    /// The error reply's code (`ERR`, `OOM`, …): inside a script, the refused command's.
    private var errorCode: Substring {
        let errorCode = self.message.prefix { $0 != " " }
        if errorCode == "ERR", self.message.hasPrefix("ERR Error running script"), let dash = self.message.range(of: ": -") {
            return self.message[dash.upperBound...].prefix { $0 != " " }
        }
        return errorCode
    }

    public var description: String { "Redis \(self.code): \(self.message)" }
}
