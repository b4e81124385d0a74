import Logging
import NIOPosix
import Synchronization

/// An `async` PostgreSQL client over libpq: a pool of connections, each used by one caller at a time,
/// whose blocking calls run on threads of the client's own (as many as connections), never on Swift's
/// cooperative pool.
///
/// Connections open lazily, and a connection that broke is replaced when it is next leased (never within
/// a lease), so the client recovers by itself when PostgreSQL comes back.
///
/// A connection the server will not open while this client has others (its `max_connections`, or a role's or
/// database's connection limit, reached) does not fail the caller: it waits for one of the others, and the client
/// opens no other connection for ``openPause``. The pool runs smaller rather than failing its callers; with no
/// connection left, every caller waiting gets the refusal.
///
/// Nothing waits for good: a caller that finds every connection busy for `acquireTimeout` gets an error
/// (``PostgresError/Code/busy``, a 503 in the API), one whose task is cancelled meanwhile stops waiting
/// (`CancellationError`), and each statement is bounded by the session's `statement_timeout` (see
/// ``PostgresConnection``), so a stalled PostgreSQL (a lock held by an idle transaction, a stuck disk)
/// is reported instead of holding requests and health checks. A server that does not answer even then
/// (a stopped backend) loses the connection ``PostgresConnection/answerGrace`` later.
public final class PostgresClient: Sendable {
    /// A slot for a caller: one that is free, or a new one whose connection the caller opens (`isNew`).
    private typealias Lease = (slot: PostgresSlot, isNew: Bool)

    private struct Waiter {
        let id: UInt64
        let deadline: ContinuousClock.Instant
        let continuation: CheckedContinuation<Lease, any Error>
    }

    private struct State {
        var idle: [PostgresSlot] = []
        /// Slots made, those whose first connection is being opened included.
        var opened = 0
        /// In order of their deadlines, which is the order they came in, except for a caller that waits again
        /// after a connection could not be opened (it keeps the deadline it began with).
        var waiters: [Waiter] = []
        var lastWaiterID: UInt64 = 0
        /// Whether a task serves the waiters (deadlines, the end of a pause); one at most, only while any wait.
        var sweeping = false
        var closed = false
        /// Until when no connection is opened while others are: the last one could not be.
        var openPausedUntil: ContinuousClock.Instant?

        /// Whether a connection may be opened now: below the size, and not paused after a refusal while the
        /// pool has others (with none, nothing else could serve the caller).
        func mayOpen(below size: Int, now: ContinuousClock.Instant) -> Bool {
            self.opened < size && (self.opened == 0 || self.openPausedUntil.map { $0 <= now } ?? true)
        }

        mutating func newSlot() -> Lease {
            self.opened += 1
            return (PostgresSlot(), true)
        }
    }

    /// How long the client waits before opening another connection after one could not be opened.
    static let openPause = Duration.seconds(1)

    private let url: String
    private let maxConnections: Int
    private let acquireTimeout: Duration
    private let threadPool: NIOThreadPool
    private let state = Mutex(State())

    /// Creates a client for a `postgres://` URL with at most `connections` connections; a caller waits at
    /// most `acquireTimeout` for one.
    public init(url: String, connections: Int = 8, acquireTimeout: Duration = .seconds(10)) {
        self.url = url
        self.maxConnections = max(1, connections)
        self.acquireTimeout = acquireTimeout
        self.threadPool = NIOThreadPool(numberOfThreads: self.maxConnections)
        self.threadPool.start()
    }

    /// Why libpq cannot use `url`, or `nil` when it can (parsing only; reaching the server is not tried).
    public static func problem(in url: String) -> String? {
        PostgresConnection.problem(in: url)
    }

    /// A warning when `url` reaches a server on another machine without verifying its certificate (see
    /// ``PostgresConnection/transportWarning(in:environment:)``).
    public static func transportWarning(in url: String, environment: [String: String]) -> String? {
        PostgresConnection.transportWarning(in: url, environment: environment)
    }

    /// Runs one statement on any free connection.
    @discardableResult
    public func query(_ sql: String, _ parameters: [any PostgresEncodable] = []) async throws -> PostgresResult {
        try await self.withConnection { try await $0.query(sql, parameters) }
    }

    /// Leases one connection for the duration of `body`.
    public func withConnection<T>(_ body: (PostgresSession) async throws -> T) async throws -> T {
        let deadline = ContinuousClock.now + self.acquireTimeout
        var (slot, isNew) = try await self.acquire(until: deadline)
        while isNew {
            do {
                try await self.open(slot)
                isNew = false
            } catch {
                // The server refuses another connection (too many) or is not reached: wait for another slot.
                guard self.openFailed(error), ContinuousClock.now < deadline else { throw error }
                (slot, isNew) = try await self.acquire(until: deadline)
            }
        }
        slot.leased = true
        let result: Result<T, any Error>
        do {
            result = .success(try await body(PostgresSession(slot: slot, threadPool: self.threadPool, url: self.url)))
        } catch {
            result = .failure(error)
        }
        // A session kept past its lease is refused from here on, and a call it started in the lease ends
        // before the slot serves another (``PostgresSession``).
        await slot.endLease()
        self.release(slot)
        return try result.get()
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

    /// Fails waiters, refuses new leases, closes the idle connections on the client's threads (so the
    /// server sees them end) and stops those threads; work queued on them and not yet started is
    /// cancelled. A connection leased at that moment is closed when it is returned, on those threads if
    /// they still run, else when the client is freed.
    public func shutdown() async {
        let (waiters, idle) = self.state.withLock { state in
            state.closed = true
            defer {
                state.waiters.removeAll()
                state.idle.removeAll()
            }
            return (state.waiters, state.idle)
        }
        for waiter in waiters { waiter.continuation.resume(throwing: PostgresError(.closed, "the PostgreSQL client is shut down")) }
        for slot in idle { await PostgresSession(slot: slot, threadPool: self.threadPool, url: self.url).disconnect() }
        try? await self.threadPool.shutdownGracefully()
    }

    /// A free slot, or a new one to open; waits for one until `deadline`, or until the caller's task is
    /// cancelled (a worker's shutdown cutting its jobs off): then `CancellationError`.
    private func acquire(until deadline: ContinuousClock.Instant) async throws -> Lease {
        let id = self.state.withLock { state in
            state.lastWaiterID &+= 1
            return state.lastWaiterID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let (leased, sweep) = self.state.withLock { state -> (Result<Lease, any Error>?, Bool) in
                    if state.closed { return (.failure(PostgresError(.closed, "the PostgreSQL client is shut down")), false) }
                    if let slot = state.idle.popLast() { return (.success((slot, false)), false) }
                    if state.mayOpen(below: self.maxConnections, now: .now) { return (.success(state.newSlot()), false) }
                    // Cancelled before it could wait: the handler below found nothing to take out.
                    if Task.isCancelled { return (.failure(CancellationError()), false) }
                    // In deadline order: a caller waiting again after a connection could not be opened keeps its first deadline.
                    let index = state.waiters.lastIndex { $0.deadline <= deadline }.map { $0 + 1 } ?? 0
                    state.waiters.insert(Waiter(id: id, deadline: deadline, continuation: continuation), at: index)
                    defer { state.sweeping = true }
                    return (nil, !state.sweeping)
                }
                if let leased { continuation.resume(with: leased) }
                if sweep { self.sweepWaiters() }
            }
        } onCancel: {
            // Whoever takes the waiter out under the lock resumes it: this handler, a release, the sweep or a shutdown.
            let waiter = self.state.withLock { state in
                state.waiters.firstIndex { $0.id == id }.map { state.waiters.remove(at: $0) }
            }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Books a new slot whose connection could not be opened, and says whether its caller may wait for another.
    /// With other slots (open, or being opened) it may, and opening pauses: the server is full, or away, and a
    /// slot of those fails the call then. With none, nothing would serve the caller, or any caller waiting: each
    /// gets the error now.
    private func openFailed(_ error: any Error) -> Bool {
        let (others, stranded) = self.state.withLock { state -> (Bool, [Waiter]) in
            state.opened -= 1
            if state.opened > 0 {
                state.openPausedUntil = .now + Self.openPause
                return (true, [])
            }
            state.openPausedUntil = nil
            defer { state.waiters.removeAll() }
            return (false, state.waiters)
        }
        for waiter in stranded { waiter.continuation.resume(throwing: error) }
        return others
    }

    /// Until when opening pauses after the last connection that could not be opened; `nil` before any (tests
    /// wait on it to know a refusal happened).
    var openPausedUntil: ContinuousClock.Instant? {
        self.state.withLock { $0.openPausedUntil }
    }

    /// Opens a new slot's connection on the client's threads.
    private func open(_ slot: PostgresSlot) async throws {
        let url = self.url
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            self.threadPool.submit { state in
                guard case .active = state else {
                    return continuation.resume(throwing: PostgresError(.closed, "the PostgreSQL client is shut down"))
                }
                continuation.resume(with: Result { slot.connection = try PostgresConnection(url: url) })
            }
        }
    }

    /// Fails the waiters still waiting at their deadline, and once a pause in opening ends lets the first waiter
    /// open a connection (one per wake); wakes at the first deadline, and at least every 250 ms (a caller waiting
    /// again may come first with an earlier deadline). Ends when none is left. One such task per client at most,
    /// and only while callers find every connection busy.
    private func sweepWaiters() {
        Task {
            while let wake = self.state.withLock({ state -> ContinuousClock.Instant? in
                guard let first = state.waiters.first else {
                    state.sweeping = false
                    return nil
                }
                return min(first.deadline, .now + .milliseconds(250))
            }) {
                try? await Task.sleep(until: wake, clock: .continuous)
                let (expired, opener) = self.state.withLock { state -> ([Waiter], (Waiter, Lease)?) in
                    let now = ContinuousClock.now
                    let count = state.waiters.prefix { $0.deadline <= now }.count
                    let expired = Array(state.waiters.prefix(count))
                    state.waiters.removeFirst(count)
                    guard !state.waiters.isEmpty, state.mayOpen(below: self.maxConnections, now: now) else { return (expired, nil) }
                    let lease = state.newSlot()
                    return (expired, (state.waiters.removeFirst(), lease))
                }
                for waiter in expired {
                    waiter.continuation.resume(
                        throwing: PostgresError(.busy, "no PostgreSQL connection came free within \(self.acquireTimeout): every one is busy")
                    )
                }
                if let (waiter, lease) = opener { waiter.continuation.resume(returning: lease) }
            }
        }
    }

    private func release(_ slot: PostgresSlot) {
        let (waiter, closed) = self.state.withLock { state -> (Waiter?, Bool) in
            if state.waiters.isEmpty {
                state.idle.append(slot)
                return (nil, state.closed)
            }
            return (state.waiters.removeFirst(), false)
        }
        waiter?.continuation.resume(returning: (slot, false))
        if closed {
            // Returned after shutdown: closed on the client's threads while they still run; else (they
            // stopped, or cancelled this before it ran) it closes when the client is freed.
            self.threadPool.submit { state in
                if case .active = state { slot.connection = nil }
            }
        }
    }
}

/// A pool slot: holds a connection (or none yet, or none after it broke).
///
/// `@unchecked Sendable`: a slot is leased to one caller at a time by ``PostgresClient``; one call of the
/// lease runs at a time (`use`), and the lease ends only once that call has (`endLease`), so neither
/// `connection` nor `leased` is ever touched concurrently.
final class PostgresSlot: @unchecked Sendable {
    var connection: PostgresConnection?
    /// Leased and not used yet: the first statement of a lease checks the connection first.
    var leased = false

    struct Use {
        /// Counts the leases that ended; a session belongs to the lease it was made in.
        var lease = 0
        /// Set while one of the lease's calls runs.
        var busy = false
        /// The owner of a lease that ended while a call ran, waiting for that call to end.
        var ending: CheckedContinuation<Void, Never>?
    }

    let use = Mutex(Use())

    /// Starts a call of a session made in lease `lease`: refused when that lease ended, or while another call runs.
    func beginCall(lease: Int) throws(PostgresError) {
        try self.use.withLock { use throws(PostgresError) in
            guard use.lease == lease else { throw PostgresError(.misuse, "a PostgreSQL session was used after its lease ended") }
            guard !use.busy else { throw PostgresError(.misuse, "a PostgreSQL session was used by two tasks at once") }
            use.busy = true
        }
    }

    func endCall() {
        let ending = self.use.withLock { use in
            use.busy = false
            defer { use.ending = nil }
            return use.ending
        }
        ending?.resume()
    }

    /// Ends the lease: no call of it starts from now on, and one still running (from a task that kept the
    /// session) ends before this returns.
    func endLease() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let running = self.use.withLock { use in
                use.lease += 1
                if use.busy { use.ending = continuation }
                return use.busy
            }
            if !running { continuation.resume() }
        }
    }
}

/// A leased connection, valid inside `withConnection`/`withTransaction`, for one caller at a time. A
/// statement from a second task while one runs, or after the lease ended (the connection may be another
/// caller's by then), is refused with ``PostgresError/Code/misuse`` instead of interleaving with it. A call
/// that started inside the lease ends before the connection serves the next one.
public struct PostgresSession: Sendable {
    let slot: PostgresSlot
    let threadPool: NIOThreadPool
    let url: String
    private let lease: Int

    init(slot: PostgresSlot, threadPool: NIOThreadPool, url: String) {
        self.slot = slot
        self.threadPool = threadPool
        self.url = url
        self.lease = slot.use.withLock { $0.lease }
    }

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

    /// Runs `body` without a statement timeout, and without a deadline for the server's answers, on this
    /// lease's connection (a migration may rewrite a large table); both come back afterwards, and a
    /// connection that cannot restore them is dropped.
    public func withoutStatementTimeout<T>(_ body: () async throws -> T) async throws -> T {
        try await self.run { connection in
            _ = try connection.execute("SET statement_timeout = 0", [])
            connection.answerDeadline = nil
        }
        let result: Result<T, any Error>
        do { result = .success(try await body()) } catch { result = .failure(error) }
        await self.onPoolThread { slot in
            guard let connection = slot.connection else { return }
            do {
                _ = try connection.execute("RESET statement_timeout", [])
                connection.answerDeadline = connection.defaultAnswerDeadline
            } catch {
                slot.connection = nil
            }
        }
        return try result.get()
    }

    /// Runs `body` on a thread of the client's pool. A pool already stopped would run it on the calling
    /// thread, one of Swift's cooperative pool, which blocking libpq calls must never hold: it is refused.
    private func run<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        let slot = self.slot
        let url = self.url
        try slot.beginCall(lease: self.lease)
        defer { slot.endCall() }
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

    /// Ends a transaction that failed part-way (harmless when none is open). A connection that broke
    /// took its transaction with it: nothing to roll back, and no new connection is opened for it.
    public func rollback() async {
        await self.onPoolThread { slot in
            guard let connection = slot.connection, connection.isHealthy else {
                slot.connection = nil
                return
            }
            do {
                _ = try connection.execute("ROLLBACK", [])
            } catch {
                // The session state is unknown: drop the connection rather than hand it out mid-transaction.
                slot.connection = nil
            }
        }
    }

    /// Closes the connection, if any.
    func disconnect() async {
        await self.onPoolThread { $0.connection = nil }
    }

    /// Runs `body` with the slot on a thread of the client's pool, where closing a connection (libpq's
    /// `PQfinish`, blocking) may run. With the pool stopped, nothing runs: the connection then closes
    /// when its slot goes. Nor does anything run for a session whose lease ended (the connection may be
    /// another caller's by now) or while another call of the lease runs (libpq serves one thread at a
    /// time): what was left undone is caught when the next lease starts (``withConnection(slot:url:_:)``).
    private func onPoolThread(_ body: @escaping @Sendable (PostgresSlot) -> Void) async {
        let slot = self.slot
        guard (try? slot.beginCall(lease: self.lease)) != nil else { return }
        defer { slot.endCall() }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            self.threadPool.submit { state in
                if case .active = state { body(slot) }
                continuation.resume()
            }
        }
    }

    /// Runs on a pool thread: forgets a connection that broke, or whose server takes no writes (a demoted
    /// primary: the next lease connects again, and so reaches whichever server the URL now names). Only
    /// the first statement of a lease (re)connects, after checking that the server did not close the
    /// connection while it was idle (a restart, a terminated backend), so that its first use does not fail
    /// for it, and that the last lease did not leave it inside a transaction. A connection that
    /// broke later in the lease is not replaced: the statements after it would run outside the
    /// transaction they belong to.
    private static func withConnection<T>(slot: PostgresSlot, url: String, _ body: (PostgresConnection) throws -> T) throws -> T {
        if slot.leased {
            // A session left inside a transaction (a caller that began one and neither committed nor rolled
            // back) would run this lease's statements in it, or fail them all (25P02); one left without its
            // statement timeout (``PostgresSession/withoutStatementTimeout(_:)`` could not restore it) would
            // run them unbounded: a new connection instead.
            if let connection = slot.connection,
                !connection.isAlive || connection.isInTransaction || connection.answerDeadline != connection.defaultAnswerDeadline
            {
                slot.connection = nil
            }
            if slot.connection == nil { slot.connection = try PostgresConnection(url: url) }
            slot.leased = false
        }
        guard let connection = slot.connection else { throw PostgresError(.connection, "the connection broke earlier in this lease") }
        do {
            return try body(connection)
        } catch let error as PostgresError where error.code == .connection || error.isReadOnlyServer {
            slot.connection = nil
            throw error
        }
    }
}
