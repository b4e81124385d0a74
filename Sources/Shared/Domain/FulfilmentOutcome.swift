/// Where fulfilling one job ended, before it is recorded in the queue.
public enum FulfilmentOutcome: Sendable, Equatable {
    /// Committed in PostgreSQL; `expiresAt` in Unix seconds when the access ends. `claimed`: the transaction
    /// ids the grant made the customer's (the purchase; for a subscription, every period the answer lists).
    case granted(environment: String, expiresAt: Int?, claimed: [String] = [])
    /// Final refusal; `expiresAt` (Unix seconds) when an expired subscription's end is known.
    case rejected(JobReason, environment: String?, expiresAt: Int? = nil)
    /// Dead-letter at once (an operator must act).
    case failed(JobReason, detail: String)
    /// Try again later, within `attemptLimit` attempts that end with the same `detail` and the policy's limit
    /// on all attempts; `exhausted` is the end once out of attempts.
    case retry(JobReason, detail: String, attemptLimit: Int?, exhausted: AppleVerdict.Exhaustion)
    /// PostgreSQL could not serve the job: away (unreachable, refusing writes, out of storage), or every
    /// connection of the worker's pool busy past the acquire timeout. Try again later; not the job's fault, so
    /// the attempt is not spent, and the policy's age limit still ends it. Only PostgreSQL away holds the
    /// worker's intake off (``DatabaseWatch``).
    case outage(detail: String)

    /// Whether Apple's answer and the ledger decided the job (granted or rejected), rather than the
    /// attempt failing on its way.
    public var isDecided: Bool {
        switch self {
        case .granted, .rejected: true
        case .failed, .retry, .outage: false
        }
    }
}
