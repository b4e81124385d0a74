import Logging
import Metrics
import ServiceLifecycle

/// Samples the queue every few seconds into Prometheus gauges, so every API and worker process shows how
/// far behind the queue is (OPERATIONS.md scales workers on `tollgate_queue_lag + tollgate_queue_pending`).
///
/// - `tollgate_queue_stream_length`: entries in the job stream (acknowledged entries are deleted).
/// - `tollgate_queue_lag`: entries no worker has taken yet.
/// - `tollgate_queue_pending`: entries taken by a worker and not yet acknowledged.
/// - `tollgate_queue_delayed`: jobs waiting for their next attempt.
/// - `tollgate_queue_dead_letters`: dead-lettered jobs.
/// - `tollgate_queue_sampled_at_seconds`: when the gauges above were last read (Unix time, s). While Redis cannot
///   be read they keep their last values; this says how old those are.
public struct QueueGauges: Service, CustomStringConvertible {
    let queue: ReceiptQueue
    let interval: Duration
    let logger: Logger

    private let streamLength = Gauge(label: "tollgate_queue_stream_length")
    private let lag = Gauge(label: "tollgate_queue_lag")
    private let pending = Gauge(label: "tollgate_queue_pending")
    private let delayed = Gauge(label: "tollgate_queue_delayed")
    private let deadLetters = Gauge(label: "tollgate_queue_dead_letters")
    private let sampledAt = Gauge(label: "tollgate_queue_sampled_at_seconds")

    /// How ServiceGroup's logs name it.
    public var description: String { "QueueGauges" }

    /// Creates the sampler.
    public init(queue: ReceiptQueue, interval: Duration = .seconds(5), logger: Logger) {
        self.queue = queue
        self.interval = interval
        self.logger = logger
    }

    /// Reads the counts once into the gauges.
    public func sample() async throws {
        let counts = try await self.queue.counts()
        self.streamLength.record(counts.queued + counts.processing)
        self.lag.record(counts.queued)
        self.pending.record(counts.processing)
        self.delayed.record(counts.retrying)
        self.deadLetters.record(counts.dead)
        self.sampledAt.record(Double(WallClock.nowMilliseconds()) / 1000)
    }

    public func run() async {
        await untilGracefulShutdown {
            while !Task.isCancelled {
                do {
                    try await self.sample()
                } catch {
                    // Readiness reports the outage; the gauges keep their last values.
                    self.logger.debug("cannot sample the queue", metadata: ["error": "\(error)"])
                }
                try? await Task.sleep(for: self.interval)
            }
        }
    }
}
