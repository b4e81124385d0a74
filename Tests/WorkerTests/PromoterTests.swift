import Logging
import Shared
import Testing
import TestSupport
@testable import Worker

@Suite("Promoter")
struct PromoterTests {
    @Test("a running worker drops dead letters past the retention, though no other job fails")
    func dropsOldDeadLetters() async throws {
        try await WorkerHarness.with { harness in
            let retention = 3600
            let now = WallClock.nowMilliseconds()
            let dead = harness.queue.keys.dead
            for (id, job) in [("\(now - retention * 1000 - 1000)-0", "gone"), ("\(now - 1000)-0", "kept")] {
                try await harness.redis.send("XADD", dead, id, "job", job, "reason", "internal", "detail", "", "at", "0")
            }
            let promoter = Promoter(queue: harness.queue, lostAfterMilliseconds: 1000, retentionSeconds: retention, logger: Logger(label: "test.promoter"))
            let running = Task { await promoter.run() }
            defer { running.cancel() }
            let left = try await Poll.until(timeout: .seconds(20), "the old dead letter dropped") {
                let ids = try await harness.queue.deadLetters(limit: 10).deadLetters.map(\.jobId)
                return ids.count == 1 ? ids : nil
            }
            #expect(left == ["kept"])
            running.cancel()
            await running.value
        }
    }
}
