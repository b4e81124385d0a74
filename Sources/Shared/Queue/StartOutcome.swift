/// What a worker finds when it starts on a delivery.
public enum StartOutcome: Sendable, Equatable {
    /// Work to do: the job, which attempt this is, when it was accepted (Unix ms), and whether it started
    /// before (since it was accepted or requeued), counted or not: an attempt taken back for an outage may
    /// have committed its grant as PostgreSQL went away.
    case ready(ReceiptJob, attempt: Int, acceptedAtMilliseconds: Int, startedBefore: Bool)
    /// Started more often than attempts allow without ever finishing: dead-letter it instead of crashing
    /// workers forever (or record its grant, when one committed), with when it was accepted, as for `ready`.
    case poison(ReceiptJob, attempt: Int, acceptedAtMilliseconds: Int)
    /// Already final (a replay after a crash between commit and acknowledgement): just acknowledge.
    case final(JobStatus)
    /// The job's status is there but its payload is not one this version can read (written by another
    /// version): dead-letter it, so that it is neither dropped nor put back forever.
    case unreadable(attempt: Int)
    /// The job's status or payload is gone (expired, or already final): acknowledge and drop the entry.
    case missing
}
