/// The queue at a glance (`GET /admin/v1/queue`).
public struct QueueCounts: Sendable, Equatable, Codable {
    /// Entries no worker has taken yet.
    public var queued: Int
    /// Entries held by workers.
    public var processing: Int
    /// Jobs waiting for their next attempt.
    public var retrying: Int
    /// Dead-lettered jobs.
    public var dead: Int

    /// Creates counts.
    public init(queued: Int, processing: Int, retrying: Int, dead: Int) {
        self.queued = queued
        self.processing = processing
        self.retrying = retrying
        self.dead = dead
    }
}
