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
