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

/// What recording a job's final outcome did (``ReceiptQueue/finish(_:job:status:reason:environment:expiresAt:now:retentionSeconds:claimed:)``,
/// ``ReceiptQueue/deadLetter(_:job:reason:detail:now:retentionSeconds:)``). Its entry is acknowledged in every case.
public enum FinalRecord: Sendable, Equatable {
    /// This run's outcome is the job's (the same run's record sent again after its answer was lost included): count it.
    case recorded
    /// The job was final already: another copy of it (a peer that claimed its entry while this worker stalled)
    /// ended it, and that copy counted it.
    case alreadyFinal
    /// A stale copy: the job runs on another entry by now (promoted, put back or requeued since), whose run decides.
    case superseded

    init(reply: RedisValue) throws {
        switch reply.int {
        case 1: self = .recorded
        case -1: self = .alreadyFinal
        case 0: self = .superseded
        default: throw RedisError(.protocolViolation, "a final record's script returned an unexpected reply")
        }
    }
}
