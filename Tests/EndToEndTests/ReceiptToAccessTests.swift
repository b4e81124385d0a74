import AsyncHTTPClient
import Foundation
import Shared
import Testing
import TestSupport

/// The whole path through real processes: receipt in, access out.
@Suite("End to end", .serialized)
struct ReceiptToAccessTests {
    static var premium: [String: Any] { ["productId": "com.example.e2e.premium", "offerId": "S100_US", "kind": "non_consumable", "title": "Premium"] }
    static var coins: [String: Any] { ["productId": "com.example.e2e.coins", "offerId": "S200_US", "kind": "consumable", "title": "Coins", "coins": 100] }

    @Test("a receipt posted by the middleware becomes access the app can poll")
    func receiptBecomesAccess() async throws {
        let system = try await TollgateSystem()
        do {
            try await system.startWorker(name: "e2e-single")
            let publisher = try await system.createPublisher(products: [Self.premium])
            let transaction = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(
                bundleId: publisher.bundleId, purchases: [.init(productId: "com.example.e2e.premium", transactionId: transaction)]
            )
            let accepted = try await system.submit(publisher, email: "Viewer@Example.com", offerId: "S100_US", transactionId: transaction, receipt: receipt)
            #expect(accepted.status == 200)
            #expect(accepted.json["message"] as? String == "OK")
            #expect(accepted.json["status"] as? String == "queued")
            let jobId = try #require(accepted.json["jobId"] as? String)

            let access = try await system.waitForAccess(publisher, email: "viewer@example.com", offerId: "S100_US")
            #expect(access["grantType"] as? String == "direct-purchase")
            #expect(access["expiresAt"] is NSNull)
            #expect(access["pending"] as? Bool == false)

            let job = try await system.request(.GET, "/v1/receipts/\(jobId)", headers: publisher.headers)
            #expect(job.json["status"] as? String == "granted")
            #expect(job.json["environment"] as? String == "Production")
            #expect(job.json["attempts"] as? Int == 1)
            #expect(try await system.count("SELECT count(*) FROM transactions WHERE state = 'fulfilled'") == 1)

            // The receipt never reaches a log line.
            for process in [system.api] + system.workers {
                #expect(!process.log().contains(receipt), "receipt data leaked into \(process.logPath)")
            }
        } catch {
            await system.shutdown()
            throw error
        }
        await system.shutdown()
    }

    @Test("1,000 receipts posted in a burst all end granted, with exactly 1,000 transaction rows")
    func burst() async throws {
        let system = try await TollgateSystem()
        do {
            try await system.startWorker(name: "e2e-burst")
            let publisher = try await system.createPublisher(products: [Self.coins])
            let jobs = try await Self.postBurst(system, publisher, count: 1000, latencyMs: 0)
            try await Self.waitUntilAllGranted(system, publisher, jobs: jobs, timeout: .seconds(180))
            #expect(try await system.count("SELECT count(*) FROM transactions") == 1000)
            #expect(try await system.count("SELECT count(*) FROM wallet_entries WHERE kind = 'credit'") == 1000)
            #expect(try await system.count("SELECT count(*) FROM transactions WHERE state <> 'fulfilled'") == 0)
        } catch {
            await system.shutdown()
            throw error
        }
        await system.shutdown()
    }

    @Test("a worker killed with kill -9 mid-burst and started again: every job granted, no coin credited twice")
    func workerKilledMidBurst() async throws {
        // A short claim idle time lets the survivor take over quickly even if the restarted worker had a new name.
        let system = try await TollgateSystem(extraEnvironment: ["TOLLGATE_CLAIM_MIN_IDLE_MS": "2000", "TOLLGATE_WORKER_CONCURRENCY": "64"])
        do {
            let publisher = try await system.createPublisher(products: [Self.coins])
            // 936 queued before the worker starts, 500 ms of Apple per receipt, 64 at a time. Once some are granted,
            // Apple holds every call admitted from then on, and the last 64 are posted: the worker is killed
            // holding jobs it cannot finish, while the calls admitted before end and their grants commit.
            let early = try await Self.postBurst(system, publisher, count: 936, latencyMs: 500)
            let worker = try await system.startWorker(name: "e2e-crash")
            _ = try await Poll.until(timeout: .seconds(120), "some grants before the kill") {
                let granted = try await system.count("SELECT count(*) FROM wallet_entries")
                return granted >= 100 ? granted : nil
            }
            let jobs = early + (try await system.holdApple { try await Self.postBurst(system, publisher, count: 64, latencyMs: 500, firstIndex: early.count) })
            worker.signal(SIGKILL)
            _ = try await worker.waitForExit()
            let grantedAtKill = try await system.count("SELECT count(*) FROM wallet_entries")
            #expect(grantedAtKill < 1000, "the kill must land mid-burst")

            try await system.setAppleLatency(milliseconds: 0)
            try await system.startWorker(name: "e2e-crash")
            try await Self.waitUntilAllGranted(system, publisher, jobs: jobs, timeout: .seconds(240))
            #expect(try await system.count("SELECT count(*) FROM transactions") == 1000)
            #expect(try await system.count("SELECT count(*) FROM wallet_entries") == 1000)
            // Every customer holds exactly the coins of one purchase.
            #expect(try await system.count("SELECT count(*) FROM (SELECT customer_email FROM wallet_entries GROUP BY customer_email HAVING sum(coins) <> 100) AS wrong") == 0)
        } catch {
            await system.shutdown()
            throw error
        }
        await system.shutdown()
    }

    /// Posts `count` distinct consumable receipts, 32 at a time, for buyers numbered from `firstIndex`; returns the job ids.
    static func postBurst(
        _ system: TollgateSystem, _ publisher: TollgateSystem.Publisher, count: Int, latencyMs: Int, firstIndex: Int = 0
    ) async throws -> [String] {
        try await withThrowingTaskGroup(of: [String].self) { group in
            let lanes = 32
            for lane in 0..<lanes {
                group.addTask {
                    var ids: [String] = []
                    for index in stride(from: lane, to: count, by: lanes) {
                        let transaction = ScenarioReceipt.transactionId()
                        let receipt = ScenarioReceipt.make(
                            bundleId: publisher.bundleId, purchases: [.init(productId: "com.example.e2e.coins", transactionId: transaction)],
                            extra: latencyMs > 0 ? ["latencyMs": latencyMs] : [:]
                        )
                        let reply = try await system.submit(
                            publisher, email: "buyer\(firstIndex + index)@example.com", offerId: "S200_US", transactionId: transaction, receipt: receipt
                        )
                        guard reply.status == 200, let id = reply.json["jobId"] as? String else {
                            throw ManagedProcess.Failure("submission \(index) answered \(reply.status) \(reply.json)")
                        }
                        ids.append(id)
                    }
                    return ids
                }
            }
            var all: [String] = []
            for try await ids in group { all += ids }
            return all
        }
    }

    /// Waits until every job is granted in PostgreSQL, then until every one reads `granted` through the API.
    /// The two can be apart for a while: a grant committed while Redis was away is recorded there when its
    /// entry is claimed and replayed (after the claim idle time).
    static func waitUntilAllGranted(_ system: TollgateSystem, _ publisher: TollgateSystem.Publisher, jobs: [String], timeout: Duration) async throws {
        let deadline = ContinuousClock.now + timeout
        _ = try await Poll.until(timeout: timeout, interval: .milliseconds(500), "all \(jobs.count) jobs granted") {
            try await system.count("SELECT count(*) FROM transactions WHERE state = 'fulfilled'") >= jobs.count ? true : nil
        }
        var statuses: [String: Int] = [:]
        while true {
            statuses = [:]
            for job in jobs {
                let reply = try await system.request(.GET, "/v1/receipts/\(job)", headers: publisher.headers)
                statuses[reply.json["status"] as? String ?? "missing", default: 0] += 1
            }
            if statuses == ["granted": jobs.count] || ContinuousClock.now >= deadline { break }
            try await Task.sleep(for: .milliseconds(250))
        }
        #expect(statuses == ["granted": jobs.count])
    }
}
