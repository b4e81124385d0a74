/// What happened to a submission.
public enum EnqueueOutcome: Sendable, Equatable {
    /// A new job was stored.
    case created(jobId: String)
    /// The same submission was already stored: its job id and current status.
    case duplicate(jobId: String, status: JobStatus)
    /// The transaction id is already claimed by another customer of the publisher.
    case alreadyClaimed
}
