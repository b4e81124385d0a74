/// What an operator's requeue did.
public enum RequeueOutcome: Sendable, Equatable {
    /// Back on the stream with fresh attempts.
    case requeued
    /// Not failed (already requeued, or never failed): nothing changed.
    case notFailed(JobStatus)
    /// Unknown job, or its receipt is gone.
    case missing
}
