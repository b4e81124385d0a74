import Shared
import Testing
import TestSupport

@testable import API

/// `PublisherAuthenticator`'s cache, against a PostgreSQL of the test's own that it can stop.
@Suite("PublisherAuthenticator")
struct PublisherAuthenticatorTests {
    /// An authenticator over a fresh PostgreSQL with one publisher, which it has authenticated once.
    static func withAuthenticated(
        cacheLifetime: Double, _ body: (PublisherAuthenticator, PublisherCredentials, DedicatedPostgres) async throws -> Void
    ) async throws {
        let postgres = try await DedicatedPostgres()
        let database = PostgresClient(url: postgres.url, connections: 2)
        try await TestEnvironment.using(database) {
            let catalog = CatalogStore(database: database)
            let (publisher, credentials) = try await catalog.createPublisher(name: "Cached")
            let authenticator = PublisherAuthenticator(catalog: catalog, customerTokens: nil, cacheLifetime: cacheLifetime)
            #expect(try await Self.authenticate(authenticator, credentials)?.id == publisher.id)
            try await body(authenticator, credentials, postgres)
        }
    }

    static func authenticate(_ authenticator: PublisherAuthenticator, _ credentials: PublisherCredentials, token: String? = nil) async throws -> Publisher? {
        try await authenticator.authenticate(token: token ?? credentials.publisherToken, username: credentials.username, password: credentials.password)
    }

    @Test("a token that names no publisher is remembered for the cache's lifetime, like one that does: no database round trip per request")
    func unknownTokenRemembered() async throws {
        // A lifetime no test run reaches, so nothing depends on timing.
        try await Self.withAuthenticated(cacheLifetime: 3600) { authenticator, credentials, postgres in
            #expect(try await Self.authenticate(authenticator, credentials, token: "rotated-away") == nil)
            // PostgreSQL is gone: both answers still come from the cache.
            try await postgres.stop()
            #expect(try await Self.authenticate(authenticator, credentials) != nil)
            #expect(try await Self.authenticate(authenticator, credentials, token: "rotated-away") == nil)
        }
    }

    @Test("while PostgreSQL is away, a publisher looked up a moment ago still authenticates, past the cache's lifetime")
    func staleWhileDatabaseAway() async throws {
        // Every entry is past its lifetime at once: only the stale time can answer.
        try await Self.withAuthenticated(cacheLifetime: 0) { authenticator, credentials, postgres in
            try await postgres.stop()
            #expect(try await Self.authenticate(authenticator, credentials) != nil)
            // A token never looked up still needs PostgreSQL.
            await #expect(throws: PostgresError.self) { try await Self.authenticate(authenticator, credentials, token: "never-seen") }
        }
    }
}
