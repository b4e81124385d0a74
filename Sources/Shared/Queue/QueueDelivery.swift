/// One stream entry handed to this worker: which job, the entry to acknowledge when done, and the consumer
/// it was handed to (only the entry's holder parks its job, ``ReceiptQueue/retry(_:jobId:dueAt:reason:now:limit:counts:)``).
public struct QueueDelivery: Sendable, Equatable {
    /// The stream entry id.
    public let entryId: String
    /// The job it refers to.
    public let jobId: String
    /// The consumer of the workers' group that read or claimed the entry.
    public let consumer: String

    /// Creates a delivery.
    public init(entryId: String, jobId: String, consumer: String) {
        self.entryId = entryId
        self.jobId = jobId
        self.consumer = consumer
    }
}
