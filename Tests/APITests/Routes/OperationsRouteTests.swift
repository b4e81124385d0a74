import Foundation
import Hummingbird
import HummingbirdTesting
import Prometheus
import Shared
import Testing
import TestSupport

@testable import API

/// `/health/live`, `/health/ready`, `/metrics`, unknown routes, and the API's answers while a dependency is down.
@Suite("Operations routes and dependency failures")
struct OperationsRouteTests {
    @Test("/health/live and /health/ready answer 200 when Redis and PostgreSQL are up")
    func healthy() async throws {
        try await APIHarness.withAPI { api in
            let live = try await api.send(.get, "/health/live")
            #expect(live.status == .ok)
            let ready = try await api.send(.get, "/health/ready")
            #expect(ready.status == .ok, "\(ready.text)")
            #expect(ready.headers[.contentType]?.hasPrefix("application/json") == true)
            #expect(try ready.json()["status"] as? String == "ready")
            #expect(ready.headers[.retryAfter] == nil)
        }
    }

    @Test("/health/ready answers 503 until the process has prepared the queue, though Redis and PostgreSQL answer")
    func notReadyUntilPrepared() async throws {
        let redis = try TestEnvironment.redis(connections: 1)
        let url = try await TestEnvironment.freshDatabase()
        let database = PostgresClient(url: url, connections: 1)
        let prefix = TestEnvironment.uniquePrefix()
        try await TestEnvironment.using(redis, database) {
            let queue = ReceiptQueue(redis: redis, prefix: prefix)
            let router = Router(context: TollgateRequestContext.self)
            OperationsRoutes<TollgateRequestContext>(
                registry: PrometheusCollectorRegistry(), queue: queue, redis: redis, database: database, schema: SchemaCheck(database: database)
            ).register(on: router)
            try await Application(router: router).test(.router) { client in
                let waiting = try await client.execute(uri: "/health/ready", method: .get)
                #expect(waiting.status == .serviceUnavailable)
                #expect(String(buffer: waiting.body).contains("not ready: redis (the queue is being prepared)"), "\(String(buffer: waiting.body))")
                // Prepared through a copy of the value, as the API's preparation service holds one.
                let copy = queue
                try await copy.prepare()
                #expect(queue.isPrepared)
                let ready = try await client.execute(uri: "/health/ready", method: .get)
                #expect(ready.status == .ok, "\(String(buffer: ready.body))")
            }
            if let keys = try await redis.send("KEYS", "\(prefix):*").array?.compactMap(\.string), !keys.isEmpty {
                try await redis.send(["DEL"] + keys)
            }
        }
        await APIHarness.drop(url)
    }

    @Test("/openapi.yaml serves the repository's openapi.yaml byte for byte, without credentials")
    func openAPI() async throws {
        try await APIHarness.withAPI { api in
            let response = try await api.send(.get, "/openapi.yaml")
            #expect(response.status == .ok)
            #expect(response.headers[.contentType]?.hasPrefix("application/yaml") == true)
            let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../../openapi.yaml").standardized
            let onDisk = try Data(contentsOf: file)
            #expect(Data(response.body.readableBytesView) == onDisk)
            #expect(response.text.hasPrefix("openapi: 3."))
        }
    }

    @Test("/metrics serves the registry the router was given, as Prometheus text")
    func metrics() async throws {
        try await APIHarness.withAPI { api in
            let probe = api.registry.makeCounter(name: "tollgate_apitest_probe_total")
            probe.increment(by: Int64(3))
            let response = try await api.send(.get, "/metrics")
            #expect(response.status == .ok)
            #expect(response.headers[.contentType]?.hasPrefix("text/plain") == true)
            #expect(response.text.contains("# TYPE tollgate_apitest_probe_total counter"))
            #expect(response.text.contains("\ntollgate_apitest_probe_total 3\n"))
        }
    }

    @Test("an unknown route is a 404 JSON error", arguments: [
        (HTTPRequest.Method.get, "/nope"), (.get, "/v2/receipts/abc"), (.post, "/apple/payments"), (.get, "/health/nothing"),
    ])
    func unknownRoute(method: HTTPRequest.Method, uri: String) async throws {
        try await APIHarness.withAPI { api in
            let response = try await api.send(method, uri, headers: [.contentType: "application/json"], body: "{}")
            expectError(response, .notFound, code: "not_found")
        }
    }

    @Test("a route's path under another method is a 405 JSON error with Allow; HEAD comes with GET", arguments: [
        (HTTPRequest.Method.get, "/apple/payment", "POST"), (.delete, "/v1/receipts/abc", "GET, HEAD"), (.post, "/health/live", "GET, HEAD"),
        (.put, "/admin/v1/products/\(UUID())", "PATCH"), (.get, "/api/3.0/json", "POST"),
    ])
    func wrongMethod(method: HTTPRequest.Method, uri: String, allowed: String) async throws {
        try await APIHarness.withAPI { api in
            let response = try await api.send(method, uri, headers: [.contentType: "application/json"], body: "{}")
            #expect(response.headers[.allow] == allowed)
            expectError(response, .methodNotAllowed, code: "method_not_allowed")
        }
    }

    @Test("HEAD answers what GET would, without a body, errors included (RFC 9110)")
    func head() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            func expectHead(_ uri: String, headers: HTTPFields = [:], _ status: HTTPResponse.Status, sourceLocation: SourceLocation = #_sourceLocation) async throws {
                let get = try await api.send(.get, uri, headers: headers)
                let head = try await api.send(.head, uri, headers: headers)
                #expect(get.status == status, "\(get.text)", sourceLocation: sourceLocation)
                #expect(head.status == status, sourceLocation: sourceLocation)
                #expect(head.body.readableBytes == 0, "\(head.text)", sourceLocation: sourceLocation)
                #expect(get.body.readableBytes > 0, sourceLocation: sourceLocation)
                #expect(head.headers[.contentType] == get.headers[.contentType], sourceLocation: sourceLocation)
            }
            try await expectHead("/health/live", .ok)
            try await expectHead("/health/ready", .ok)
            api.registry.makeCounter(name: "tollgate_apitest_head_total").increment()
            try await expectHead("/metrics", .ok)
            let status = ReadRouteTests.query("viewer@example.com", Tenant.Offer.pass)
            try await expectHead(status, headers: tenant.credentialHeaders, .ok)
            try await expectHead(status, .unauthorized)
            try await expectHead("/v1/receipts/\(UUID().uuidString.lowercased())", headers: tenant.credentialHeaders, .notFound)
            try await expectHead("/nope", .notFound)
            // A path that has no GET: 405 naming what it has, still without a body.
            let post = try await api.send(.head, "/apple/payment")
            #expect(post.status == .methodNotAllowed)
            #expect(post.headers[.allow] == "POST")
            #expect(post.body.readableBytes == 0)
        }
    }

    // MARK: Redis down

    @Test("with Redis down: /health/ready is 503 with Retry-After and JSON; live stays 200")
    func readinessRedisDown() async throws {
        let port = try DedicatedRedis.closedPort()
        try await APIHarness.withAPI(.init(redisURL: "redis://127.0.0.1:\(port)/0")) { api in
            let ready = try await api.send(.get, "/health/ready")
            #expect(ready.status == .serviceUnavailable)
            #expect(ready.headers[.retryAfter] != nil)
            #expect(Int(ready.headers[.retryAfter] ?? "") ?? 0 > 0)
            #expect(ready.headers[.contentType]?.hasPrefix("application/json") == true)
            let json = try ready.json()
            #expect(json["code"] as? String == "dependency_unavailable")
            #expect((json["message"] as? String)?.contains("redis") == true)
            #expect((json["message"] as? String)?.contains("postgresql") == false)
            #expect(try await api.send(.get, "/health/live").status == .ok)
        }
    }

    @Test("with Redis down: POST /apple/payment and the reads that need Redis answer 503 with Retry-After, never 200")
    func paymentRedisDown() async throws {
        let port = try DedicatedRedis.closedPort()
        try await APIHarness.withAPI(.init(redisURL: "redis://127.0.0.1:\(port)/0")) { api in
            // PostgreSQL is up, so the admin API still provisions a real publisher.
            let tenant = try await api.provisionTenant()
            for _ in 0..<2 {
                let response = try await api.pay(tenant, Payment.body())
                expectError(response, .serviceUnavailable, code: "dependency_unavailable")
                #expect(Int(response.headers[.retryAfter] ?? "") ?? 0 > 0)
            }
            for uri in ["/v1/receipts/\(UUID().uuidString.lowercased())", ReadRouteTests.query("viewer@example.com", Tenant.Offer.pass)] {
                let response = try await api.get(tenant, uri)
                expectError(response, .serviceUnavailable, code: "dependency_unavailable")
                #expect(Int(response.headers[.retryAfter] ?? "") ?? 0 > 0)
            }
            let queue = try await api.admin(.get, "/admin/v1/queue")
            expectError(queue, .serviceUnavailable, code: "dependency_unavailable")
            // The rate limit (on here) lets requests through while Redis is unreachable: it protects capacity and
            // decides nothing, so a route that needs only PostgreSQL still answers.
            let wallet = try await api.get(tenant, "/v1/customers/viewer%40example.com/wallet")
            #expect(wallet.status == .ok, "\(wallet.status)")
            // Bad input is still bad input: validation happens before Redis is needed.
            expectError(try await api.pay(tenant, Payment.body(email: "nope")), .unprocessableContent, code: "invalid_email", field: "customerEmail")
        }
    }

    // MARK: PostgreSQL down

    @Test(
        "a column missing on a schema older than the binary (its last migration not run yet) answers 503 with Retry-After; on a schema recorded current, it is a fault: 500",
        arguments: [false, true]
    )
    func schemaBehind(recorded: Bool) async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            // Migration 9's column gone: as on a database whose `migrate` failed or has not run yet, or (still
            // recorded as applied) through a defect.
            try await api.services.database.query("ALTER TABLE products DROP COLUMN disabled_at CASCADE")
            if !recorded { try await api.services.database.query("DELETE FROM schema_migrations WHERE version >= 9") }

            let listed = try await api.admin(.get, "/admin/v1/products?publisherId=\(tenant.publisherId)")
            let payment = try await api.send(.post, "/apple/payment", headers: tenant.headers, json: Payment.body(offerId: Tenant.Offer.coins))
            if recorded {
                expectError(listed, .internalServerError, code: "internal")
                expectError(payment, .internalServerError, code: "internal")
            } else {
                expectError(listed, .serviceUnavailable, code: "dependency_unavailable")
                #expect(Int(listed.headers[.retryAfter] ?? "") ?? 0 > 0)
                expectError(payment, .serviceUnavailable, code: "dependency_unavailable")
            }
            #expect(try await api.streamLength() == 0)
        }
    }

    @Test("with PostgreSQL down: /health/ready is 503, and publisher and admin requests answer 503 with Retry-After")
    func postgresDown() async throws {
        let port = try DedicatedRedis.closedPort()
        try await APIHarness.withAPI(.init(databaseURL: "postgres://tollgate@127.0.0.1:\(port)/tollgate")) { api in
            let ready = try await api.send(.get, "/health/ready")
            #expect(ready.status == .serviceUnavailable)
            #expect(Int(ready.headers[.retryAfter] ?? "") ?? 0 > 0)
            #expect((try ready.json()["message"] as? String)?.contains("postgresql") == true)
            #expect(try await api.send(.get, "/health/live").status == .ok)

            let headers: HTTPFields = [
                .publisherToken: "pt_unknown", .authorization: Tenant.basic("pub_x", "secret"), .contentType: "application/json",
            ]
            let payment = try await api.send(.post, "/apple/payment", headers: headers, json: Payment.body())
            expectError(payment, .serviceUnavailable, code: "dependency_unavailable")
            #expect(Int(payment.headers[.retryAfter] ?? "") ?? 0 > 0)
            #expect(try await api.streamLength() == 0)

            let admin = try await api.admin(.post, "/admin/v1/publishers", json: ["name": "P"])
            expectError(admin, .serviceUnavailable, code: "dependency_unavailable")
            #expect(Int(admin.headers[.retryAfter] ?? "") ?? 0 > 0)
        }
    }
}
