/// What parking a job for a later attempt did (``ReceiptQueue/retry(_:jobId:dueAt:reason:now:limit:counts:)``).
public enum ParkOutcome: Sendable, Equatable {
    /// Parked until `dueAt` (Unix ms), its entry acknowledged.
    case parked(dueAt: Int)
    /// The job was final already (another copy of it ended it): its entry is acknowledged, nothing parked.
    case alreadyFinal
    /// The attempts that ended as the limit says reached it: nothing parked, and the caller ends the job.
    case limitReached
    /// The entry is no longer this consumer's: a peer claimed it while this worker stalled, or it was
    /// acknowledged already. Nothing changed; the copy that holds it records the job's outcome.
    case notHeld
}
