import Logging
import Shared
import Synchronization
import TestSupport
import Testing
@testable import Worker

@Suite("Database watch")
struct DatabaseWatchTests {
    @Test("PostgreSQL away holds intake off; one transaction's contention does not", arguments: [
        (PostgresError(.connection, "connection refused"), true),
        (PostgresError(.server, sqlState: "57P01", "terminating connection due to administrator command"), true),
        (PostgresError(.server, sqlState: "25006", "cannot execute INSERT in a read-only transaction"), true),
        (PostgresError(.server, sqlState: "53100", "could not extend file: No space left on device"), true),
        (PostgresError(.server, sqlState: "58030", "could not write to file"), true),
        (PostgresError(.server, sqlState: "40P01", "deadlock detected"), false),
        (PostgresError(.server, sqlState: "40001", "could not serialize access"), false),
        (PostgresError(.server, sqlState: "55P03", "canceling statement due to lock timeout"), false),
        (PostgresError(.server, sqlState: "57014", "canceling statement due to statement timeout"), false),
        (PostgresError(.server, sqlState: "23505", "duplicate key value"), false),
    ])
    func outage(error: PostgresError, away: Bool) {
        let watch = DatabaseWatch()
        watch.note(error)
        #expect(watch.isAway == away, "\(error)")
    }

    @Test("no pool connection free within the acquire timeout is unavailable (retried, 503) but no outage: PostgreSQL answers")
    func poolBusy() async throws {
        let database = PostgresClient(url: try await TestEnvironment.freshDatabase(), connections: 1, acquireTimeout: .milliseconds(300))
        try await TestEnvironment.using(database) {
            let holder = await database.holdConnection()
            let refused = await #expect(throws: PostgresError.self) { try await database.query("SELECT 1") }
            let error = try #require(refused)
            #expect(error.code == .busy && error.isUnavailable, "\(error)")
            let watch = DatabaseWatch()
            #expect(!watch.note(error), "\(error)")
            #expect(!watch.isAway)
            try await holder.release()
        }
    }

    @Test("after a trial that found PostgreSQL away again, the next probe waits longer, doubling up to 30 s")
    func trialPause() {
        let interval = Duration.seconds(1)
        #expect(DatabaseWatch.pause(afterFailedTrials: 0, interval: interval) == .zero)
        #expect(DatabaseWatch.pause(afterFailedTrials: 1, interval: interval) == .seconds(1))
        #expect(DatabaseWatch.pause(afterFailedTrials: 2, interval: interval) == .seconds(2))
        #expect(DatabaseWatch.pause(afterFailedTrials: 5, interval: interval) == .seconds(16))
        #expect(DatabaseWatch.pause(afterFailedTrials: 6, interval: interval) == .seconds(30))
        #expect(DatabaseWatch.pause(afterFailedTrials: 1000, interval: interval) == .seconds(30))
    }

    @Test("an attempt that wrote changes nothing outside a trial, and an outage is reported as one")
    func workedOutsideTrial() {
        let watch = DatabaseWatch()
        watch.noteWrote()
        #expect(!watch.isAway && !watch.isOnTrial)
        #expect(watch.note(PostgresError(.server, sqlState: "53100", "could not extend file")))
        #expect(!watch.note(PostgresError(.server, sqlState: "23505", "duplicate key value")))
        watch.noteWrote()
        #expect(watch.isAway, "only a probe brings it back")
    }

    @Test("a shutdown during the pause after a failed trial ends the wait at once, not when the pause is over")
    func stopDuringPause() async throws {
        let database = PostgresClient(url: try await TestEnvironment.freshDatabase(), connections: 1)
        let watch = DatabaseWatch()
        let logger = Logger(label: "test")
        let outage = PostgresError(.server, sqlState: "53100", "could not extend file")
        watch.note(outage)
        #expect(await watch.untilBack(database, interval: .seconds(120), logger: logger, stopping: { false }), "a trial opens")
        watch.note(outage)  // the trial job found it away again: the next probe waits 30 s (the cap)

        let stopping = Atomic<Bool>(false)
        let asked = Atomic<Int>(0)
        let started = ContinuousClock.now
        async let back = watch.untilBack(database, interval: .seconds(120), logger: logger) {
            asked.add(1, ordering: .relaxed)
            return stopping.load(ordering: .relaxed)
        }
        // Asked three times: before the loop, as the pause began, and 100 ms into it. Only then is the stop
        // one that comes during the pause.
        _ = try await Poll.until(timeout: .seconds(20), interval: .milliseconds(10), "the pause began") {
            asked.load(ordering: .relaxed) >= 3 ? true : nil
        }
        stopping.store(true, ordering: .relaxed)
        #expect(await back == false)
        #expect(ContinuousClock.now - started < .seconds(15), "the pause was 30 s")
        await database.shutdown()
    }
}
