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

    @Test("while Redis is away the promoter backs off and warns once, and says so when it promotes again")
    func backsOffDuringOutage() async throws {
        let redis = try await DedicatedRedis()
        let client = RedisClient(configuration: try RedisConfiguration(url: redis.url), connections: 1)
        let lines = CapturedLines()
        let promoter = Promoter(
            queue: ReceiptQueue(redis: client, prefix: TestEnvironment.uniquePrefix()), lostAfterMilliseconds: 60_000, retentionSeconds: 3600,
            logger: Logger(label: "test.promoter") { _ in lines }
        )
        try await TestEnvironment.using(client, redis) {
            let running = Task { await promoter.run() }
            defer { running.cancel() }
            await redis.stop()
            _ = try await Poll.until(timeout: .seconds(30), "the first warning") { lines.count("cannot promote retries") > 0 ? true : nil }
            // Four tries a second before: a dozen warnings in these 3 s.
            try await Task.sleep(for: .seconds(3))
            #expect(lines.count("cannot promote retries") == 1)
            try await redis.start()
            _ = try await Poll.until(timeout: .seconds(30), "promoting again") { lines.count("promoting retries again") > 0 ? true : nil }
            running.cancel()
            await running.value
        }
    }
}
