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
}
