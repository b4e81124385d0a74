/// Polls until a condition holds or a deadline passes: tests wait for outcomes, never for luck.
public enum Poll {
    /// Returns the first non-nil value `probe` yields, checking every `interval` until `timeout`.
    public static func until<T>(
        timeout: Duration = .seconds(60), interval: Duration = .milliseconds(100), _ what: String, _ probe: () async throws -> T?
    ) async throws -> T {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let value = try await probe() { return value }
            guard ContinuousClock.now < deadline else { throw Timeout(what: what, timeout: timeout) }
            try await Task.sleep(for: interval)
        }
    }

    /// A condition that never held.
    public struct Timeout: Error, CustomStringConvertible {
        public let what: String
        public let timeout: Duration
        public var description: String { "timed out after \(self.timeout) waiting for \(self.what)" }
    }
}
