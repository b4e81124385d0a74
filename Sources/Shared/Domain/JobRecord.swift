import Foundation

/// What is known about a job's progress: the public view of `GET /v1/receipts/{jobId}`.
public struct JobRecord: Sendable, Equatable {
    /// The job's id.
    public var jobId: String
    /// The publisher that owns it.
    public var publisherId: UUID
    /// Where it stands.
    public var status: JobStatus
    /// Verification attempts made so far.
    public var attempts: Int
    /// Why it was rejected or failed, or the last retryable failure.
    public var reason: String?
    /// When the next attempt is due (Unix milliseconds), while retrying.
    public var nextAttemptAtMilliseconds: Int?
    /// The customer's email (lower-cased).
    public var customerEmail: String
    /// The offer.
    public var offerId: String
    /// Apple's environment, once verified.
    public var environment: String?
    /// When the granted access ends (Unix seconds), once granted with an expiry.
    public var expiresAt: Int?

    /// Creates a record.
    public init(
        jobId: String, publisherId: UUID, status: JobStatus, attempts: Int, reason: String? = nil,
        nextAttemptAtMilliseconds: Int? = nil, customerEmail: String, offerId: String, environment: String? = nil,
        expiresAt: Int? = nil
    ) {
        self.jobId = jobId
        self.publisherId = publisherId
        self.status = status
        self.attempts = attempts
        self.reason = reason
        self.nextAttemptAtMilliseconds = nextAttemptAtMilliseconds
        self.customerEmail = customerEmail
        self.offerId = offerId
        self.environment = environment
        self.expiresAt = expiresAt
    }
}
