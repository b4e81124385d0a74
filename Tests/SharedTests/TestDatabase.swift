import Foundation
import Shared
import TestSupport

/// Fresh PostgreSQL databases for the suites.
enum TestDatabase {
    /// `TOLLGATE_TEST_DATABASE_URL` is not a URL.
    struct BadURL: Error {
        let url: String
    }

    /// Runs `body` with a client on a fresh, migrated database of its own, then shuts the client down.
    static func withFresh<T>(connections: Int = 4, _ body: (PostgresClient, String) async throws -> T) async throws -> T {
        let url = try await TestEnvironment.freshDatabase()
        let client = PostgresClient(url: url, connections: connections)
        return try await TestEnvironment.using(client) { try await body(client, url) }
    }

    /// Creates an empty database (no migrations) through the admin URL and returns its URL.
    static func createEmpty() async throws -> String {
        let adminURL = try TestEnvironment.databaseURL()
        let name = "tg_empty_" + Fixtures.suffix(8)
        let admin = PostgresClient(url: adminURL, connections: 1)
        _ = try await TestEnvironment.using(admin) {
            // CREATE DATABASE takes no parameters; the name is generated hex.
            try await admin.query("CREATE DATABASE \(name)")
        }
        guard var components = URLComponents(string: adminURL) else { throw BadURL(url: adminURL) }
        components.path = "/" + name
        guard let url = components.string else { throw BadURL(url: adminURL) }
        return url
    }
}
