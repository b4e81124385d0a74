import AsyncHTTPClient
import Foundation
import Shared
import Testing
import TestSupport

/// The access-status cache, across API processes: every change reaches every process through Redis
/// pub/sub, so a poll never shows an answer older than the change it follows.
@Suite("Access status cache across API processes", .serialized)
struct AccessCacheSystemTests {
    static var premium: [String: Any] { ["productId": "com.example.e2e.premium", "offerId": "S100_US", "kind": "non_consumable", "title": "Premium"] }
    static var extra: [String: Any] { ["productId": "com.example.e2e.extra", "offerId": "S300_US", "kind": "non_consumable", "title": "Extra"] }

    /// The access status of `email` for `offerId`, asked of the API at `base`.
    static func status(_ system: TollgateSystem, _ publisher: TollgateSystem.Publisher, _ email: String, _ offerId: String, base: String) async throws -> [String: Any] {
        let reply = try await system.request(.GET, "/v1/access-status?customerEmail=\(email)&offerId=\(offerId)", headers: publisher.headers, base: base)
        #expect(reply.status == 200)
        return reply.json
    }

    /// `tollgate_access_cache_total{result=…}` of the API at `base`.
    static func cacheCount(_ system: TollgateSystem, _ result: String, base: String) async throws -> Int {
        let text = try await system.request(.GET, "/metrics", base: base).text
        let prefix = "tollgate_access_cache_total{result=\"\(result)\"} "
        return text.split(separator: "\n").first { $0.hasPrefix(prefix) }.flatMap { Int(Double($0.dropFirst(prefix.count)) ?? -1) } ?? 0
    }

    @Test("a second process shows pending, the grant and a refund found in a later receipt, while serving repeat polls from memory")
    func changesReachEveryProcess() async throws {
        // An hour of cache: only the broadcast can bring a change within the polls' 30 s, not an entry expiring.
        let system = try await TollgateSystem(extraEnvironment: ["TOLLGATE_ACCESS_CACHE_TTL_S": "3600"])
        do {
            let publisher = try await system.createPublisher(products: [Self.premium, Self.extra])
            let secondBase = try await system.startAPI()
            let email = "cached@example.com"

            // Nothing yet; the second process caches that answer once its subscription is in place.
            _ = try await Poll.until(timeout: .seconds(10), "the second process serves a repeat poll from memory") {
                let answer = try await Self.status(system, publisher, email, "S100_US", base: secondBase)
                #expect(answer["accessGranted"] as? Bool == false)
                #expect(answer["pending"] as? Bool == false)
                return try await Self.cacheCount(system, "hit", base: secondBase) > 0 ? true : nil
            }

            // Accepted by the first process: it says pending at once, the second within moments.
            let first = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(bundleId: publisher.bundleId, purchases: [.init(productId: "com.example.e2e.premium", transactionId: first)])
            #expect(try await system.submit(publisher, email: email, offerId: "S100_US", transactionId: first, receipt: receipt).status == 200)
            #expect(try await Self.status(system, publisher, email, "S100_US", base: system.apiBase)["pending"] as? Bool == true)
            _ = try await Poll.until(timeout: .seconds(30), "the second process says pending") {
                try await Self.status(system, publisher, email, "S100_US", base: secondBase)["pending"] as? Bool == true ? true : nil
            }

            // A worker grants it: both processes show the access, and then no longer pending (the job is
            // finished in Redis one round trip after the grant is committed).
            try await system.startWorker(name: "cache-worker")
            for base in [secondBase, system.apiBase] {
                _ = try await Poll.until(timeout: .seconds(30), "access, no longer pending, at \(base)") {
                    let answer = try await Self.status(system, publisher, email, "S100_US", base: base)
                    return answer["accessGranted"] as? Bool == true && answer["pending"] as? Bool == false ? true : nil
                }
            }
            // A repeat poll is then served from memory (the first one after the job's invalidation fills the cache).
            let hitsBefore = try await Self.cacheCount(system, "hit", base: secondBase)
            _ = try await Poll.until(timeout: .seconds(10), "the granted answer served from memory") {
                #expect(try await Self.status(system, publisher, email, "S100_US", base: secondBase)["accessGranted"] as? Bool == true)
                return try await Self.cacheCount(system, "hit", base: secondBase) > hitsBefore ? true : nil
            }

            // The customer's next purchase (another offer) brings a receipt listing the first one refunded:
            // that job's own key is not the premium offer's, so only the broadcast `*` can reach the cache.
            let next = ScenarioReceipt.transactionId()
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let refundReceipt = ScenarioReceipt.make(bundleId: publisher.bundleId, purchases: [
                .init(productId: "com.example.e2e.premium", transactionId: first, purchaseDateMs: now - 60_000, cancellationDateMs: now - 1_000),
                .init(productId: "com.example.e2e.extra", transactionId: next, purchaseDateMs: now),
            ])
            #expect(try await system.submit(publisher, email: email, offerId: "S300_US", transactionId: next, receipt: refundReceipt).status == 200)
            for base in [secondBase, system.apiBase] {
                _ = try await Poll.until(timeout: .seconds(30), "the refund at \(base)") {
                    try await Self.status(system, publisher, email, "S100_US", base: base)["accessGranted"] as? Bool == false ? true : nil
                }
            }
        } catch {
            await system.shutdown()
            throw error
        }
        await system.shutdown()
    }

    @Test("with the cache off (TOLLGATE_ACCESS_CACHE_TTL_S=0) the API keeps serving, and every poll reads PostgreSQL")
    func cacheOff() async throws {
        let system = try await TollgateSystem(extraEnvironment: ["TOLLGATE_ACCESS_CACHE_TTL_S": "0"])
        do {
            let publisher = try await system.createPublisher(products: [Self.premium])
            let email = "uncached@example.com"
            let transaction = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(bundleId: publisher.bundleId, purchases: [.init(productId: "com.example.e2e.premium", transactionId: transaction)])
            #expect(try await system.submit(publisher, email: email, offerId: "S100_US", transactionId: transaction, receipt: receipt).status == 200)
            try await system.startWorker(name: "uncached-worker")
            _ = try await system.waitForAccess(publisher, email: email, offerId: "S100_US")
            #expect(try await Self.status(system, publisher, email, "S100_US", base: system.apiBase)["accessGranted"] as? Bool == true)
            // A change made in PostgreSQL alone, announced to no one, shows in the very next poll: it read
            // PostgreSQL. (With the cache on, the answer above would be served for up to its lifetime.)
            try await system.database.query("UPDATE entitlements SET revoked_at = now() WHERE customer_email = $1", [email])
            #expect(try await Self.status(system, publisher, email, "S100_US", base: system.apiBase)["accessGranted"] as? Bool == false)
            try await system.database.query("UPDATE entitlements SET revoked_at = NULL WHERE customer_email = $1", [email])
            #expect(try await Self.status(system, publisher, email, "S100_US", base: system.apiBase)["accessGranted"] as? Bool == true)
            #expect(try await Self.cacheCount(system, "hit", base: system.apiBase) == 0)
            #expect(system.api.isRunning, "\(system.api.logTail())")
        } catch {
            await system.shutdown()
            throw error
        }
        await system.shutdown()
    }
}
