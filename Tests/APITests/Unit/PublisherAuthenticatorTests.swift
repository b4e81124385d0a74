import Shared
import Testing
import TestSupport

@testable import API

/// `PublisherAuthenticator`'s cache, against a PostgreSQL of the test's own that it can stop.
@Suite("PublisherAuthenticator")
struct PublisherAuthenticatorTests {
    @Test("a token that names no publisher is remembered for the cache's lifetime, like one that does: no database round trip per request")
    func unknownTokenRemembered() async throws {
        let postgres = try await DedicatedPostgres()
        let database = PostgresClient(url: postgres.url, connections: 2)
        try await TestEnvironment.using(database) {
            let catalog = CatalogStore(database: database)
            let (publisher, credentials) = try await catalog.createPublisher(name: "Cached")
            // A lifetime no test run reaches, so nothing depends on timing.
            let authenticator = PublisherAuthenticator(catalog: catalog, customerTokens: nil, cacheLifetime: 3600)
            let known = try await authenticator.authenticate(
                token: credentials.publisherToken, username: credentials.username, password: credentials.password
            )
            #expect(known?.id == publisher.id)
            #expect(try await authenticator.authenticate(token: "rotated-away", username: credentials.username, password: credentials.password) == nil)

            // PostgreSQL is gone: both answers still come from the cache.
            try await postgres.stop()
            let stillKnown = try await authenticator.authenticate(
                token: credentials.publisherToken, username: credentials.username, password: credentials.password
            )
            #expect(stillKnown?.id == publisher.id)
            #expect(try await authenticator.authenticate(token: "rotated-away", username: credentials.username, password: credentials.password) == nil)
        }
    }

    @Test("while PostgreSQL is away, a publisher looked up a moment ago still authenticates, past the cache's lifetime")
    func staleWhileDatabaseAway() async throws {
        let postgres = try await DedicatedPostgres()
        let database = PostgresClient(url: postgres.url, connections: 2)
        try await TestEnvironment.using(database) {
            let catalog = CatalogStore(database: database)
            let (publisher, credentials) = try await catalog.createPublisher(name: "Stale")
            // Every entry is past its lifetime at once: only the stale time can answer.
            let authenticator = PublisherAuthenticator(catalog: catalog, customerTokens: nil, cacheLifetime: 0)
            let first = try await authenticator.authenticate(
                token: credentials.publisherToken, username: credentials.username, password: credentials.password
            )
            #expect(first?.id == publisher.id)
            try await postgres.stop()
            let during = try await authenticator.authenticate(
                token: credentials.publisherToken, username: credentials.username, password: credentials.password
            )
            #expect(during?.id == publisher.id)
            // A token never looked up still needs PostgreSQL.
            await #expect(throws: PostgresError.self) {
                try await authenticator.authenticate(token: "never-seen", username: credentials.username, password: credentials.password)
            }
        }
    }
}
