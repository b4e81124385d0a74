/// One stream entry handed to this worker: which job, and the entry to acknowledge when done.
public struct QueueDelivery: Sendable, Equatable {
    /// The stream entry id.
    public let entryId: String
    /// The job it refers to.
    public let jobId: String

    /// Creates a delivery.
    public init(entryId: String, jobId: String) {
        self.entryId = entryId
        self.jobId = jobId
    }
}
