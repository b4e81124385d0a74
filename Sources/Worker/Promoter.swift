import Logging
import ServiceLifecycle
import Shared

/// Moves due retries from the delayed set back to the stream, puts back jobs whose stream entry
/// vanished, drops dead letters past the retention and the consumer names of workers that are gone. Every worker runs one; each move is one atomic
/// script, so a job is never moved twice.
struct Promoter: Service {
    let queue: ReceiptQueue
    /// A job unseen this long whose entry is gone is put back (`TOLLGATE_CLAIM_MIN_IDLE_MS`).
    let lostAfterMilliseconds: Int
    /// How long a job's status is kept (`TOLLGATE_JOB_RETENTION_S`): older dead letters are dropped.
    let retentionSeconds: Int
    let logger: Logger

    /// A consumer name that holds nothing and has not read for this long is a worker that is gone: an hour,
    /// or ten claim idle times if longer. A live worker reads at least every second.
    var forgetConsumersAfterMilliseconds: Int { max(3_600_000, self.lostAfterMilliseconds * 10) }

    /// How often due retries are looked for.
    static let interval = Duration.milliseconds(250)
    /// The longest wait between tries while Redis is away.
    static let maxBackoff = Duration.seconds(5)

    func run() async {
        // Its Redis calls may wait out their timeout when Redis hangs; a SIGTERM does not wait for them.
        await untilGracefulShutdown {
            var lastRestore = ContinuousClock.now
            // While Redis is away: every check fails, and is tried again after 0.25, 0.5, 1, 2, 4, 5, 5… s.
            var backoff = Self.interval
            while !Task.isCancelled {
                if ContinuousClock.now - lastRestore > .milliseconds(max(1000, self.lostAfterMilliseconds / 2)) {
                    lastRestore = ContinuousClock.now
                    do {
                        let now = self.queue.clock.nowMilliseconds()
                        let restored = try await self.queue.restoreLost(olderThan: now - self.lostAfterMilliseconds, now: now)
                        if restored > 0 { self.logger.warning("put back jobs whose stream entry vanished", metadata: ["count": "\(restored)"]) }
                        let dropped = try await self.queue.trimDeadLetters(now: now, retentionSeconds: self.retentionSeconds)
                        if dropped > 0 { self.logger.info("dropped dead letters past the retention", metadata: ["count": "\(dropped)"]) }
                        let forgotten = try await self.queue.forgetIdleConsumers(idleMilliseconds: self.forgetConsumersAfterMilliseconds)
                        if forgotten > 0 { self.logger.info("removed the names of workers gone from the consumer group", metadata: ["count": "\(forgotten)"]) }
                    } catch {
                        guard !Task.isCancelled else { return }
                        if backoff == Self.interval {
                            self.logger.warning("cannot check for lost entries or old dead letters", metadata: ["error": "\(error)"])
                        }
                    }
                }
                do {
                    let moved = try await self.queue.promoteDue(now: self.queue.clock.nowMilliseconds())
                    if moved > 0 { self.logger.debug("promoted due retries", metadata: ["count": "\(moved)"]) }
                    if backoff > Self.interval { self.logger.info("promoting retries again") }
                    backoff = Self.interval
                    // A full batch means more are due right now.
                    if moved >= 500 { continue }
                } catch {
                    guard !Task.isCancelled else { return }
                    // Once per outage, not four times a second for all of it.
                    if backoff == Self.interval { self.logger.warning("cannot promote retries", metadata: ["error": "\(error)"]) }
                    try? await Task.sleep(for: backoff)
                    backoff = min(backoff * 2, Self.maxBackoff)
                    continue
                }
                try? await Task.sleep(for: Self.interval)
            }
        }
    }
}
