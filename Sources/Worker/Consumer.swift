import Logging
import ServiceLifecycle
import Shared
import Synchronization

/// Reads the stream as one consumer of the workers' group and keeps up to `concurrency` jobs in flight.
///
/// On start it first replays the entries this consumer name still holds; then it reads new entries and,
/// every claim interval, takes over entries that a dead or stalled worker has held too long. On graceful
/// shutdown it stops reading and lets the jobs in flight finish (the service group's grace period bounds
/// that; jobs cut off then stay pending for other workers).
struct Consumer: Service {
    let queue: ReceiptQueue
    let reader: RedisClient
    let processor: JobProcessor
    let name: String
    let concurrency: Int
    let claimMinIdleMilliseconds: Int
    let logger: Logger

    /// Entries asked for per read; bounded so one process does not hoard a burst its peers could share.
    private var batch: Int { min(self.concurrency, 64) }

    func run() async throws {
        let stopping = Atomic<Bool>(false)
        let slots = AsyncSemaphore(slots: self.concurrency)
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                var lastClaim = ContinuousClock.now
                var claimCursor = "0-0"
                // Entries this consumer name held before a restart are replayed once, page by page.
                var ownPendingCursor: String? = "0"
                var failures = 0
                // Cancellation (a sibling service failed, or the grace period ran out) stops reading too.
                while !stopping.load(ordering: .relaxed), !Task.isCancelled {
                    await slots.acquire()
                    // A SIGTERM that came while every slot was busy: take nothing new.
                    if stopping.load(ordering: .relaxed) {
                        slots.release()
                        break
                    }
                    let free = 1 + slots.tryAcquire(upTo: self.batch - 1)
                    let deliveries: [QueueDelivery]
                    do {
                        if let cursor = ownPendingCursor {
                            deliveries = try await self.queue.readOwnPending(consumer: self.name, after: cursor, count: free)
                            ownPendingCursor = deliveries.last?.entryId
                            if !deliveries.isEmpty { self.logger.info("replaying entries this worker held", metadata: ["count": "\(deliveries.count)"]) }
                        } else if ContinuousClock.now - lastClaim > self.claimInterval {
                            let claimed = try await self.queue.autoclaim(
                                consumer: self.name, minIdleMilliseconds: self.claimMinIdleMilliseconds, cursor: claimCursor, count: free
                            )
                            claimCursor = claimed.cursor
                            if claimed.cursor == "0-0" { lastClaim = ContinuousClock.now }
                            if !claimed.deliveries.isEmpty {
                                self.logger.info("claimed entries from a silent worker", metadata: ["count": "\(claimed.deliveries.count)"])
                            }
                            deliveries = claimed.deliveries
                        } else {
                            deliveries = try await self.queue.readNew(consumer: self.name, count: free, blockMilliseconds: 1000, blockingClient: self.reader)
                        }
                        failures = 0
                    } catch {
                        slots.release(free)
                        failures += 1
                        self.logger.warning("cannot read the queue", metadata: ["error": "\(error)"])
                        // Back off while Redis is away: no hot loop, and no crash loop either.
                        try? await Task.sleep(for: .milliseconds(min(5000, 100 << min(failures, 6))))
                        continue
                    }
                    slots.release(free - deliveries.count)
                    for delivery in deliveries {
                        group.addTask {
                            await self.processor.process(delivery)
                            slots.release()
                        }
                    }
                }
                self.logger.info("stopped reading; finishing jobs in flight")
            }
        } onGracefulShutdown: {
            stopping.store(true, ordering: .relaxed)
        }
    }

    /// How often to look for entries held too long by others.
    private var claimInterval: Duration {
        .milliseconds(max(1000, min(self.claimMinIdleMilliseconds / 2, 30_000)))
    }
}
