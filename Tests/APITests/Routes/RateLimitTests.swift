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
            // The burst is spent. On a slow machine a second may pass and refill one token, so a payment is
            // tried until one is refused: the refused one must enqueue nothing.
            var refusal: (response: TestResponse, before: Int, after: Int)?
            for _ in 0..<20 where refusal == nil {
                let before = try await api.streamLength()
                let response = try await api.pay(tenant, Payment.body())
                if response.status == .tooManyRequests {
                    refusal = (response, before, try await api.streamLength())
                } else {
                    #expect(response.status == .ok, "only a refilled token lets a payment through")
                }
            }
            let refused = try #require(refusal, "no payment was refused past the burst")
            expectError(refused.response, .tooManyRequests, code: "rate_limited")
            let retryAfter = try #require(refused.response.headers[.retryAfter].flatMap { Int($0) })
            #expect((1...2).contains(retryAfter))
            #expect(refused.after == refused.before, "a refused payment enqueues nothing")
            #expect(try await api.get(other, "/v1/customers/a%40example.com/wallet").status == .ok)
            // The bucket refills at the configured rate.
            _ = try await Poll.until(timeout: .seconds(5), "a token back") {
                try await api.get(tenant, "/v1/customers/a%40example.com/wallet").status == .ok ? true : nil
            }
        }
    }

    @Test("app routes (customer tokens) do not spend their publisher's allowance")
    func appRoutesNotCharged() async throws {
        var options = CustomerTokenTests.options
        options.extra["TOLLGATE_RATE_LIMIT_PER_S"] = "1"
        options.extra["TOLLGATE_RATE_LIMIT_BURST"] = "2"
        try await APIHarness.withAPI(options) { api in
            let tenant = try await api.provisionTenant()
            // A publisher route: one of the two tokens.
            let (token, _) = try await CustomerTokenTests.token(api, tenant, email: "app@example.com")
            for _ in 0..<10 {
                #expect(try await CustomerTokenTests.bearerAccess(api, token).status == .ok)
                #expect(try await CustomerTokenTests.rpc(api, token).status == .ok)
            }
            // The publisher still has the token the app requests did not take.
            #expect(try await api.get(tenant, "/v1/customers/a%40example.com/wallet").status == .ok)
        }
    }

    @Test("0 for either the rate or the burst turns the limit off", arguments: [("0", "1"), ("1", "0")])
    func off(perSecond: String, burst: String) async throws {
        var options = APIHarness.Options()
        options.extra = ["TOLLGATE_RATE_LIMIT_PER_S": perSecond, "TOLLGATE_RATE_LIMIT_BURST": burst]
        try await APIHarness.withAPI(options) { api in
            let tenant = try await api.provisionTenant()
            for _ in 0..<20 {
                #expect(try await api.get(tenant, "/v1/customers/a%40example.com/wallet").status == .ok)
            }
        }
    }
}
