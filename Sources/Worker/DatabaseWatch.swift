import Logging
import Shared
import Synchronization

/// Whether PostgreSQL takes this worker's grants, as its jobs find it.
///
/// A job whose attempt finds PostgreSQL away (unreachable, not answering in time, refusing writes, out of
/// storage) says so here, and the consumer then starts no new job until a probe finds PostgreSQL taking
/// writes again. Else every waiting job would spend its attempts on the outage, each failing at once, and
/// end `failed` after `TOLLGATE_RETRY_MAX_ATTEMPTS` (about 20 minutes with the defaults) though nothing was
/// wrong with it. The jobs already running when it went away are parked without spending the attempt.
///
/// A probe cannot see every outage: a primary whose disk is full answers it, and fails only the writes
/// that need space. So a probe that passes opens a trial: the consumer runs one job at a time until one
/// commits a grant's writes. A job that ends without writing (Apple refused the receipt, or is away; the
/// catalog may come from the cache) proves nothing and leaves the trial open. A trial job that finds
/// PostgreSQL away again spends its attempt (so a job that itself makes PostgreSQL fail cannot loop for
/// good), and the next probe waits longer, doubling from the probe interval up to 30 s. So does a job that
/// was already running before the probe and finds PostgreSQL away during the trial (it is parked, its
/// attempt kept): either way the probe's answer did not hold.
final class DatabaseWatch: Sendable {
    private struct State {
        var away = false
        var onTrial = false
        /// Trials in a row that found PostgreSQL away again.
        var failedTrials = 0
    }

    private let state = Mutex(State())

    /// Notes what an attempt ran into; returns whether it was PostgreSQL away.
    @discardableResult
    func note(_ error: any Error) -> Bool {
        guard let error = error as? PostgresError, Self.isOutage(error) else { return false }
        self.state.withLock { state in
            if state.onTrial {
                state.onTrial = false
                state.failedTrials += 1
            }
            state.away = true
        }
        return true
    }

    /// Notes that PostgreSQL committed a job's writes: a trial ends.
    func noteWrote() {
        self.state.withLock { state in
            guard state.onTrial, !state.away else { return }
            state.onTrial = false
            state.failedTrials = 0
        }
    }

    /// PostgreSQL itself away (unreachable, refusing writes, out of resources or storage), not contention: a
    /// deadlock, a serialization failure, a lock or statement timeout, or no pool connection free in time
    /// (every one busy, e.g. queued behind one purchase's lock) is retried like any unavailability, but holds
    /// no intake off and logs no outage. A server that stops answering fails the busy connections' own
    /// statements, and those count.
    static func isOutage(_ error: PostgresError) -> Bool {
        guard error.isUnavailable, error.code != .busy else { return false }
        switch error.sqlState {
        case "40001", "40P01", "55P03", "57014": return false
        default: return true
        }
    }

    /// Whether a job found PostgreSQL away since the last probe that found it back.
    var isAway: Bool { self.state.withLock { $0.away } }

    /// Whether a probe found PostgreSQL back and no job has written through it since: one job at a time.
    var isOnTrial: Bool { self.state.withLock { $0.onTrial && !$0.away } }

    /// How long to wait before probing, after `failedTrials` trials in a row found PostgreSQL away again.
    static func pause(afterFailedTrials failedTrials: Int, interval: Duration) -> Duration {
        failedTrials == 0 ? .zero : min(interval * (1 << min(failedTrials - 1, 5)), .seconds(30))
    }

    /// Probes `database` every `interval` until it takes writes again (true: a trial opens), or `stopping`
    /// says so (false).
    func untilBack(_ database: PostgresClient, interval: Duration = .seconds(1), logger: Logger, stopping: () -> Bool) async -> Bool {
        let failedTrials = self.state.withLock { $0.failedTrials }
        if failedTrials == 0 {
            logger.warning("PostgreSQL is away: taking no new job until it takes writes again, so waiting jobs keep their attempts")
        }
        var pause = Self.pause(afterFailedTrials: failedTrials, interval: interval)
        if pause > .zero {
            logger.warning("PostgreSQL answered a probe, then failed a job again; trying another job later", metadata: [
                "failed_trials": "\(failedTrials)", "retry_in": "\(pause)",
            ])
        }
        while !stopping(), !Task.isCancelled {
            await Self.sleep(for: pause, stopping: stopping)
            pause = interval
            guard !stopping(), !Task.isCancelled else { break }
            if await Self.takesWrites(database) {
                self.state.withLock { state in
                    state.away = false
                    state.onTrial = true
                }
                logger.info("PostgreSQL answers again: trying one job before taking more")
                return true
            }
        }
        return false
    }

    /// Sleeps for `duration`, or until `stopping` says so: a SIGTERM during a 30 s pause must not wait it out
    /// (the grace period would cut the worker off before it leaves the consumer group).
    private static func sleep(for duration: Duration, stopping: () -> Bool) async {
        let end = ContinuousClock.now + duration
        while !stopping(), !Task.isCancelled {
            let left = end - ContinuousClock.now
            guard left > .zero else { return }
            try? await Task.sleep(for: min(left, .milliseconds(100)))
        }
    }

    /// A primary that answers: a standby, or a primary demoted by a failover, answers too but takes no grant.
    private static func takesWrites(_ database: PostgresClient) async -> Bool {
        let row = try? await database.query(
            "SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off' AS writable"
        ).first
        return (try? row?.decode(Bool.self, "writable")) == true
    }
}
