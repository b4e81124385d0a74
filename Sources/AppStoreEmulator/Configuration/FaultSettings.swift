/// The global fault injection, changeable at runtime through `POST /emulator/config`.
///
/// Encoded as-is as the answer of that route, so its property names are part of the emulator's interface.
struct FaultSettings: Codable, Equatable, Sendable {
    /// Delay added before every verifyReceipt answer, in milliseconds.
    var latencyMs: Int
    /// Share of verifyReceipt calls, 0…1, answered with `failMode` instead of the scenario's answer.
    var failRate: Double
    /// How an injected failure is answered.
    var failMode: FailMode
    /// How long the `timeout` mode holds a request before answering 504, in milliseconds.
    var timeoutHoldMs: Int

    /// The settings a process starts with when nothing is configured.
    static let defaults = FaultSettings(latencyMs: 0, failRate: 0, failMode: .http503, timeoutHoldMs: 30_000)

    /// Whether a latency or hold value is acceptable: non-negative and at most one hour, so a typo
    /// cannot park requests for days.
    static func isValidDuration(_ milliseconds: Int) -> Bool {
        (0...3_600_000).contains(milliseconds)
    }

    /// Whether a fail rate is acceptable: a finite share between 0 and 1.
    static func isValidRate(_ rate: Double) -> Bool {
        rate.isFinite && (0...1).contains(rate)
    }
}
