import Foundation
import Logging
import Shared

/// The real Redis and PostgreSQL that `bash ops/test` starts for the tests, and fresh isolated spaces in them.
///
/// A missing service is an error, never a skip: run the tests through `bash ops/test`.
public enum TestEnvironment {
    /// Raised when the test script did not provide a service.
    public struct Missing: Error, CustomStringConvertible {
        public let variable: String
        public var description: String {
            "\(variable) is not set: run the tests with `bash ops/test`, which starts Redis and PostgreSQL"
        }
    }

    private static func variable(_ name: String) throws -> String {
        guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else { throw Missing(variable: name) }
        return value
    }

    /// `TOLLGATE_TEST_REDIS_URL`.
    public static func redisURL() throws -> String { try self.variable("TOLLGATE_TEST_REDIS_URL") }

    /// The test Redis' URL with another user, password or database.
    public static func redisURL(user: String? = nil, password: String? = nil, database: Int) throws -> String {
        guard var components = URLComponents(string: try self.redisURL()) else { throw Missing(variable: "TOLLGATE_TEST_REDIS_URL") }
        components.user = user ?? (password == nil ? nil : "")
        components.password = password
        components.path = "/\(database)"
        guard let url = components.string else { throw Missing(variable: "TOLLGATE_TEST_REDIS_URL") }
        return url
    }

    /// `TOLLGATE_TEST_DATABASE_URL`: a role that may create databases.
    public static func databaseURL() throws -> String { try self.variable("TOLLGATE_TEST_DATABASE_URL") }

    /// `TOLLGATE_TEST_BIN_DIR`: where `swift build` put the executables.
    public static func binDirectory() throws -> String { try self.variable("TOLLGATE_TEST_BIN_DIR") }

    /// `TOLLGATE_TEST_STATE_DIR`: a scratch folder the test script removes afterwards.
    public static func stateDirectory() throws -> String { try self.variable("TOLLGATE_TEST_STATE_DIR") }

    /// A fresh Redis key prefix, so tests running in parallel never see each other's keys.
    public static func uniquePrefix() -> String {
        "t" + Hex.encode((0..<6).map { _ in UInt8.random(in: 0...255) })
    }

    /// A Redis client for the test Redis.
    public static func redis(connections: Int = 2) throws -> RedisClient {
        RedisClient(configuration: try RedisConfiguration(url: self.redisURL()), connections: connections)
    }

    /// Creates an empty database, applies the migrations (every one unless told), and returns its URL.
    public static func freshDatabase(migrations: [Migrations.Migration] = Migrations.all) async throws -> String {
        let adminURL = try self.databaseURL()
        let name = "tg_" + Hex.encode((0..<8).map { _ in UInt8.random(in: 0...255) })
        let admin = PostgresClient(url: adminURL, connections: 1)
        do {
            // CREATE DATABASE takes no parameters; the name is generated hex, never input.
            try await admin.query("CREATE DATABASE \(name)")
            await admin.shutdown()
        } catch {
            await admin.shutdown()
            throw error
        }
        guard var components = URLComponents(string: adminURL) else { throw Missing(variable: "TOLLGATE_TEST_DATABASE_URL") }
        components.path = "/" + name
        guard let url = components.string else { throw Missing(variable: "TOLLGATE_TEST_DATABASE_URL") }
        let database = PostgresClient(url: url, connections: 1)
        do {
            try await Migrator(database: database, logger: Self.migrationLogger).migrate(migrations)
            await database.shutdown()
        } catch {
            await database.shutdown()
            throw error
        }
        return url
    }

    /// The migrator's logger in tests: warnings only, as every test database is migrated from scratch and
    /// its "applying migration" lines would bury the test output.
    public static var migrationLogger: Logger {
        var logger = Logger(label: "test.migrate")
        logger.logLevel = .warning
        return logger
    }
}
