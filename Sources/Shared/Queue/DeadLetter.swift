/// One dead-lettered job (`GET /admin/v1/dead-letters`).
public struct DeadLetter: Sendable, Equatable, Codable {
    /// The job.
    public var jobId: String
    /// Why it failed.
    public var reason: String
    /// The last error in more detail (Apple's status, an HTTP status…); never receipt data.
    public var detail: String
    /// When it was dead-lettered (Unix ms).
    public var failedAt: Int

    /// Creates a dead letter.
    public init(jobId: String, reason: String, detail: String, failedAt: Int) {
        self.jobId = jobId
        self.reason = reason
        self.detail = detail
        self.failedAt = failedAt
    }
}
