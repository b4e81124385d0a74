import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import Prometheus
import Shared
import Testing
import TestSupport

@testable import API

/// Runs the real API (``buildApplication(configuration:logger:registry:)``) through Hummingbird's router
/// test framework, against the test Redis and a fresh, migrated PostgreSQL database, with a Redis key
/// prefix of its own, so tests running in parallel never share state.
///
/// A missing service is a failure (``TestEnvironment`` throws), never a skip.
enum APIHarness {
    /// The admin token fixtures configure (long enough to start without a warning).
    static let adminToken = "test-admin-token-0123456789abcdef"

    /// What a test may change about the configuration.
    struct Options: Sendable {
        /// `TOLLGATE_ADMIN_TOKEN`; `nil` leaves it unset (the admin routes answer 404).
        var adminToken: String? = APIHarness.adminToken
        /// Overrides `TOLLGATE_REDIS_URL` (a closed port simulates Redis being down).
        var redisURL: String?
        /// Overrides `TOLLGATE_DATABASE_URL` (a closed port simulates PostgreSQL being down).
        var databaseURL: String?
        /// Extra variables (e.g. the rate limit).
        var extra: [String: String] = [:]
    }

    /// Bounds how many fixtures hold databases and connections at once, so a parallel run stays well
    /// inside PostgreSQL's connection limit.
    private static let gate = Gate(permits: 8)

    /// Builds the API, runs `body` with a client for it, then closes the clients and drops the database.
    static func withAPI<T: Sendable>(_ options: Options = Options(), _ body: @Sendable (APIClient) async throws -> T) async throws -> T {
        await self.gate.acquire()
        do {
            let value = try await self.run(options, body)
            await self.gate.release()
            return value
        } catch {
            await self.gate.release()
            throw error
        }
    }

    private static func run<T: Sendable>(_ options: Options, _ body: @Sendable (APIClient) async throws -> T) async throws -> T {
        let redisURL = try options.redisURL ?? TestEnvironment.redisURL()
        let freshDatabase: String? = options.databaseURL == nil ? try await TestEnvironment.freshDatabase() : nil
        let databaseURL = options.databaseURL ?? freshDatabase!
        let prefix = TestEnvironment.uniquePrefix()
        var environment = [
            "TOLLGATE_REDIS_URL": redisURL,
            "TOLLGATE_DATABASE_URL": databaseURL,
            "TOLLGATE_QUEUE_PREFIX": prefix,
            "TOLLGATE_DATABASE_POOL_SIZE": "3",
            "TOLLGATE_REDIS_POOL_SIZE": "2",
            "TOLLGATE_LOG_LEVEL": "warning",
        ]
        environment["TOLLGATE_ADMIN_TOKEN"] = options.adminToken
        environment.merge(options.extra) { _, extra in extra }
        let configuration = try Configuration(environment: environment)
        var logger = Logger(label: "test.api")
        logger.logLevel = .critical
        let registry = PrometheusCollectorRegistry()
        let built = try await buildApplication(configuration: configuration, logger: logger, registry: registry)
        let services = built.services
        // The API prepares the queue in a service beside the server; tests that act as a worker need the
        // consumer group before their first read. (Fails harmlessly where the test's Redis is down.)
        try? await services.queue.prepare()
        let inspector = try TestEnvironment.redis(connections: 1)

        func cleanUp() async {
            if options.redisURL == nil {
                // Best effort: leave the shared test Redis as we found it.
                if let keys = try? await inspector.send("KEYS", "\(prefix):*").array?.compactMap(\.string), !keys.isEmpty {
                    _ = try? await inspector.send(["DEL"] + keys)
                }
            }
            await inspector.shutdown()
            await services.redis.shutdown()
            await services.database.shutdown()
            if let freshDatabase { await Self.drop(freshDatabase) }
        }

        do {
            let value = try await built.application.test(.router) { client in
                try await body(APIClient(client: client, services: services, registry: registry, prefix: prefix, inspector: inspector, adminToken: options.adminToken))
            }
            await cleanUp()
            return value
        } catch {
            await cleanUp()
            throw error
        }
    }

    /// Drops a database `freshDatabase()` made (best effort: the test script discards the cluster anyway).
    static func drop(_ url: String) async {
        guard let adminURL = try? TestEnvironment.databaseURL(), let name = URLComponents(string: url)?.path.dropFirst(),
            name.hasPrefix("tg_"), name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" })
        else { return }
        let admin = PostgresClient(url: adminURL, connections: 1)
        _ = try? await admin.query("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
        await admin.shutdown()
    }
}

/// A failure of the harness itself.
struct HarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A counting semaphore for async code.
actor Gate {
    private var permits: Int
    private var waiters: [CheckedContinuation<Void, Never>] = []

    init(permits: Int) { self.permits = permits }

    func acquire() async {
        if self.permits > 0 {
            self.permits -= 1
            return
        }
        await withCheckedContinuation { self.waiters.append($0) }
    }

    func release() {
        if self.waiters.isEmpty {
            self.permits += 1
        } else {
            self.waiters.removeFirst().resume()
        }
    }
}
