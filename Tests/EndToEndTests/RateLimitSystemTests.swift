import Foundation
import Testing
import TestSupport

/// `TOLLGATE_RATE_LIMIT_PER_S` / `TOLLGATE_RATE_LIMIT_BURST` across API processes: the bucket is in Redis,
/// so adding API processes does not multiply what a publisher may send.
@Suite("Rate limit across API processes")
struct RateLimitSystemTests {
    @Test("two API processes share one publisher's allowance: once the burst is taken across both, either answers 429")
    func sharedAcrossProcesses() async throws {
        let burst = 6
        let system = try await TollgateSystem(extraEnvironment: ["TOLLGATE_RATE_LIMIT_PER_S": "1", "TOLLGATE_RATE_LIMIT_BURST": String(burst)])
        do {
            let publisher = try await system.createPublisher(products: [
                ["productId": "com.example.e2e.premium", "offerId": "S100_US", "kind": "non_consumable", "title": "Premium"],
            ])
            let bases = [system.apiBase, try await system.startAPI()]
            // Alternate between the processes until one refuses. Each process with a bucket of its own would let
            // 2 × burst through; one shared bucket lets the burst through, plus a token for each second gone by.
            let started = ContinuousClock.now
            var allowed = 0
            var refusal: TollgateSystem.Reply?
            for n in 0..<(4 * burst) where refusal == nil {
                let reply = try await system.request(.GET, "/v1/customers/a%40example.com/wallet", headers: publisher.headers, base: bases[n % 2])
                if reply.status == 429 { refusal = reply } else {
                    #expect(reply.status == 200)
                    allowed += 1
                }
            }
            let refilled = Int((ContinuousClock.now - started).components.seconds) + 1
            let refused = try #require(refusal, "neither process refused after \(allowed) requests")
            #expect(allowed >= burst && allowed <= burst + refilled, "\(allowed) requests allowed in \(refilled) s")
            #expect(refused.json["code"] as? String == "rate_limited")
            #expect(refused.headers["retry-after"].flatMap { Int($0) }.map { (1...2).contains($0) } == true)
        } catch {
            await system.shutdown()
            throw error
        }
        await system.shutdown()
    }
}
