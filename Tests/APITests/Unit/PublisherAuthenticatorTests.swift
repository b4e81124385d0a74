import Foundation
import Logging
import Shared
import Testing
import TestSupport

@testable import API

/// `PublisherAuthenticator` over `PublisherDirectory`, against a PostgreSQL of the test's own that it can stop.
@Suite("PublisherAuthenticator")
struct PublisherAuthenticatorTests {
    /// A fresh PostgreSQL with two publishers, and an authenticator over it that has authenticated the first.
    static func withAuthenticated(
        lifetime: Double = PublisherDirectory.lifetime, reloadInterval: Double = PublisherDirectory.reloadInterval,
        _ body: (PublisherAuthenticator, _ first: PublisherCredentials, _ second: PublisherCredentials, CatalogStore, DedicatedPostgres) async throws -> Void
    ) async throws {
        let postgres = try await DedicatedPostgres()
        let database = PostgresClient(url: postgres.url, connections: 2)
        try await TestEnvironment.using(database, postgres) {
            let catalog = CatalogStore(database: database)
            let (publisher, first) = try await catalog.createPublisher(name: "First")
            let (_, second) = try await catalog.createPublisher(name: "Second")
            let authenticator = Self.authenticator(catalog, lifetime: lifetime, reloadInterval: reloadInterval)
            #expect(try await Self.authenticate(authenticator, first)?.id == publisher.id)
            try await body(authenticator, first, second, catalog, postgres)
        }
    }

    static func authenticator(_ catalog: CatalogStore, lifetime: Double = PublisherDirectory.lifetime, reloadInterval: Double = PublisherDirectory.reloadInterval) -> PublisherAuthenticator {
        let directory = PublisherDirectory(catalog: catalog, logger: Logger(label: "test"), lifetime: lifetime, reloadInterval: reloadInterval)
        return PublisherAuthenticator(directory: directory, customerTokens: nil)
    }

    static func authenticate(_ authenticator: PublisherAuthenticator, _ credentials: PublisherCredentials, token: String? = nil) async throws -> Publisher? {
        try await authenticator.authenticate(token: token ?? credentials.publisherToken, username: credentials.username, password: credentials.password)
    }

    @Test("a flood of tokens that name no publisher costs at most one reload per interval, and pushes no publisher out of memory")
    func unknownTokensFlood() async throws {
        let interval = 0.5
        try await Self.withAuthenticated(reloadInterval: interval) { authenticator, first, second, _, postgres in
            let before = authenticator.directory.reloads
            let started = ContinuousClock.now
            let refused = try await withThrowingTaskGroup(of: Bool.self) { group in
                for n in 0..<2_000 {
                    group.addTask { try await Self.authenticate(authenticator, first, token: "made-up-\(n)") == nil }
                }
                return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            let elapsed = (ContinuousClock.now - started) / .seconds(1)
            #expect(refused == 2_000)
            // One reload may begin at once, then at most one per interval.
            #expect(authenticator.directory.reloads - before <= 1 + Int(elapsed / interval), "\(elapsed) s")
            // PostgreSQL is gone: both publishers still come from memory, the second never authenticated here before.
            try await postgres.stop()
            #expect(try await Self.authenticate(authenticator, first) != nil)
            #expect(try await Self.authenticate(authenticator, second) != nil)
        }
    }

    @Test("a publisher created elsewhere authenticates at once: a token the snapshot lacks waits for a newer one")
    func createdElsewhere() async throws {
        try await Self.withAuthenticated { authenticator, _, _, catalog, _ in
            let (created, credentials) = try await catalog.createPublisher(name: "Created elsewhere")
            #expect(try await Self.authenticate(authenticator, credentials)?.id == created.id)
        }
    }

    @Test("a publisher enabled again elsewhere authenticates at once: a record the snapshot refuses waits for a newer one")
    func enabledElsewhere() async throws {
        try await Self.withAuthenticated { authenticator, first, _, catalog, _ in
            let publisher = try #require(try await Self.authenticate(authenticator, first))
            _ = try await catalog.setPublisher(id: publisher.id, enabled: false)
            authenticator.forgetCachedPublishers()
            #expect(try await Self.authenticate(authenticator, first) == nil)
            // Enabled again through another API process: this one's snapshot, well within its lifetime, says disabled.
            _ = try await catalog.setPublisher(id: publisher.id, enabled: true)
            #expect(try await Self.authenticate(authenticator, first)?.id == publisher.id)
        }
    }

    @Test("a publisher disabled or rotated elsewhere is refused once its revocation is heard, well within the snapshot's lifetime")
    func revokedElsewhere() async throws {
        // A lifetime the test cannot outlast on a slow machine: only the revocation may change the answer.
        try await Self.withAuthenticated(lifetime: 600) { authenticator, first, second, catalog, _ in
            let publisher = try #require(try await Self.authenticate(authenticator, first))
            let other = try #require(try await Self.authenticate(authenticator, second))
            // Disabled through another API process: this one's snapshot, well within its lifetime, says enabled...
            _ = try await catalog.setPublisher(id: publisher.id, enabled: false)
            #expect(try await Self.authenticate(authenticator, first) != nil)
            // ...until the revocation is heard; the other publisher stays in the snapshot in hand.
            authenticator.directory.revoke(publisher.id)
            #expect(try await Self.authenticate(authenticator, first) == nil)
            #expect(try await Self.authenticate(authenticator, first) == nil)
            #expect(try await Self.authenticate(authenticator, second)?.id == other.id)
            // Rotated elsewhere: the old credentials stop, the new ones work.
            let (_, rotated) = try #require(try await catalog.rotateCredentials(id: other.id))
            #expect(try await Self.authenticate(authenticator, second) != nil)
            authenticator.directory.revoke(other.id)
            #expect(try await Self.authenticate(authenticator, second) == nil)
            #expect(try await Self.authenticate(authenticator, rotated)?.id == other.id)
        }
    }

    @Test("while PostgreSQL is away a revoked publisher answers the outage; the others authenticate from the last snapshot")
    func revokedWhileDatabaseAway() async throws {
        try await Self.withAuthenticated { authenticator, first, second, _, postgres in
            let publisher = try #require(try await Self.authenticate(authenticator, first))
            #expect(try await Self.authenticate(authenticator, second) != nil)
            try await postgres.stop()
            authenticator.directory.revoke(publisher.id)
            await #expect(throws: PostgresError.self) { try await Self.authenticate(authenticator, first) }
            #expect(try await Self.authenticate(authenticator, second) != nil)
        }
    }

    @Test("a revocation announced on the access channel reaches the directory, with the access cache off")
    func revocationAnnounced() async throws {
        // Snapshots good for ten minutes: only the announcement can refuse the publisher within the test.
        try await Self.withAuthenticated(lifetime: 600) { authenticator, first, _, catalog, _ in
            let publisher = try #require(try await Self.authenticate(authenticator, first))
            let redis = try TestEnvironment.redis()
            let queue = ReceiptQueue(redis: redis, prefix: TestEnvironment.uniquePrefix())
            let listener = AccessInvalidations(
                cache: AccessCache(lifetimeSeconds: 0), directory: authenticator.directory, redis: try RedisConfiguration(url: TestEnvironment.redisURL()),
                keys: queue.keys, logger: Logger(label: "test")
            )
            let listening = Task { try await listener.run() }
            _ = try await catalog.setPublisher(id: publisher.id, enabled: false)
            #expect(try await Self.authenticate(authenticator, first) != nil, "the snapshot in hand says enabled")
            // Announced until heard: the subscription may not be up yet.
            _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(50), "the revocation heard") {
                try await queue.announceRevocation(of: publisher.id)
                return try await Self.authenticate(authenticator, first) == nil ? true : nil
            }
            listening.cancel()
            try? await listening.value
            await redis.shutdown()
        }
    }

    @Test("while PostgreSQL is away a wrong password answers the outage, as a token the snapshot lacks does: the two cannot be told apart")
    func wrongPasswordWhileDatabaseAway() async throws {
        try await Self.withAuthenticated { authenticator, first, _, _, postgres in
            try await postgres.stop()
            #expect(try await Self.authenticate(authenticator, first) != nil)
            await #expect(throws: PostgresError.self) {
                try await authenticator.authenticate(token: first.publisherToken, username: first.username, password: first.password + "x")
            }
        }
    }

    @Test("the refresher applies a change made elsewhere within its lifetime")
    func refresherAppliesChanges() async throws {
        try await Self.withAuthenticated(lifetime: 0.05) { authenticator, first, _, catalog, _ in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await authenticator.directory.run() }
                let publisher = try #require(try await Self.authenticate(authenticator, first))
                _ = try await catalog.setPublisher(id: publisher.id, enabled: false)
                _ = try await Poll.until(timeout: .seconds(10), "the disabled publisher refused") {
                    try await Self.authenticate(authenticator, first) == nil ? true : nil
                }
                group.cancelAll()
            }
        }
    }

    @Test("while PostgreSQL is away, every publisher of the last snapshot authenticates past its lifetime; a token it lacks answers the outage")
    func lastSnapshotWhileDatabaseAway() async throws {
        // Every snapshot is past its lifetime at once.
        try await Self.withAuthenticated(lifetime: 0) { authenticator, first, second, _, postgres in
            try await postgres.stop()
            #expect(try await Self.authenticate(authenticator, first) != nil)
            #expect(try await Self.authenticate(authenticator, second) != nil)
            await #expect(throws: PostgresError.self) { try await Self.authenticate(authenticator, first, token: "never-seen") }
        }
    }

    @Test("with nothing loaded yet and PostgreSQL away, authentication answers the outage")
    func nothingLoadedWhileDatabaseAway() async throws {
        try await Self.withAuthenticated { _, first, _, catalog, postgres in
            try await postgres.stop()
            let fresh = Self.authenticator(catalog)
            await #expect(throws: PostgresError.self) { try await Self.authenticate(fresh, first) }
        }
    }
}
