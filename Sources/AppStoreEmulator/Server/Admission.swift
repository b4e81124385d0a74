/// What the shared state decided for one verifyReceipt call as it arrived.
struct Admission: Sendable {
    /// Global delay to add before answering.
    var latencyMs: Int
    /// How long a `timeout` failure holds the request.
    var timeoutHoldMs: Int
    /// The global failure to answer with, when the fail-rate draw chose this call.
    var injectedFailure: FailMode?
}
