/// Where a submitted receipt stands (CONTRACT.md, `GET /v1/receipts/{jobId}`).
public enum JobStatus: String, Sendable, Codable, CaseIterable {
    /// Accepted and waiting for a worker.
    case queued
    /// A worker is verifying it with Apple.
    case processing
    /// Apple confirmed the purchase and the grant is committed.
    case granted
    /// Final: Apple's answer (or a claim) refuses it; see the reason.
    case rejected
    /// Waiting for another attempt after a failure that may pass.
    case retrying
    /// Final, dead-lettered: retries ran out or an operator must act; can be requeued.
    case failed

    /// Whether no worker will touch the job again (short of an operator's requeue).
    public var isFinal: Bool { self == .granted || self == .rejected || self == .failed }

    /// Whether the job still counts as pending for access-status polling.
    public var isPending: Bool { self == .queued || self == .processing || self == .retrying }
}
