import Hummingbird
import HummingbirdTesting
import Logging
import Shared
import Testing
import TestSupport

@testable import API

/// How `ErrorMiddleware` answers errors that no route test can provoke on demand.
@Suite("Error middleware")
struct ErrorMiddlewareTests {
    /// A router whose one route throws `error`, behind the error middleware, logging into `lines`. The
    /// schema check is never asked (it is only for PostgreSQL's schema errors), so no database is needed.
    private static func answer(to error: any Error & Sendable, lines: CapturedLines) async throws -> TestResponse {
        let router = Router(context: TollgateRequestContext.self)
        router.add(middleware: ErrorMiddleware(schema: SchemaCheck(database: PostgresClient(url: "postgres://nobody@127.0.0.1:1/none", connections: 1))))
        router.get("/throws") { _, _ -> Response in throw error }
        var logger = Logger(label: "test") { _ in lines }
        logger.logLevel = .info
        let application = Application(router: router, logger: logger)
        return try await application.test(.router) { client in
            try await client.execute(uri: "/throws", method: .get)
        }
    }

    @Test("a request the shutdown cuts off (CancellationError) is a 503 with Retry-After, not a 500 and an error line")
    func cutOffByShutdown() async throws {
        let lines = CapturedLines()
        let response = try await Self.answer(to: CancellationError(), lines: lines)
        expectError(response, .serviceUnavailable, code: "shutting_down")
        #expect(response.headers[.retryAfter] == "5")
        #expect(lines.count("request failed") == 0, "\(lines.lines)")
    }

    @Test("any other unexpected error is a 500 internal, logged as a fault")
    func fault() async throws {
        struct Unexpected: Error {}
        let lines = CapturedLines()
        let response = try await Self.answer(to: Unexpected(), lines: lines)
        expectError(response, .internalServerError, code: "internal")
        #expect(lines.count("request failed") == 1, "\(lines.lines)")
    }
}
