import Foundation
import Logging
import ServiceLifecycle
import Shared
import Synchronization

/// Every publisher's credentials, in memory, from one query that ``run()`` repeats every ``lifetime``
/// seconds: authenticating a request costs no database round trip.
///
/// - A credential the snapshot lacks or refuses (a wrong password, a disabled publisher, a customer token
///   of other credentials) waits for one loaded after the request arrived, so a publisher created,
///   rotated or enabled again on another API process authenticates here at once, and a wrong credential is
///   told from a right one only by a snapshot of now (while PostgreSQL is away both answer 503). Such reloads are shared by
///   every request waiting and begin at most once per ``reloadInterval``: a flood of made-up tokens costs
///   PostgreSQL at most ten small queries a second per API process, whatever its rate, and cannot push
///   known publishers out of memory.
/// - A change that takes credentials away (a publisher disabled, credentials rotated) applies at once
///   through the process that made it (``invalidate()``), and on the others when its announcement on the
///   Redis access channel arrives (``revoke(_:)``): that publisher's requests then wait for a snapshot
///   loaded after it. An announcement missed (no subscription at that moment) leaves the next reload.
/// - While PostgreSQL is away the last snapshot answers for ``staleLifetime`` seconds more, so receipts
///   keep being accepted into Redis; a credential it lacks then answers the outage's error (503), and so
///   does a revoked publisher's.
final class PublisherDirectory: Sendable {
    /// The publishers as one query saw them.
    struct Snapshot: Sendable {
        let byTokenHash: [[UInt8]: PublisherAuthRecord]
        let byId: [UUID: PublisherAuthRecord]
        /// Uptime (nanoseconds) when its query was sent.
        let loadedAt: UInt64

        init(_ records: [PublisherAuthRecord], loadedAt: UInt64) {
            self.byTokenHash = Dictionary(records.map { ($0.tokenHash, $0) }, uniquingKeysWith: { first, _ in first })
            self.byId = Dictionary(records.map { ($0.publisher.id, $0) }, uniquingKeysWith: { first, _ in first })
            self.loadedAt = loadedAt
        }
    }

    private struct State {
        var snapshot: Snapshot?
        /// The reload in flight and when it began; every request that needs a reload waits for one.
        var loading: (task: Task<Snapshot, any Error>, startedAt: UInt64)?
        /// When the last reload began: the next one begins ``reloadInterval`` later at the earliest.
        var lastStart: UInt64?
        /// Bumped by ``invalidate()``: a reload begun before it must not become the snapshot.
        var generation = 0
        /// Publishers whose credentials were taken away elsewhere, and when that was heard (uptime ns): a
        /// snapshot loaded before then does not answer for them. Dropped once a snapshot after it is in.
        var revoked: [UUID: UInt64] = [:]
        /// Reloads begun, for tests.
        var reloads = 0
    }

    /// What a request that needs a reload does next.
    private enum Step {
        case found(Snapshot)
        case wait(Task<Snapshot, any Error>, startedAt: UInt64)
        case sleep(UInt64)
    }

    static let lifetime = 5.0
    static let staleLifetime = 600.0
    static let reloadInterval = 0.1

    let catalog: CatalogStore
    let logger: Logger
    private let lifetimeNanoseconds: UInt64
    private let usableNanoseconds: UInt64
    private let intervalNanoseconds: UInt64
    private let state = Mutex(State())

    init(
        catalog: CatalogStore, logger: Logger, lifetime: Double = PublisherDirectory.lifetime,
        staleFor: Double = PublisherDirectory.staleLifetime, reloadInterval: Double = PublisherDirectory.reloadInterval
    ) {
        self.catalog = catalog
        self.logger = logger
        self.lifetimeNanoseconds = UInt64(lifetime * 1_000_000_000)
        self.usableNanoseconds = UInt64((lifetime + staleFor) * 1_000_000_000)
        self.intervalNanoseconds = UInt64(reloadInterval * 1_000_000_000)
    }

    /// The publisher holding a token, by the token's SHA-256, when `accepts` takes it: a record the snapshot
    /// in hand holds but `accepts` refuses is looked up again in a newer one.
    func record(tokenHash: [UInt8], accepts: (PublisherAuthRecord) -> Bool = { _ in true }) async throws -> PublisherAuthRecord? {
        try await self.find({ $0.byTokenHash[tokenHash] }, accepts: accepts)
    }

    /// A publisher, by id, when `accepts` takes it (as ``record(tokenHash:accepts:)``).
    func record(id: UUID, accepts: (PublisherAuthRecord) -> Bool = { _ in true }) async throws -> PublisherAuthRecord? {
        try await self.find({ $0.byId[id] }, accepts: accepts)
    }

    /// Drops the snapshot after an admin change made through this process, so that the next request waits
    /// for a reload that sees it, at once.
    func invalidate() {
        self.state.withLock { state in
            state.snapshot = nil
            state.loading = nil
            state.lastStart = nil
            state.generation += 1
        }
    }

    /// A publisher's credentials were taken away through another process: its next request waits for a
    /// snapshot loaded from now on (or answers the outage while PostgreSQL is away), the others' do not.
    func revoke(_ publisherId: UUID) {
        let now = Self.now()
        self.state.withLock { $0.revoked[publisherId] = now }
    }

    /// Reloads begun so far.
    var reloads: Int { self.state.withLock { $0.reloads } }

    /// Reloads every ``lifetime`` seconds until the server stops.
    func run() async {
        var failing = false
        while !Task.isCancelled, !Task.isShuttingDownGracefully {
            do {
                _ = try await self.snapshot(loadedAfter: Self.now())
                if failing { self.logger.info("publisher credentials reloaded") }
                failing = false
            } catch {
                if !failing {
                    self.logger.warning("cannot reload publisher credentials; answering from the last ones", metadata: ["error": "\(error)"])
                }
                failing = true
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .nanoseconds(self.lifetimeNanoseconds)) }
        }
    }

    private func find(_ lookUp: (Snapshot) -> PublisherAuthRecord?, accepts: (PublisherAuthRecord) -> Bool) async throws -> PublisherAuthRecord? {
        let arrival = Self.now()
        let inHand = self.state.withLock { state -> PublisherAuthRecord? in
            guard let snapshot = state.snapshot, arrival < snapshot.loadedAt &+ self.usableNanoseconds, let found = lookUp(snapshot) else { return nil }
            if let revokedAt = state.revoked[found.publisher.id], revokedAt >= snapshot.loadedAt { return nil }
            return found
        }
        if let inHand, accepts(inHand) { return inHand }
        return lookUp(try await self.snapshot(loadedAfter: arrival)).flatMap { accepts($0) ? $0 : nil }
    }

    /// A snapshot whose query began at `arrival` or later: the one in hand, the reload in flight, or a
    /// new reload once ``reloadInterval`` has passed since the last began.
    private func snapshot(loadedAfter arrival: UInt64) async throws -> Snapshot {
        while true {
            let step = self.state.withLock { state -> Step in
                if let snapshot = state.snapshot, snapshot.loadedAt >= arrival { return .found(snapshot) }
                if let loading = state.loading { return .wait(loading.task, startedAt: loading.startedAt) }
                let now = Self.now()
                if let lastStart = state.lastStart, now < lastStart &+ self.intervalNanoseconds {
                    return .sleep(lastStart &+ self.intervalNanoseconds - now)
                }
                let generation = state.generation
                let task = Task { try await self.load(generation: generation, startedAt: now) }
                state.loading = (task, now)
                state.lastStart = now
                state.reloads += 1
                return .wait(task, startedAt: now)
            }
            switch step {
            case .found(let snapshot):
                return snapshot
            case .wait(let task, let startedAt):
                // A reload begun before the request arrived may miss what it looks for: wait for the next.
                let result = await task.result
                if startedAt >= arrival { return try result.get() }
            case .sleep(let nanoseconds):
                try await Task.sleep(for: .nanoseconds(nanoseconds))
            }
        }
    }

    private func load(generation: Int, startedAt: UInt64) async throws -> Snapshot {
        let records: [PublisherAuthRecord]
        do {
            records = try await self.catalog.publisherAuthRecords()
        } catch {
            self.state.withLock { state in
                if state.generation == generation { state.loading = nil }
            }
            throw error
        }
        let snapshot = Snapshot(records, loadedAt: startedAt)
        self.state.withLock { state in
            guard state.generation == generation else { return }
            state.loading = nil
            state.snapshot = snapshot
            if !state.revoked.isEmpty { state.revoked = state.revoked.filter { $0.value >= startedAt } }
        }
        return snapshot
    }

    private static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
}

/// Runs ``PublisherDirectory/run()`` with the server.
struct PublisherDirectoryRefresher: Service, CustomStringConvertible {
    let directory: PublisherDirectory
    var description: String { "PublisherDirectoryRefresher" }

    func run() async throws {
        await self.directory.run()
    }
}
