/// Call counters served by `GET /emulator/stats`; its property names are part of the emulator's interface.
struct EmulatorStats: Codable, Equatable, Sendable {
    /// Calls to `POST /verifyReceipt`.
    var production = 0
    /// Calls to `POST /sandbox/verifyReceipt`.
    var sandbox = 0
    /// Calls answered with an injected failure, global or per scenario.
    var failuresInjected = 0
    /// Well-formed requests that carried a `password` (a shared secret).
    var withPassword = 0
    /// Well-formed requests that asked for `exclude-old-transactions: true`.
    var excludeOldTransactions = 0
}
