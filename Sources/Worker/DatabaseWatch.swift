import Logging
import Shared
import Synchronization

/// Whether PostgreSQL takes this worker's grants, as its jobs find it.
///
/// A job whose attempt finds PostgreSQL away (unreachable, not answering in time, refusing writes) says so
/// here, and the consumer then starts no new job until a probe finds PostgreSQL taking writes again. Else
/// every waiting job would spend its attempts on the outage, each failing at once, and end `failed`
/// after `TOLLGATE_RETRY_MAX_ATTEMPTS` (about 20 minutes with the defaults) though nothing was wrong with it.
/// The jobs already running when it went away are parked as usual; they wait on the stream with the rest.
final class DatabaseWatch: Sendable {
    private let away = Atomic<Bool>(false)

    /// Notes what an attempt ran into.
    func note(_ error: any Error) {
        if let error = error as? PostgresError, Self.isOutage(error) { self.away.store(true, ordering: .relaxed) }
    }

    /// PostgreSQL itself away (unreachable, refusing writes, out of resources or storage), not one
    /// transaction's contention: a deadlock, a serialization failure or a lock or statement timeout is
    /// retried like any unavailability, but holds no intake off and logs no outage.
    static func isOutage(_ error: PostgresError) -> Bool {
        guard error.isUnavailable else { return false }
        switch error.sqlState {
        case "40001", "40P01", "55P03", "57014": return false
        default: return true
        }
    }

    /// Whether a job found PostgreSQL away since the last probe that found it back.
    var isAway: Bool { self.away.load(ordering: .relaxed) }

    /// Probes `database` every `interval` until it takes writes again (true), or `stopping` says so (false).
    func untilBack(_ database: PostgresClient, interval: Duration = .seconds(1), logger: Logger, stopping: () -> Bool) async -> Bool {
        logger.warning("PostgreSQL is away: taking no new job until it takes writes again, so waiting jobs keep their attempts")
        while !stopping(), !Task.isCancelled {
            if await Self.takesWrites(database) {
                self.away.store(false, ordering: .relaxed)
                logger.info("PostgreSQL takes writes again: taking jobs")
                return true
            }
            try? await Task.sleep(for: interval)
        }
        return false
    }

    /// A primary that answers: a standby, or a primary demoted by a failover, answers too but takes no grant.
    private static func takesWrites(_ database: PostgresClient) async -> Bool {
        let row = try? await database.query(
            "SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off' AS writable"
        ).first
        return (try? row?.decode(Bool.self, "writable")) == true
    }
}
