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
    /// A router whose one route throws `error` (after cancelling its own task when `cancelled`), behind the
    /// error middleware, logging into `lines`. The schema check is never asked (it is only for PostgreSQL's
    /// schema errors), so its client never connects.
    private static func answer(to error: any Error & Sendable, cancelled: Bool = false, lines: CapturedLines) async throws -> TestResponse {
        let database = PostgresClient(url: "postgres://nobody@127.0.0.1:1/none", connections: 1)
        let router = Router(context: TollgateRequestContext.self)
        router.add(middleware: ErrorMiddleware(schema: SchemaCheck(database: database)))
        router.get("/throws") { _, _ -> Response in
            if cancelled { withUnsafeCurrentTask { $0?.cancel() } }
            throw error
        }
        var logger = Logger(label: "test") { _ in lines }
        logger.logLevel = .info
        let application = Application(router: router, logger: logger)
        return try await TestEnvironment.using(database) {
            try await application.test(.router) { client in
                // A task of its own, so that the route cancels the request's task and not the test's.
                try await Task { try await client.execute(uri: "/throws", method: .get) }.value
            }
        }
    }

    @Test("a request the shutdown cuts off (CancellationError in a cancelled task) is a 503 with Retry-After, not a 500 and an error line")
    func cutOffByShutdown() async throws {
        let lines = CapturedLines()
        let response = try await Self.answer(to: CancellationError(), cancelled: true, lines: lines)
        expectError(response, .serviceUnavailable, code: "shutting_down")
        #expect(response.headers[.retryAfter] == "5")
        #expect(lines.count("request failed") == 0, "\(lines.lines)")
    }

    @Test("a CancellationError in a task nobody cancelled, or any other unexpected error, is a 500 internal, logged as a fault")
    func fault() async throws {
        struct Unexpected: Error {}
        for error: any Error & Sendable in [Unexpected(), CancellationError()] {
            let lines = CapturedLines()
            let response = try await Self.answer(to: error, lines: lines)
            expectError(response, .internalServerError, code: "internal")
            #expect(lines.count("request failed") == 1, "\(lines.lines)")
        }
    }
}
