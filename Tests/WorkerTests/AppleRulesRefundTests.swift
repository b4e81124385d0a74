import Foundation
import Shared
import Testing
import TestSupport
@testable import Worker

/// Issue #3, rule 5: refunds and revocations (`cancellation_date_ms`), including refunds that arrive as
/// evidence in the receipt of the customer's next purchase.
@Suite("Apple rules: refunds")
struct AppleRulesRefundTests {
    static let bundle = "com.example.refunds"

    /// A product kind paired with its catalog entry.
    enum Kind: String, CaseIterable, Sendable {
        case consumable, nonConsumable, autoRenewable, nonRenewing
    }

    private static func addProduct(_ kind: Kind, to harness: WorkerHarness) async throws -> (productId: String, offerId: String) {
        switch kind {
        case .consumable: try await harness.product(Self.bundle, productId: "coins100", offerId: "COINS100", kind: .consumable, coins: 100)
        case .nonConsumable: try await harness.product(Self.bundle, productId: "premium", offerId: "PREMIUM", kind: .nonConsumable)
        case .autoRenewable: try await harness.product(Self.bundle, productId: "monthly", offerId: "MONTHLY", kind: .autoRenewable)
        case .nonRenewing: try await harness.product(Self.bundle, productId: "pass30", offerId: "PASS30", kind: .nonRenewing, days: 30)
        }
        switch kind {
        case .consumable: return ("coins100", "COINS100")
        case .nonConsumable: return ("premium", "PREMIUM")
        case .autoRenewable: return ("monthly", "MONTHLY")
        case .nonRenewing: return ("pass30", "PASS30")
        }
    }

    @Test("an entry with cancellation_date_ms is rejected refunded and grants nothing", arguments: Kind.allCases)
    func cancelledEntry(_ kind: Kind) async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            try await harness.app(Self.bundle)
            let (productId, offerId) = try await Self.addProduct(kind, to: harness)
            let now = Millis.now
            let transaction = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                ScenarioEntry(
                    productId, transaction, original: transaction, purchase: now - 3 * Millis.day,
                    expires: kind == .autoRenewable ? now + 27 * Millis.day : nil, cancelled: now - Millis.day
                ),
            ])
            let record = try await harness.workUntilFinal(try await harness.submit(offerId: offerId, transactionId: transaction, receipt: receipt))
            #expect(record.status == .rejected)
            #expect(record.reason == "refunded")
            #expect(record.attempts == 1)
            #expect(try await harness.access(offerId).granted == false)
            #expect(try await harness.balance() == 0)
            #expect(try await harness.count("wallet_entries") == 0)
            #expect(try await harness.entitlements().allSatisfy { $0.revokedAt != nil }, "no live entitlement")
            // If the ledger keeps the transaction, it is invalidated as refunded.
            if let row = try await harness.ledgerRow(transaction) {
                #expect(row.state == "invalidated")
                #expect(row.lastError == "refunded")
            }
        }
    }

    @Test("a granted purchase refunded later: the next purchase's receipt lists it cancelled, and its access is revoked", arguments: [Kind.nonConsumable, .autoRenewable, .nonRenewing])
    func refundSeenInNextPurchase(_ kind: Kind) async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            try await harness.app(Self.bundle)
            let (productId, offerId) = try await Self.addProduct(kind, to: harness)
            try await harness.product(Self.bundle, productId: "extra", offerId: "EXTRA", kind: .nonConsumable)
            let now = Millis.now
            let first = ScenarioReceipt.transactionId()
            let expires: Int64? = kind == .autoRenewable ? now + 27 * Millis.day : nil
            let firstReceipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                ScenarioEntry(productId, first, original: first, purchase: now - 3 * Millis.day, expires: expires),
            ])
            let granted = try await harness.workUntilFinal(try await harness.submit(offerId: offerId, transactionId: first, receipt: firstReceipt))
            #expect(granted.status == .granted)
            #expect(try await harness.access(offerId).granted)

            // The customer's next purchase (another product of the same app) brings a receipt that lists
            // the first purchase, now refunded.
            let next = ScenarioReceipt.transactionId()
            let cancelledAt = now - 1000
            let nextReceipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                ScenarioEntry(productId, first, original: first, purchase: now - 3 * Millis.day, expires: expires, cancelled: cancelledAt),
                ScenarioEntry("extra", next, purchase: now),
            ])
            let record = try await harness.workUntilFinal(try await harness.submit(offerId: "EXTRA", transactionId: next, receipt: nextReceipt))
            #expect(record.status == .granted, "the next purchase itself is granted")
            #expect(try await harness.access("EXTRA").granted)

            #expect(try await harness.access(offerId).granted == false, "the refunded purchase's access is revoked")
            let revoked = try #require(try await harness.entitlements().first { $0.offerId == offerId })
            #expect(Millis.of(revoked.revokedAt) == cancelledAt, "revoked at the cancellation time")
            let row = try #require(try await harness.ledgerRow(first))
            #expect(row.state == "invalidated")
            #expect(row.lastError == "refunded")
            #expect(row.invalidatedAt != nil)
            #expect(Millis.of(row.cancellationDate) == cancelledAt)
            #expect(try await harness.ledgerRow(next)?.state == "fulfilled")
        }
    }

    /// Where the refund of a consumable is learnt.
    enum RefundSource: String, CaseIterable, Sendable {
        case nextPurchase, resubmission
    }

    @Test("a refunded consumable's credit is reversed by a wallet entry of its own", arguments: RefundSource.allCases)
    func consumableReversed(_ source: RefundSource) async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            try await harness.app(Self.bundle)
            try await harness.product(Self.bundle, productId: "coins100", offerId: "COINS100", kind: .consumable, coins: 100)
            try await harness.product(Self.bundle, productId: "premium", offerId: "PREMIUM", kind: .nonConsumable)
            let now = Millis.now
            let coins = ScenarioReceipt.transactionId()
            let firstReceipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: [ScenarioEntry("coins100", coins, purchase: now - Millis.day)])
            #expect(try await harness.workUntilFinal(try await harness.submit(offerId: "COINS100", transactionId: coins, receipt: firstReceipt)).status == .granted)
            #expect(try await harness.balance() == 100)

            let premium = ScenarioReceipt.transactionId()
            let refundedReceipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                ScenarioEntry("coins100", coins, purchase: now - Millis.day, cancelled: now - 1000),
                ScenarioEntry("premium", premium, purchase: now),
            ])
            switch source {
            case .nextPurchase:
                let record = try await harness.workUntilFinal(try await harness.submit(offerId: "PREMIUM", transactionId: premium, receipt: refundedReceipt))
                #expect(record.status == .granted)
            case .resubmission:
                let record = try await harness.workUntilFinal(try await harness.inject(offerId: "COINS100", transactionId: coins, receipt: refundedReceipt))
                #expect(record.status == .rejected)
                #expect(record.reason == "refunded")
            }
            #expect(try await harness.balance() == 0, "balance back down")
            #expect(try await harness.walletEntries() == [
                .init(customerEmail: WorkerHarness.buyer, transactionId: coins, kind: "credit", coins: 100),
                .init(customerEmail: WorkerHarness.buyer, transactionId: coins, kind: "reversal", coins: -100),
            ])
            let row = try #require(try await harness.ledgerRow(coins))
            #expect(row.state == "invalidated")
            #expect(row.lastError == "refunded")

            // Seeing the refund again reverses nothing more.
            #expect(try await harness.workUntilFinal(try await harness.inject(offerId: "PREMIUM", transactionId: premium, receipt: refundedReceipt)).status == .granted)
            #expect(try await harness.balance() == 0)
            #expect(try await harness.count("wallet_entries") == 2)
        }
    }
}
