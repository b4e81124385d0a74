import Logging
import ServiceLifecycle
import Shared
import Synchronization

/// Reads the stream as one consumer of the workers' group and keeps up to `concurrency` jobs in flight.
///
/// On start it waits for Redis and for the database schema this build needs, then replays the entries
/// this consumer name still holds; then it reads new entries and, every claim interval, takes over
/// entries that a dead or stalled worker has held too long. While a job runs longer than a fraction of
/// the claim idle time, it tells the group the entry is still held, so a live worker's slow job is never
/// claimed and run a second time. While a job finds PostgreSQL away, it starts nothing new, and then one
/// job at a time until one goes through (``DatabaseWatch``). On graceful shutdown it stops reading and
/// lets the jobs in flight finish (the service group's grace period bounds that; jobs cut off then are
/// parked for other workers to take at once).
struct Consumer: Service {
    let queue: ReceiptQueue
    let reader: RedisClient
    /// Probed while PostgreSQL is away (``DatabaseWatch``).
    let database: PostgresClient
    /// Waited for before the first job: a schema behind this build would fail every grant.
    let schema: SchemaCheck
    let processor: JobProcessor
    let name: String
    let concurrency: Int
    let claimMinIdleMilliseconds: Int
    let logger: Logger

    /// Entries asked for per read; bounded so one process does not hoard a burst its peers could share.
    private var batch: Int { min(self.concurrency, 64) }

    func run() async throws {
        // Redis may not answer yet at start: the health server answers meanwhile (live, not ready), and a
        // SIGTERM ends the wait at once. Redis refusing the URL's credentials or database is a bad value:
        // the error stops the worker, which exits 2 naming the variable.
        switch await untilGracefulShutdown({ await self.queue.prepareWhenReachable(logger: self.logger) }) {
        case .prepared?: break
        case .refused(let error)?: throw error
        case .cancelled?, nil: return
        }
        guard await untilGracefulShutdown({ await self.schema.waitUntilCurrent(logger: self.logger) }) == true else { return }
        let stopping = Atomic<Bool>(false)
        let slots = AsyncSemaphore(slots: self.concurrency)
        let held = HeldEntries()
        // A SIGTERM that came since runs the handler at once.
        await withGracefulShutdownHandler {
            // Runs until reading has stopped and the last job has finished, through a graceful shutdown too.
            let keeper = Task { await self.keepHeld(held) }
            await withDiscardingTaskGroup { group in
                var lastClaim = ContinuousClock.now
                var claimCursor = "0-0"
                // Entries this consumer name held before a restart are replayed once, page by page.
                var ownPendingCursor: String? = "0"
                var failures = 0
                var claiming = false
                // Cancellation (a sibling service failed, or the grace period ran out) stops reading too.
                while !stopping.load(ordering: .relaxed), !Task.isCancelled {
                    // PostgreSQL away: nothing new starts (and nothing is claimed) until it is back.
                    let watch = self.processor.fulfiller.database
                    if watch.isAway, await !watch.untilBack(self.database, logger: self.logger, stopping: { stopping.load(ordering: .relaxed) }) {
                        break
                    }
                    // On trial (PostgreSQL answered a probe after an outage): one job, alone, so that it alone tells.
                    let onTrial = watch.isOnTrial
                    if onTrial {
                        for _ in 0..<self.concurrency { await slots.acquire() }
                        slots.release(self.concurrency - 1)
                    } else {
                        await slots.acquire()
                    }
                    // A SIGTERM or a cancellation that came while every slot was busy: take nothing new. Nor
                    // while PostgreSQL went away meanwhile (the jobs that freed the slots found it so): the
                    // loop's top waits for it.
                    if stopping.load(ordering: .relaxed) || Task.isCancelled {
                        slots.release()
                        break
                    }
                    if watch.isAway {
                        slots.release()
                        continue
                    }
                    let free = onTrial ? 1 : 1 + slots.tryAcquire(upTo: self.batch - 1)
                    let deliveries: [QueueDelivery]
                    do {
                        if let cursor = ownPendingCursor {
                            deliveries = try await self.queue.readOwnPending(consumer: self.name, after: cursor, count: free)
                            ownPendingCursor = deliveries.last?.entryId
                            if !deliveries.isEmpty { self.logger.info("replaying entries this worker held", metadata: ["count": "\(deliveries.count)"]) }
                        } else if ContinuousClock.now - lastClaim > self.claimInterval {
                            claiming = true
                            let claimed = try await self.queue.autoclaim(
                                consumer: self.name, minIdleMilliseconds: self.claimMinIdleMilliseconds, cursor: claimCursor, count: free
                            )
                            claimCursor = claimed.cursor
                            if claimed.cursor == "0-0" { lastClaim = ContinuousClock.now }
                            if !claimed.deliveries.isEmpty {
                                self.logger.info("claimed entries from a silent worker", metadata: ["count": "\(claimed.deliveries.count)"])
                            }
                            deliveries = claimed.deliveries
                            claiming = false
                        } else {
                            deliveries = try await self.queue.readNew(consumer: self.name, count: free, blockMilliseconds: 1000, blockingClient: self.reader)
                        }
                        failures = 0
                    } catch {
                        slots.release(free)
                        failures += 1
                        if claiming {
                            // The next claim waits an interval and starts over: a claim that keeps failing
                            // must not stop this worker from reading new entries.
                            claiming = false
                            lastClaim = ContinuousClock.now
                            claimCursor = "0-0"
                        }
                        if (error as? RedisError)?.isAccessRefused == true {
                            // Not an outage: a password, user, database or ACL changed under a running worker.
                            self.logger.error("Redis refused Tollgate's access: check TOLLGATE_REDIS_URL and its user's ACL", metadata: ["error": "\(error)"])
                        } else {
                            self.logger.warning("cannot read the queue", metadata: ["error": "\(error)"])
                        }
                        if (error as? RedisError)?.isNoGroup == true {
                            // Redis lost the group (its data was lost or flushed; a submission's XADD made a new
                            // stream): create it again, from the stream's start, so nothing accepted is skipped.
                            do {
                                try await self.queue.prepare()
                                self.logger.warning("created the consumer group again")
                            } catch {
                                self.logger.warning("cannot create the consumer group", metadata: ["error": "\(error)"])
                            }
                        }
                        // Back off while Redis is away: no hot loop, and no crash loop either.
                        try? await Task.sleep(for: .milliseconds(min(5000, 100 << min(failures, 6))))
                        continue
                    }
                    slots.release(free - deliveries.count)
                    for delivery in deliveries {
                        // A claim can hand back an entry this worker runs already (its renewal lagged): one
                        // run of it is enough.
                        guard held.insert(delivery.entryId) else {
                            slots.release()
                            continue
                        }
                        group.addTask {
                            await self.processor.process(delivery, onTrial: onTrial)
                            held.remove(delivery.entryId)
                            slots.release()
                        }
                    }
                }
                // Read no more (the stop was taken, and a slot came free or the grace ran out); jobs may still run.
                self.logger.info("stopped reading; finishing jobs in flight")
            }
            if !Task.isCancelled { self.logger.info("every job in flight has ended") }
            keeper.cancel()
            // Every job finished: this name leaves the group, which would otherwise list every worker that ever
            // ran. One that still holds entries stays, so a restart under the same name resumes them.
            if !Task.isCancelled {
                do {
                    if try await self.queue.leaveGroup(consumer: self.name) { self.logger.info("left the consumer group") }
                } catch {
                    self.logger.warning("cannot leave the consumer group", metadata: ["error": "\(error)"])
                }
            }
        } onGracefulShutdown: {
            stopping.store(true, ordering: .relaxed)
            // Said when the signal is taken: the read loop notices it only once a slot comes free.
            self.logger.info("stopping: reading no more jobs; finishing those in flight", metadata: ["in_flight": "\(held.count)"])
        }
    }

    /// Every keep interval, renews the entries held longer than that: an entry's idle time then never
    /// passes about two intervals, half the claim idle time.
    private func keepHeld(_ held: HeldEntries) async {
        let interval = Self.keepInterval(claimMinIdleMilliseconds: self.claimMinIdleMilliseconds)
        while !Task.isCancelled {
            try? await Task.sleep(for: interval)
            let ids = held.ids(heldLongerThan: interval)
            guard !ids.isEmpty, !Task.isCancelled else { continue }
            do {
                // Chunks bound how long one script holds Redis.
                for start in stride(from: 0, to: ids.count, by: 256) {
                    try await self.queue.keepHeld(consumer: self.name, entryIds: Array(ids[start..<min(ids.count, start + 256)]))
                }
            } catch {
                self.logger.warning("cannot renew the entries this worker holds", metadata: ["error": "\(error)"])
            }
        }
    }

    /// A quarter of the claim idle time, but at least 10 ms: a claim idle time of a few milliseconds
    /// (allowed, if unwise) must not turn the renewal into a loop that wakes every millisecond.
    static func keepInterval(claimMinIdleMilliseconds: Int) -> Duration {
        .milliseconds(max(10, claimMinIdleMilliseconds / 4))
    }

    /// How often to look for entries held too long by others.
    private var claimInterval: Duration {
        .milliseconds(max(1000, min(self.claimMinIdleMilliseconds / 2, 30_000)))
    }
}

/// The entries whose jobs run now, with when each was taken.
final class HeldEntries: Sendable {
    private let entries = Mutex<[String: ContinuousClock.Instant]>([:])

    /// Takes `entryId`; false when it is held already.
    func insert(_ entryId: String) -> Bool {
        self.entries.withLock { entries in
            guard entries[entryId] == nil else { return false }
            entries[entryId] = .now
            return true
        }
    }

    func remove(_ entryId: String) {
        _ = self.entries.withLock { $0.removeValue(forKey: entryId) }
    }

    /// How many are held.
    var count: Int { self.entries.withLock { $0.count } }

    /// The entries taken more than `duration` ago, oldest first.
    func ids(heldLongerThan duration: Duration) -> [String] {
        let cutoff = ContinuousClock.now - duration
        return self.entries.withLock { entries in
            entries.filter { $0.value < cutoff }.sorted { $0.value < $1.value }.map(\.key)
        }
    }
}
