/// What the global fault injection decided for one verifyReceipt call, once its latency was served.
struct Admission: Sendable {
    /// How long a `timeout` failure holds the request.
    var timeoutHoldMs: Int
    /// The global failure to answer with, when the fail-rate draw chose this call.
    var injectedFailure: FailMode?
}
