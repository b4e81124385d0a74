import Shared
import Testing

/// A verifyReceipt answer that sends its head and then stalls, or trickles, must not hold the call: the
/// worker's client (as `makeHTTPClient` configures it) ends the whole call at `TOLLGATE_APPLE_TIMEOUT_MS`,
/// and the call is a transport failure to retry. The emulator's `stall` and `trickle` modes send such answers.
@Suite("Apple answers that stall")
struct AppleTimeoutTests {
    @Test("an answer whose body stalls after its head ends the call at the timeout, as a retry")
    func stalledBody() async throws {
        // Had the call waited for the whole answer (10 s), it would have read 21005, not timed out.
        let verdict = try await Self.verdict(mode: "stall", holdMilliseconds: 10_000, timeoutMilliseconds: 500)
        guard case .retry(let detail, nil, .failed(.appleUnavailable)) = verdict else {
            Issue.record("a stalled answer gave \(verdict), not a transport failure to retry")
            return
        }
        #expect(detail == "Production: timeout")
    }

    @Test("an answer whose body trickles after its head ends the call at the timeout, as a retry", .timeLimit(.minutes(1)))
    func tricklingBody() async throws {
        // A space every 100 ms for ten minutes: never silent for a read timeout.
        let verdict = try await Self.verdict(mode: "trickle", holdMilliseconds: 600_000, timeoutMilliseconds: 1000)
        guard case .retry(let detail, nil, .failed(.appleUnavailable)) = verdict else {
            Issue.record("a trickling answer gave \(verdict), not a transport failure to retry")
            return
        }
        #expect(detail == "Production: timeout")
    }

    /// One production call, with the worker's client and `timeoutMilliseconds`, to an emulator that answers
    /// every call in `mode`, holding it `holdMilliseconds`.
    private static func verdict(mode: String, holdMilliseconds: Int, timeoutMilliseconds: Int) async throws -> AppleVerdict {
        try await EmulatedApple.with(
            ["--fail-rate", "1", "--fail-mode", mode, "--timeout-hold-ms", String(holdMilliseconds)], timeoutMilliseconds: timeoutMilliseconds
        ) { apple in
            await EmulatedApple.verify(apple.client())
        }
    }
}
