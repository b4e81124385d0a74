import AsyncHTTPClient
import Hummingbird
import NIOCore
import Shared
import Testing

/// A verifyReceipt answer that sends its head and then stalls must not hold the call: async-http-client's
/// deadline ends when the head arrives, so the worker's client (as `makeHTTPClient` configures it) stops
/// the body with its read timeout, and the call is a transport failure to retry.
@Suite("Apple answers that stall")
struct AppleTimeoutTests {
    @Test("an answer whose body stalls after its head ends the call at the timeout, as a retry")
    func stalledBody() async throws {
        let router = Router()
        router.post("verifyReceipt") { _, _ in
            Response(status: .ok, headers: [.contentType: "application/json"], body: ResponseBody { writer in
                try await writer.write(ByteBuffer(string: "{\"status\":"))
                try await Task.sleep(for: .seconds(10))
                try await writer.finish(nil)
            })
        }
        let server = try await LoopbackServer.start(router, label: "test.stalling-apple")
        let configuration = try Configuration(environment: ["TOLLGATE_APPLE_TIMEOUT_MS": "500"])
        let http = VerifyReceiptClient.makeHTTPClient(configuration: configuration)
        let client = VerifyReceiptClient(
            http: http, productionURL: "\(server.base)/verifyReceipt", sandboxURL: "\(server.base)/sandbox/verifyReceipt",
            timeoutMilliseconds: configuration.appleTimeoutMilliseconds
        )
        let started = ContinuousClock.now
        let verdict = await client.verify(receiptData: "QQ==", password: nil, excludeOldTransactions: false, environment: .production)
        let waited = ContinuousClock.now - started
        guard case .retry(let detail, nil, .failed(.appleUnavailable)) = verdict else {
            Issue.record("a stalled answer gave \(verdict), not a transport failure to retry")
            return
        }
        #expect(detail.hasPrefix("Production: "))
        // Well before the server would have finished its answer (10 s).
        #expect(waited < .seconds(8), "the call waited \(waited)")
        try await http.shutdown()
        await server.stop()
    }

    @Test("an answer whose body trickles after its head ends the call at the timeout, as a retry", .timeLimit(.minutes(1)))
    func tricklingBody() async throws {
        let router = Router()
        router.post("verifyReceipt") { _, _ in
            // A space (valid JSON whitespace) every 100 ms for ten minutes: never silent for the read timeout.
            Response(status: .ok, headers: [.contentType: "application/json"], body: ResponseBody { writer in
                try await writer.write(ByteBuffer(string: "{\"status\":"))
                for _ in 0..<6_000 {
                    try await Task.sleep(for: .milliseconds(100))
                    try await writer.write(ByteBuffer(string: " "))
                }
                try await writer.write(ByteBuffer(string: "0}"))
                try await writer.finish(nil)
            })
        }
        let server = try await LoopbackServer.start(router, label: "test.trickling-apple")
        let configuration = try Configuration(environment: ["TOLLGATE_APPLE_TIMEOUT_MS": "1000"])
        let http = VerifyReceiptClient.makeHTTPClient(configuration: configuration)
        let client = VerifyReceiptClient(
            http: http, productionURL: "\(server.base)/verifyReceipt", sandboxURL: "\(server.base)/sandbox/verifyReceipt",
            timeoutMilliseconds: configuration.appleTimeoutMilliseconds
        )
        let verdict = await client.verify(receiptData: "QQ==", password: nil, excludeOldTransactions: false, environment: .production)
        guard case .retry(let detail, nil, .failed(.appleUnavailable)) = verdict else {
            Issue.record("a trickling answer gave \(verdict), not a transport failure to retry")
            return
        }
        #expect(detail == "Production: timeout")
        try await http.shutdown()
        await server.stop()
    }
}
