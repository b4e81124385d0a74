import Foundation
import Shared
import Testing
import TestSupport

/// Redis and PostgreSQL going away under a running system: nothing accepted is lost, nothing is said
/// OK that was not stored, readiness tells, and everything recovers by itself.
@Suite("Outages", .serialized)
struct OutageTests {
    static var coins: [String: Any] { ["productId": "com.example.e2e.coins", "offerId": "S200_US", "kind": "consumable", "title": "Coins", "coins": 100] }

    static func submit(_ system: TollgateSystem, _ publisher: TollgateSystem.Publisher, _ index: Int, latencyMs: Int = 0) async throws -> TollgateSystem.Reply {
        let transaction = ScenarioReceipt.transactionId()
        let receipt = ScenarioReceipt.make(
            bundleId: publisher.bundleId, purchases: [.init(productId: "com.example.e2e.coins", transactionId: transaction)],
            extra: latencyMs > 0 ? ["latencyMs": latencyMs] : [:]
        )
        return try await system.submit(publisher, email: "u\(index)@example.com", offerId: "S200_US", transactionId: transaction, receipt: receipt)
    }

    /// Submits a receipt and returns its job id once a worker has started it: with Apple held
    /// (``TollgateSystem/setAppleLatency(milliseconds:)``), the job is processing, waiting for Apple, when the
    /// caller's outage begins, and stays so until Apple is let go.
    static func processingJob(_ system: TollgateSystem, _ publisher: TollgateSystem.Publisher, _ index: Int) async throws -> String {
        let reply = try await Self.submit(system, publisher, index)
        let job = try #require(reply.json["jobId"] as? String)
        _ = try await Poll.until(timeout: .seconds(20), "the job processing") {
            try await system.job(publisher, job)["status"] as? String == "processing" ? true : nil
        }
        return job
    }

    /// Submits ten receipts during a PostgreSQL outage (each accepted), then watches them for `duration`:
    /// none may end failed or rejected meanwhile. Returns their job ids.
    static func submitTenAndWatch(_ system: TollgateSystem, _ publisher: TollgateSystem.Publisher, for duration: Duration) async throws -> [String] {
        var jobs: [String] = []
        for index in 1...10 {
            let reply = try await Self.submit(system, publisher, index)
            #expect(reply.status == 200, "a submission during the outage got \(reply.status)")
            jobs.append(try #require(reply.json["jobId"] as? String))
        }
        let outageStarted = ContinuousClock.now
        _ = try await Poll.until(timeout: duration + .seconds(50), interval: .milliseconds(250), "\(duration) of outage, no job failed") { () async throws -> Bool? in
            for job in jobs {
                let status = try await system.job(publisher, job)["status"] as? String
                #expect(status != nil && status != "rejected" && status != "failed", "job \(job) is \(status ?? "gone") during the outage")
                if status == "failed" || status == "rejected" { return true }
            }
            return ContinuousClock.now - outageStarted >= duration ? true : nil
        }
        return jobs
    }

    static func ready(_ system: TollgateSystem, port: Int) async throws -> Int {
        (try? await system.request(.GET, "/health/ready", base: "http://127.0.0.1:\(port)").status) ?? 0
    }

    /// Runs `body` with a system on a Redis server of the test's own (the test may stop, start or fill it)
    /// and an admin client to that server, and shuts all three down afterwards, on failure too.
    static func onOwnRedis(
        _ environment: [String: String] = [:], worker: String? = nil,
        _ body: (DedicatedRedis, TollgateSystem, RedisClient) async throws -> Void
    ) async throws {
        let redis = try await DedicatedRedis()
        try await TestEnvironment.using(redis) {
            let system = try await TollgateSystem(extraEnvironment: environment, redisURL: redis.url)
            let admin = RedisClient(configuration: try RedisConfiguration(url: redis.url), connections: 1)
            try await TestEnvironment.using(admin, system) {
                if let worker { try await system.startWorker(name: worker) }
                try await body(redis, system, admin)
            }
        }
    }

    /// Runs `body` with a system on a PostgreSQL server of the test's own (the test may stop and start it),
    /// the retry policy given, a worker named `worker` and a publisher selling `coins`, and shuts the
    /// system down afterwards, on failure too.
    static func onOwnPostgres(
        retry: (baseMs: Int, maxDelayMs: Int, attempts: Int), worker name: String,
        _ body: (DedicatedPostgres, TollgateSystem, ManagedProcess, TollgateSystem.Publisher) async throws -> Void
    ) async throws {
        let postgres = try await DedicatedPostgres()
        let system = try await TollgateSystem(
            extraEnvironment: [
                "TOLLGATE_RETRY_BASE_MS": "\(retry.baseMs)", "TOLLGATE_RETRY_MAX_DELAY_MS": "\(retry.maxDelayMs)",
                "TOLLGATE_RETRY_MAX_ATTEMPTS": "\(retry.attempts)", "TOLLGATE_CLAIM_MIN_IDLE_MS": "2000",
            ],
            databaseURL: postgres.url
        )
        try await TestEnvironment.using(system, postgres) {
            let worker = try await system.startWorker(name: name)
            try await body(postgres, system, worker, try await system.createPublisher(products: [Self.coins]))
        }
    }

    @Test("a submission whose enqueue ran in Redis but whose answer was lost (its connection cut at that moment) answers 200 with the stored job, found by one lookup, not a 503 that hides it; sent again, the same jobId")
    func enqueueAnswerLost() async throws {
        let shared = try #require(URLComponents(string: try TestEnvironment.redisURL()))
        let proxy = try await ReplyDroppingProxy(upstreamPort: try #require(shared.port), pattern: "created")
        var throughProxy = shared
        throughProxy.port = proxy.port
        try await TestEnvironment.using(proxy) {
            let system = try await TollgateSystem(redisURL: try #require(throughProxy.string))
            try await TestEnvironment.using(system) {
                let publisher = try await system.createPublisher(products: [Self.coins])
                let transaction = ScenarioReceipt.transactionId()
                let receipt = ScenarioReceipt.make(
                    bundleId: publisher.bundleId, purchases: [.init(productId: "com.example.e2e.coins", transactionId: transaction)]
                )
                try await proxy.arm()
                let first = try await system.submit(publisher, email: "lost@example.com", offerId: "S200_US", transactionId: transaction, receipt: receipt)
                #expect(proxy.dropped == 1, "the enqueue's answer was dropped")
                #expect(first.status == 200, "\(first.status) \(first.text)")
                let jobId = try #require(first.json["jobId"] as? String)
                // The API writes its log from a thread of its own: the lines may follow the answer.
                _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(20), "the API's warning and its accept line") {
                    let log = system.api.log()
                    return log.contains("the enqueue's answer was lost; the job is stored") && log.contains("receipt accepted") ? true : nil
                }
                #expect(try await system.job(publisher, jobId)["status"] as? String == "queued", "the job answered is the one stored")
                let again = try await system.submit(publisher, email: "lost@example.com", offerId: "S200_US", transactionId: transaction, receipt: receipt)
                #expect(again.status == 200)
                #expect(again.json["jobId"] as? String == jobId, "one job, not two")
            }
        }
    }

    @Test("Redis down: the API answers 503 with Retry-After (never OK) and serves no access status from memory, readiness says 503 on API and worker; back up, all recover and every accepted job is granted")
    func redisOutage() async throws {
        try await Self.onOwnRedis(["TOLLGATE_CLAIM_MIN_IDLE_MS": "2000"], worker: "e2e-redis-outage") { redis, system, _ in
            let workerPort = try #require(system.workerPorts["e2e-redis-outage"])
            let apiPort = try #require(URLComponents(string: system.apiBase)?.port)
            let publisher = try await system.createPublisher(products: [Self.coins])
            var jobs: [String] = []
            for index in 0..<40 {
                let reply = try await Self.submit(system, publisher, index, latencyMs: 200)
                jobs.append(try #require(reply.json["jobId"] as? String))
            }

            // The access status is served from memory while the API is subscribed to changes...
            let poll = "/v1/access-status?customerEmail=outage%40example.com&offerId=S200_US"
            _ = try await Poll.until(timeout: .seconds(10), "the access status served from memory") {
                #expect(try await system.request(.GET, poll, headers: publisher.headers).status == 200)
                return try await AccessCacheSystemTests.cacheCount(system, "hit", base: system.apiBase) > 0 ? true : nil
            }

            await redis.stop()
            _ = try await Poll.until(timeout: .seconds(30), "API and worker not ready") {
                let api = try await Self.ready(system, port: apiPort)
                let worker = try await Self.ready(system, port: workerPort)
                return api == 503 && worker == 503 ? true : nil
            }
            let refused = try await Self.submit(system, publisher, 1000)
            #expect(refused.status == 503)
            #expect(refused.headers["retry-after"] != nil)
            #expect(refused.json["code"] as? String == "dependency_unavailable")
            // ...and not while the subscription is lost: changes could be missed, so it is not answered from memory.
            let unsubscribed = try await system.request(.GET, poll, headers: publisher.headers)
            #expect(unsubscribed.status == 503)

            try await redis.start()
            _ = try await Poll.until(timeout: .seconds(30), "API and worker ready again") {
                let api = try await Self.ready(system, port: apiPort)
                let worker = try await Self.ready(system, port: workerPort)
                return api == 200 && worker == 200 ? true : nil
            }
            let accepted = try await Self.submit(system, publisher, 1001)
            #expect(accepted.status == 200)
            let hitsBefore = try await AccessCacheSystemTests.cacheCount(system, "hit", base: system.apiBase)
            _ = try await Poll.until(timeout: .seconds(30), "the access status served from memory again") {
                #expect(try await system.request(.GET, poll, headers: publisher.headers).status == 200)
                return try await AccessCacheSystemTests.cacheCount(system, "hit", base: system.apiBase) > hitsBefore ? true : nil
            }
            jobs.append(try #require(accepted.json["jobId"] as? String))
            try await ReceiptToAccessTests.waitUntilAllGranted(system, publisher, jobs: jobs, timeout: .seconds(120))
            #expect(try await system.count("SELECT count(*) FROM wallet_entries") == jobs.count)
        }
    }

    @Test("Redis down between a grant's commit and its record: once Redis is back the job reads granted within seconds, not after the claim idle time")
    func redisDownAtRecord() async throws {
        // The default claim idle time: a peer's claim alone would leave the job `processing` for a minute or more.
        try await Self.onOwnRedis(["TOLLGATE_CLAIM_MIN_IDLE_MS": "60000", "TOLLGATE_APPLE_TIMEOUT_MS": "120000"], worker: "e2e-redis-at-record") { redis, system, _ in
            let publisher = try await system.createPublisher(products: [Self.coins])
            // Apple holds the call until Redis has gone away, then answers: the grant commits while Redis is away.
            try await system.setAppleLatency(milliseconds: 3_600_000)
            let job = try await Self.processingJob(system, publisher, 1)
            await redis.stop()
            try await system.setAppleLatency(milliseconds: 0)
            _ = try await Poll.until(timeout: .seconds(30), "the grant committed while Redis is down") {
                try await system.count("SELECT count(*) FROM wallet_entries") == 1 ? true : nil
            }
            try await redis.start()
            let restarted = ContinuousClock.now
            let status = try await Poll.until(timeout: .seconds(20), "the job granted") {
                let status = try? await system.job(publisher, job)["status"] as? String
                return status == "granted" ? status : nil
            }
            #expect(status == "granted", "granted \(ContinuousClock.now - restarted) after Redis came back")
            #expect(try await system.count("SELECT count(*) FROM wallet_entries") == 1)
        }
    }

    @Test("Redis full (maxmemory, noeviction): submissions answer 503 with Retry-After (counted 503) and write nothing, the access status still answers; with room again, accepted")
    func redisOutOfMemory() async throws {
        try await Self.onOwnRedis { _, system, admin in
            let publisher = try await system.createPublisher(products: [Self.coins])
            #expect(try await Self.submit(system, publisher, 1).status == 200)
            let keysBefore = try await admin.send("DBSIZE").int

            _ = try await admin.send("CONFIG", "SET", "maxmemory-policy", "noeviction")
            _ = try await admin.send("CONFIG", "SET", "maxmemory", "1")
            let refused = try await Self.submit(system, publisher, 2)
            #expect(refused.status == 503)
            #expect(refused.headers["retry-after"] != nil)
            #expect(refused.json["code"] as? String == "dependency_unavailable")
            #expect(try await admin.send("DBSIZE").int == keysBefore, "nothing is written for a refused submission")
            // Reads need no memory: the access status answers (its rate limit fails open, as when Redis is away).
            let access = try await system.request(.GET, "/v1/access-status?customerEmail=u1%40example.com&offerId=S200_US", headers: publisher.headers)
            #expect(access.status == 200)
            #expect(access.json["pending"] as? Bool == true)
            // The request metrics count what the client got.
            let samples = try await MetricsTests.scrape(system, system.apiBase + "/metrics")
            #expect(MetricsTests.value(samples, "tollgate_http_requests_total", ["route": "/apple/payment", "status": "503"]) == 1)
            #expect(MetricsTests.value(samples, "tollgate_http_requests_total", ["route": "/apple/payment", "status": "500"]) == nil)

            _ = try await admin.send("CONFIG", "SET", "maxmemory", "0")
            #expect(try await Self.submit(system, publisher, 3).status == 200)
        }
    }

    @Test("Redis full (maxmemory, noeviction): jobs accepted before still start and finish, which is what frees room, while submissions answer 503")
    func redisFullDrains() async throws {
        // One job at a time: the second waits in the stream, unread, while the first is verified (the queue's
        // own test starts a job at maxmemory whatever the timing).
        try await Self.onOwnRedis(["TOLLGATE_WORKER_CONCURRENCY": "1", "TOLLGATE_APPLE_TIMEOUT_MS": "120000"], worker: "e2e-redis-full") { _, system, admin in
            let publisher = try await system.createPublisher(products: [Self.coins])
            // Apple holds the first until Redis has filled up: it is processing then, and the second waits.
            try await system.setAppleLatency(milliseconds: 3_600_000)
            let first = try await Self.processingJob(system, publisher, 1)
            let second = try await Self.submit(system, publisher, 2)
            let jobs = [first, try #require(second.json["jobId"] as? String)]
            _ = try await admin.send("CONFIG", "SET", "maxmemory", "1")
            #expect(try await Self.submit(system, publisher, 3).status == 503)
            try await system.setAppleLatency(milliseconds: 0)
            // Each finish forgets its receipt, and the next job starts: Redis at maxmemory must let both happen.
            try await ReceiptToAccessTests.waitUntilAllGranted(system, publisher, jobs: jobs, timeout: .seconds(30))
            #expect(try await system.count("SELECT count(*) FROM wallet_entries") == 2)
            _ = try await admin.send("CONFIG", "SET", "maxmemory", "0")
        }
    }

    @Test("PostgreSQL down: jobs wait (no loss, no hot loop), readiness says 503, receipts are still accepted, another publisher's job answers as an unknown one; back up, every job is granted once")
    func postgresOutage() async throws {
        // A fast backoff, so the jobs are granted soon after the outage; with it, 15 attempts (the default limit)
        // could pass in the outage's 12 s before the worker held off, since an attempt that finds PostgreSQL
        // away fails at once. 50 cannot (about 45 s on average), so every job must still be waiting when the outage ends.
        try await Self.onOwnPostgres(retry: (200, 2000, 50), worker: "e2e-pg-outage") { postgres, system, worker, publisher in
            let workerPort = try #require(system.workerPorts["e2e-pg-outage"])
            let other = try await system.createPublisher(bundleId: "com.example.e2e.other", products: [Self.coins])
            var jobs: [String] = []
            // Apple holds every call until PostgreSQL has gone away, then answers them: each grant finds it away.
            try await system.setAppleLatency(milliseconds: 3_600_000)
            for index in 0..<30 {
                let reply = try await Self.submit(system, publisher, index)
                jobs.append(try #require(reply.json["jobId"] as? String))
            }
            try await postgres.stop()
            try await system.setAppleLatency(milliseconds: 0)
            let outageStarted = ContinuousClock.now
            _ = try await Poll.until(timeout: .seconds(30), "worker not ready") {
                try await Self.ready(system, port: workerPort) == 503 ? true : nil
            }
            // Ten seconds down: jobs park in retrying (or stay pending). None may end rejected or failed: only
            // PostgreSQL can decide that, and none can have been granted.
            _ = try await Poll.until(timeout: .seconds(30), "ten seconds of outage") {
                ContinuousClock.now - outageStarted >= .seconds(10) ? true : nil
            }
            var unfinished = 0
            for job in jobs {
                let status = try await system.job(publisher, job)["status"] as? String
                #expect(status != nil && status != "rejected" && status != "failed", "job \(job) is \(status ?? "gone") while PostgreSQL is down")
                if status != "granted" { unfinished += 1 }
            }
            #expect(unfinished == jobs.count, "a job was granted though Apple answered none before PostgreSQL went away")
            // The policy waits random(0, min(2 s, 200 ms·2^attempt)): a mean of 1 s from the fourth attempt on, so
            // about 15 retries per job in these 12 s when each attempt fails at once (from the second on, the
            // lookup of an earlier grant fails without asking Apple). A loop without backoff makes thousands.
            let retryLines = worker.log().components(separatedBy: "\n").filter { $0.contains("\"msg\":\"retrying\"") }.count
            #expect(retryLines < jobs.count * 25, "\(retryLines) retries of \(jobs.count) jobs in the outage's first seconds is a hot loop")
            // Receipts are still accepted into Redis: the publisher and offer were looked up a moment ago.
            let accepted = try await Self.submit(system, publisher, 100)
            #expect(accepted.status == 200, "a submission during the outage got \(accepted.status)")
            if let job = accepted.json["jobId"] as? String { jobs.append(job) }
            // Another publisher's job answers exactly as an unknown one, here 503: only PostgreSQL could tell.
            let unknown = try await system.request(.GET, "/v1/receipts/no-such-job", headers: other.headers)
            let foreign = try await system.request(.GET, "/v1/receipts/\(jobs[0])", headers: other.headers)
            #expect(unknown.status == 503)
            #expect(foreign.status == unknown.status, "another publisher's job: \(foreign.status), an unknown one: \(unknown.status)")

            try await postgres.start()
            _ = try await Poll.until(timeout: .seconds(30), "worker ready again") {
                try await Self.ready(system, port: workerPort) == 200 ? true : nil
            }
            try await ReceiptToAccessTests.waitUntilAllGranted(system, publisher, jobs: jobs, timeout: .seconds(120))
            #expect(try await system.count("SELECT count(*) FROM wallet_entries") == jobs.count)
            #expect(try await system.count("SELECT count(*) FROM transactions") == jobs.count)
        }
    }

    @Test("PostgreSQL down for longer than the retry policy's attempts last: the worker starts no new job meanwhile, so none ends failed; back up, every job is granted once")
    func postgresOutageOutlastsAttempts() async throws {
        // Three attempts at most 200 ms apart: an outage of a few seconds outlasts them many times over.
        try await Self.onOwnPostgres(retry: (100, 200, 3), worker: "e2e-pg-long-outage") { postgres, system, worker, publisher in
            // One job granted first: the API then holds the publisher and the offer, and accepts while PostgreSQL is away.
            let first = try #require(try await Self.submit(system, publisher, 0).json["jobId"] as? String)
            try await ReceiptToAccessTests.waitUntilAllGranted(system, publisher, jobs: [first], timeout: .seconds(30))

            try await postgres.stop()
            let jobs = try await Self.submitTenAndWatch(system, publisher, for: .seconds(8))
            #expect(worker.log().contains("PostgreSQL is away"))

            try await postgres.start()
            try await ReceiptToAccessTests.waitUntilAllGranted(system, publisher, jobs: jobs, timeout: .seconds(60))
            for job in jobs {
                let attempts = try await system.job(publisher, job)["attempts"] as? Int
                #expect((attempts ?? 99) <= 2, "job \(job) took \(attempts ?? -1) attempts: at most one before the pause and one after")
            }
            #expect(try await system.count("SELECT count(*) FROM wallet_entries") == jobs.count + 1)
        }
    }

    @Test("PostgreSQL out of space for grants, though it answers every probe: no job ends failed; with space again, every job is granted once")
    func postgresOutOfSpace() async throws {
        // Three attempts at most 200 ms apart: spent on the outage, they would be gone within a second or two.
        let system = try await TollgateSystem(extraEnvironment: [
            "TOLLGATE_RETRY_BASE_MS": "100", "TOLLGATE_RETRY_MAX_DELAY_MS": "200", "TOLLGATE_RETRY_MAX_ATTEMPTS": "3",
            "TOLLGATE_CLAIM_MIN_IDLE_MS": "2000",
        ])
        try await TestEnvironment.using(system) {
            let worker = try await system.startWorker(name: "e2e-pg-out-of-space")
            let publisher = try await system.createPublisher(products: [Self.coins])
            let first = try #require(try await Self.submit(system, publisher, 0).json["jobId"] as? String)
            try await ReceiptToAccessTests.waitUntilAllGranted(system, publisher, jobs: [first], timeout: .seconds(30))

            // What a full disk does: PostgreSQL answers, reads work, and a write that needs space fails with 53100.
            try await system.database.query("""
                CREATE FUNCTION tg_test_out_of_space() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'; END $$
                """)
            try await system.database.query(
                "CREATE TRIGGER tg_test_out_of_space BEFORE INSERT ON wallet_entries FOR EACH ROW EXECUTE FUNCTION tg_test_out_of_space()"
            )
            let jobs = try await Self.submitTenAndWatch(system, publisher, for: .seconds(10))
            #expect(worker.log().contains("trying one job before taking more"))

            try await system.database.query("DROP TRIGGER tg_test_out_of_space ON wallet_entries")
            try await ReceiptToAccessTests.waitUntilAllGranted(system, publisher, jobs: jobs, timeout: .seconds(90))
            #expect(try await system.count("SELECT count(*) FROM wallet_entries") == jobs.count + 1)
        }
    }
}
