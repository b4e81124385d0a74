import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Shared
import Testing
import TestSupport

@testable import API

/// `TOLLGATE_RATE_LIMIT_PER_S` / `TOLLGATE_RATE_LIMIT_BURST`: a token bucket per publisher in Redis.
@Suite("Rate limit")
struct RateLimitTests {
    @Test("past the burst a publisher gets 429 with Retry-After; another publisher is not affected; nothing is enqueued")
    func limited() async throws {
        var options = APIHarness.Options()
        options.extra = ["TOLLGATE_RATE_LIMIT_PER_S": "1", "TOLLGATE_RATE_LIMIT_BURST": "3"]
        try await APIHarness.withAPI(options) { api in
            let tenant = try await api.provisionTenant()
            let other = try await api.provisionTenant()
            for _ in 0..<3 {
                #expect(try await api.get(tenant, "/v1/customers/a%40example.com/wallet").status == .ok)
            }
            let before = try await api.streamLength()
            let refused = try await api.pay(tenant, Payment.body())
            expectError(refused, .tooManyRequests, code: "rate_limited")
            let retryAfter = try #require(refused.headers[.retryAfter].flatMap { Int($0) })
            #expect((1...2).contains(retryAfter))
            #expect(try await api.streamLength() == before)
            #expect(try await api.get(other, "/v1/customers/a%40example.com/wallet").status == .ok)
            // The bucket refills at the configured rate.
            _ = try await Poll.until(timeout: .seconds(5), "a token back") {
                try await api.get(tenant, "/v1/customers/a%40example.com/wallet").status == .ok ? true : nil
            }
        }
    }

    @Test("0 turns the limit off")
    func off() async throws {
        var options = APIHarness.Options()
        options.extra = ["TOLLGATE_RATE_LIMIT_PER_S": "0", "TOLLGATE_RATE_LIMIT_BURST": "1"]
        try await APIHarness.withAPI(options) { api in
            let tenant = try await api.provisionTenant()
            for _ in 0..<20 {
                #expect(try await api.get(tenant, "/v1/customers/a%40example.com/wallet").status == .ok)
            }
        }
    }
}
