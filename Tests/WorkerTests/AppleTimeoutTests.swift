import Hummingbird
import NIOCore
import Shared
import Testing

/// A verifyReceipt answer that sends its head and then stalls, or trickles, must not hold the call: the
/// worker's client (as `makeHTTPClient` configures it) ends the whole call at `TOLLGATE_APPLE_TIMEOUT_MS`,
/// and the call is a transport failure to retry.
@Suite("Apple answers that stall")
struct AppleTimeoutTests {
    @Test("an answer whose body stalls after its head ends the call at the timeout, as a retry")
    func stalledBody() async throws {
        // Had the call waited for the whole answer (10 s), it would have read `{"status":0}`, not timed out.
        let verdict = try await Self.verdict(timeoutMilliseconds: 500) { _ in
            try await Task.sleep(for: .seconds(10))
        }
        guard case .retry(let detail, nil, .failed(.appleUnavailable)) = verdict else {
            Issue.record("a stalled answer gave \(verdict), not a transport failure to retry")
            return
        }
        #expect(detail == "Production: timeout")
    }

    @Test("an answer whose body trickles after its head ends the call at the timeout, as a retry", .timeLimit(.minutes(1)))
    func tricklingBody() async throws {
        let verdict = try await Self.verdict(timeoutMilliseconds: 1000) { writer in
            // A space (valid JSON whitespace) every 100 ms for ten minutes: never silent for the read timeout.
            for _ in 0..<6_000 {
                try await Task.sleep(for: .milliseconds(100))
                try await writer.write(ByteBuffer(string: " "))
            }
        }
        guard case .retry(let detail, nil, .failed(.appleUnavailable)) = verdict else {
            Issue.record("a trickling answer gave \(verdict), not a transport failure to retry")
            return
        }
        #expect(detail == "Production: timeout")
    }

    /// One production call, with the worker's client and `timeoutMilliseconds`, to a verifyReceipt that
    /// answers 200, writes `{"status":`, then `rest`, then `0}`.
    private static func verdict(
        timeoutMilliseconds: Int, rest: @escaping @Sendable (inout any ResponseBodyWriter) async throws -> Void
    ) async throws -> AppleVerdict {
        try await AppleStub.with(timeoutMilliseconds: timeoutMilliseconds, rest: rest) { await AppleStub.verify($0) }
    }
}
