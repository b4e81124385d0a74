import Foundation
import Shared
import Testing
import TestSupport
@testable import Worker

/// What the worker sends Apple: the app's shared secret as `password`, and `exclude-old-transactions`
/// for auto-renewable products only.
@Suite("Request to Apple")
struct AppleRequestTests {
    static let bundle = "com.example.request"

    @Test("an auto-renewable offer asks for exclude-old-transactions and sends the app's shared secret")
    func autoRenewable() async throws {
        try await WorkerHarness.with { harness in
            try await harness.app(Self.bundle, sharedSecret: "the-secret")
            try await harness.product(Self.bundle, productId: "monthly", offerId: "MONTHLY", kind: .autoRenewable)
            let transaction = ScenarioReceipt.transactionId()
            let expires = Int64(WallClock.nowMilliseconds()) + 30 * 86_400_000
            let receipt = ScenarioReceipt.make(
                bundleId: Self.bundle, purchases: [.init(productId: "monthly", transactionId: transaction, expiresDateMs: expires)],
                extra: ["sharedSecret": "the-secret"]
            )
            let record = try await harness.workUntilFinal(try await harness.submit(offerId: "MONTHLY", transactionId: transaction, receipt: receipt))
            #expect(record.status == .granted)
            #expect(try await harness.emulatorRequestCounts() == .init(withPassword: 1, excludeOldTransactions: 1))
        }
    }

    @Test("an offer sold in two apps with their own shared secrets: after 21004 the other secret is tried")
    func secretPerApp() async throws {
        try await WorkerHarness.with { harness in
            let tv = "\(Self.bundle).tv"
            try await harness.app(Self.bundle, sharedSecret: "secret-phone")
            try await harness.app(tv, sharedSecret: "secret-tv")
            try await harness.product(Self.bundle, productId: "monthly", offerId: "MONTHLY", kind: .autoRenewable)
            try await harness.product(tv, productId: "monthly.tv", offerId: "MONTHLY", kind: .autoRenewable)
            let expires = Int64(WallClock.nowMilliseconds()) + 30 * 86_400_000
            func buy(_ bundle: String, _ productId: String, secret: String, email: String) async throws -> JobRecord {
                let transaction = ScenarioReceipt.transactionId()
                let receipt = ScenarioReceipt.make(
                    bundleId: bundle, purchases: [.init(productId: productId, transactionId: transaction, expiresDateMs: expires)],
                    extra: ["sharedSecret": secret]
                )
                return try await harness.workUntilFinal(
                    try await harness.submit(email: email, offerId: "MONTHLY", transactionId: transaction, receipt: receipt)
                )
            }
            // Whichever secret is tried first, one of the two receipts needs a second call.
            #expect(try await buy(Self.bundle, "monthly", secret: "secret-phone", email: "phone@example.com").status == .granted)
            #expect(try await buy(tv, "monthly.tv", secret: "secret-tv", email: "tv@example.com").status == .granted)
            #expect(try await harness.emulatorStats().production == 3)

            // A secret neither app has: both are tried, then the job fails as before.
            let stranger = try await buy(tv, "monthly.tv", secret: "secret-unknown", email: "other@example.com")
            #expect(stranger.status == .failed)
            #expect(stranger.reason == "shared_secret_mismatch")
            #expect(stranger.attempts == 1)
            #expect(try await harness.emulatorStats().production == 5)
        }
    }

    @Test("other kinds send neither flag, and no password when the app has no shared secret")
    func otherKinds() async throws {
        try await WorkerHarness.with { harness in
            try await harness.app(Self.bundle)
            try await harness.product(Self.bundle, productId: "lifetime", offerId: "LIFETIME", kind: .nonConsumable)
            #expect(try await harness.purchase(Self.bundle, productId: "lifetime", offerId: "LIFETIME").status == .granted)
            #expect(try await harness.emulatorRequestCounts() == .init(withPassword: 0, excludeOldTransactions: 0))
        }
    }
}
