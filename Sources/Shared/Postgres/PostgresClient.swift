import Logging
import NIOPosix
import Synchronization

/// An `async` PostgreSQL client over libpq: a pool of connections, each used by one caller at a time,
/// whose blocking calls run on threads of the client's own (as many as connections), never on Swift's
/// cooperative pool.
///
/// Connections open lazily, and a connection that broke is replaced on its next use, so the client
/// recovers by itself when PostgreSQL comes back.
public final class PostgresClient: Sendable {
    private struct State {
        var idle: [PostgresSlot] = []
        var opened = 0
        var waiters: [CheckedContinuation<PostgresSlot, any Error>] = []
        var closed = false
    }

    private let url: String
    private let maxConnections: Int
    private let threadPool: NIOThreadPool
    private let state = Mutex(State())

    /// Creates a client for a `postgres://` URL with at most `connections` connections.
    public init(url: String, connections: Int = 8) {
        self.url = url
        self.maxConnections = max(1, connections)
        self.threadPool = NIOThreadPool(numberOfThreads: self.maxConnections)
        self.threadPool.start()
    }

    /// Why libpq cannot use `url`, or `nil` when it can (parsing only; reaching the server is not tried).
    public static func problem(in url: String) -> String? {
        PostgresConnection.problem(in: url)
    }

    /// Runs one statement on any free connection.
    @discardableResult
    public func query(_ sql: String, _ parameters: [any PostgresEncodable] = []) async throws -> PostgresResult {
        try await self.withConnection { try await $0.query(sql, parameters) }
    }

    /// Leases one connection for the duration of `body`.
    public func withConnection<T>(_ body: (PostgresSession) async throws -> T) async throws -> T {
        let slot = try await self.acquire()
        defer { self.release(slot) }
        return try await body(PostgresSession(slot: slot, threadPool: self.threadPool, url: self.url))
    }

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws.
    public func withTransaction<T>(_ body: (PostgresSession) async throws -> T) async throws -> T {
        try await self.withConnection { session in
            try await session.query("BEGIN")
            let value: T
            do {
                value = try await body(session)
            } catch {
                await session.rollback()
                throw error
            }
            do {
                try await session.query("COMMIT")
            } catch {
                await session.rollback()
                throw error
            }
            return value
        }
    }

    /// Whether PostgreSQL answers a trivial query.
    public func ping() async -> Bool {
        (try? await self.query("SELECT 1")) != nil
    }

    /// Fails waiters, refuses new leases and stops the client's threads.
    public func shutdown() async {
        let waiters = self.state.withLock { state in
            state.closed = true
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(throwing: PostgresError(.closed, "the PostgreSQL client is shut down")) }
        try? await self.threadPool.shutdownGracefully()
    }

    private func acquire() async throws -> PostgresSlot {
        try await withCheckedThrowingContinuation { continuation in
            let slot = self.state.withLock { state -> Result<PostgresSlot, PostgresError>? in
                if state.closed { return .failure(PostgresError(.closed, "the PostgreSQL client is shut down")) }
                if let slot = state.idle.popLast() { return .success(slot) }
                if state.opened < self.maxConnections {
                    state.opened += 1
                    return .success(PostgresSlot())
                }
                state.waiters.append(continuation)
                return nil
            }
            if let slot { continuation.resume(with: slot) }
        }
    }

    private func release(_ slot: PostgresSlot) {
        let waiter = self.state.withLock { state -> CheckedContinuation<PostgresSlot, any Error>? in
            if state.waiters.isEmpty {
                state.idle.append(slot)
                return nil
            }
            return state.waiters.removeFirst()
        }
        waiter?.resume(returning: slot)
    }
}

/// A pool slot: holds a connection (or none yet, or none after it broke).
///
/// `@unchecked Sendable`: a slot is leased to one caller at a time by ``PostgresClient``, and that caller
/// awaits each blocking call before making the next, so `connection` is never touched concurrently.
final class PostgresSlot: @unchecked Sendable {
    var connection: PostgresConnection?
}

/// A leased connection, valid inside `withConnection`/`withTransaction`.
public struct PostgresSession: Sendable {
    let slot: PostgresSlot
    let threadPool: NIOThreadPool
    let url: String

    /// Runs one statement with `$1…` parameters.
    @discardableResult
    public func query(_ sql: String, _ parameters: [any PostgresEncodable] = []) async throws -> PostgresResult {
        let texts = parameters.map(\.postgresText)
        return try await self.run { try $0.execute(sql, texts) }
    }

    /// Runs several statements in one round trip and returns their results in order; the first error is
    /// thrown. Use it for statements that do not depend on each other's results (e.g. BEGIN and the first
    /// statement, or the last writes and COMMIT).
    @discardableResult
    public func pipeline(_ statements: [(String, [any PostgresEncodable])]) async throws -> [PostgresResult] {
        let texts = statements.map { (sql: $0.0, parameters: $0.1.map(\.postgresText)) }
        return try await self.run { try $0.executePipeline(texts) }
    }

    /// Runs parameterless SQL text that may hold several statements (migrations).
    public func runScript(_ sql: String) async throws {
        try await self.run { try $0.executeScript(sql) }
    }

    /// Runs `body` on a thread of the client's pool. A pool already stopped would run it on the calling
    /// thread, one of Swift's cooperative pool, which blocking libpq calls must never hold: it is refused.
    private func run<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        let slot = self.slot
        let url = self.url
        return try await withCheckedThrowingContinuation { continuation in
            self.threadPool.submit { state in
                guard case .active = state else {
                    continuation.resume(throwing: PostgresError(.closed, "the PostgreSQL client is shut down"))
                    return
                }
                continuation.resume(with: Result { try Self.withConnection(slot: slot, url: url, body) })
            }
        }
    }

    /// Ends a transaction that failed part-way (harmless when none is open).
    public func rollback() async {
        do {
            try await self.query("ROLLBACK")
        } catch {
            // The session state is unknown: drop the connection rather than hand it out mid-transaction.
            self.slot.connection = nil
        }
    }

    /// Runs on a pool thread: (re)connects when needed, and forgets a connection that broke.
    private static func withConnection<T>(slot: PostgresSlot, url: String, _ body: (PostgresConnection) throws -> T) throws -> T {
        if slot.connection == nil || slot.connection?.isHealthy == false {
            slot.connection = try PostgresConnection(url: url)
        }
        guard let connection = slot.connection else { throw PostgresError(.connection, "not connected") }
        do {
            return try body(connection)
        } catch let error as PostgresError where error.code == .connection {
            slot.connection = nil
            throw error
        }
    }
}
