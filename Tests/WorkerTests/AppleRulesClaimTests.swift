import Foundation
import Shared
import Testing
import TestSupport
@testable import Worker

/// Issue #3, rule 6: a purchase belongs to the first customer it was granted to. Jobs are put straight
/// into the queue (no API, and past the Redis claim), so the worker and PostgreSQL must decide.
@Suite("Apple rules: claimed transactions")
struct AppleRulesClaimTests {
    static let bundle = "com.example.claims"

    @Test("a consumable transaction granted to one customer is already_claimed for another; the first grant stays intact")
    func consumableClaimed() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            let (transaction, receipt) = try await harness.coinsPurchase(bundle: Self.bundle)
            let first = try await harness.inject(email: WorkerHarness.buyer, offerId: "COINS100", transactionId: transaction, receipt: receipt)
            #expect(try await harness.workUntilFinal(first).status == .granted)

            let stolen = try await harness.inject(email: WorkerHarness.other, offerId: "COINS100", transactionId: transaction, receipt: receipt)
            let record = try await harness.workUntilFinal(stolen)
            #expect(record.status == .rejected)
            #expect(record.reason == "already_claimed")
            #expect(record.attempts == 1)
            #expect(try await harness.balance(WorkerHarness.other) == 0)
            #expect(try await harness.balance(WorkerHarness.buyer) == 100)
            let ledger = try await harness.ledger()
            #expect(ledger.count == 1, "no second ledger row")
            #expect(ledger.first?.customerEmail == WorkerHarness.buyer)
            #expect(ledger.first?.state == "fulfilled")
            #expect(try await harness.walletEntries() == [.init(customerEmail: WorkerHarness.buyer, transactionId: transaction, kind: "credit", coins: 100)])

            // The owner resubmitting is harmless: granted, still one credit and one row.
            let again = try await harness.inject(email: WorkerHarness.buyer, offerId: "COINS100", transactionId: transaction, receipt: receipt)
            #expect(try await harness.workUntilFinal(again).status == .granted)
            #expect(try await harness.balance(WorkerHarness.buyer) == 100)
            #expect(try await harness.count("wallet_entries") == 1)
            #expect(try await harness.count("transactions") == 1)
        }
    }

    @Test("a non-consumable is claimed by its original transaction: another customer is already_claimed, the owner keeps access")
    func nonConsumableClaimed() async throws {
        try await WorkerHarness.rules(Self.bundle, selling: .premium) { harness in
            let transaction = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(bundleId: Self.bundle, purchases: [.init(productId: "premium", transactionId: transaction)])
            #expect(try await harness.workUntilFinal(try await harness.inject(offerId: "PREMIUM", transactionId: transaction, receipt: receipt)).status == .granted)

            // A restore on another device yields a new transaction id for the same original purchase.
            let restored = ScenarioReceipt.transactionId()
            let restoreReceipt = ScenarioReceipt.make(bundleId: Self.bundle, purchases: [
                .init(productId: "premium", transactionId: restored, originalTransactionId: transaction),
            ])
            let record = try await harness.workUntilFinal(
                try await harness.inject(email: WorkerHarness.other, offerId: "PREMIUM", transactionId: restored, receipt: restoreReceipt)
            )
            #expect(record.status == .rejected)
            #expect(record.reason == "already_claimed")
            #expect(try await harness.access("PREMIUM", email: WorkerHarness.other).granted == false)
            #expect(try await harness.access("PREMIUM", email: WorkerHarness.buyer) == (true, nil))
            #expect(try await harness.ledger().allSatisfy { $0.customerEmail == WorkerHarness.buyer })
            #expect(try await harness.entitlements().map(\.customerEmail) == [WorkerHarness.buyer])
        }
    }

    /// CONTRACT.md: a transaction id already granted to another customer is 409 `already_claimed` at once.
    /// The API knows a transaction's claim from Redis; a receipt submitted without its transaction id
    /// claimed nothing there until its grant.
    @Test("a purchase granted from a submission without its transaction id: another customer submitting any of its ids is refused at enqueue", arguments: ["consumable", "subscription"])
    func grantedWithoutIdRefusedAtEnqueue(_ kind: String) async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            let offerId: String
            let ids: [String]
            let receipt: String
            if kind == "consumable" {
                let purchase = try await harness.coinsPurchase(bundle: Self.bundle)
                (offerId, ids, receipt) = ("COINS100", [purchase.transaction], purchase.receipt)
            } else {
                try await harness.app(Self.bundle, selling: [.monthly])
                let now = Millis.now
                let (original, renewal) = (ScenarioReceipt.transactionId(), ScenarioReceipt.transactionId())
                offerId = "MONTHLY"
                ids = [original, renewal]
                receipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                    ScenarioEntry("monthly", original, original: original, purchase: now - 40 * Millis.day, expires: now - 10 * Millis.day),
                    ScenarioEntry("monthly", renewal, original: original, purchase: now - 10 * Millis.day, expires: now + 20 * Millis.day),
                ])
            }
            #expect(try await harness.workUntilFinal(try await harness.submit(offerId: offerId, transactionId: nil, receipt: receipt)).status == .granted)

            func submission(_ email: String, _ transactionId: String) -> ReceiptJob {
                ReceiptJob(
                    jobId: UUID().uuidString.lowercased(), publisherId: harness.publisher.id, customerEmail: email, offerId: offerId,
                    transactionId: transactionId, receiptData: receipt, appType: .ios, ipAddress: nil, acceptedAtMilliseconds: WallClock.nowMilliseconds()
                )
            }
            for id in ids {
                #expect(try await harness.queue.enqueue(submission(WorkerHarness.other, id), keyTTLSeconds: 3600) == .alreadyClaimed, "\(id)")
            }
            #expect(try await harness.queue.counts().queued == 0, "no job was created for the other customer")
            // The owner may still submit them.
            guard case .created = try await harness.queue.enqueue(submission(WorkerHarness.buyer, ids[0]), keyTTLSeconds: 3600) else {
                Issue.record("the owner's submission was not accepted")
                return
            }
        }
    }

    @Test("an auto-renewable is claimed by original_transaction_id: a renewal of A's subscription submitted by B is already_claimed")
    func subscriptionRenewalClaimed() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            try await harness.app(Self.bundle, selling: [.monthly])
            let now = Millis.now
            let original = ScenarioReceipt.transactionId()
            let firstEnd = now + 3 * Millis.day
            let first = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                ScenarioEntry("monthly", original, original: original, purchase: now - 27 * Millis.day, expires: firstEnd),
            ])
            #expect(try await harness.workUntilFinal(try await harness.inject(offerId: "MONTHLY", transactionId: original, receipt: first)).status == .granted)

            let renewal = ScenarioReceipt.transactionId()
            let renewedEnd = firstEnd + 30 * Millis.day
            let renewed = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                ScenarioEntry("monthly", original, original: original, purchase: now - 27 * Millis.day, expires: firstEnd),
                ScenarioEntry("monthly", renewal, original: original, purchase: firstEnd - 1000, expires: renewedEnd),
            ])
            let record = try await harness.workUntilFinal(
                try await harness.inject(email: WorkerHarness.other, offerId: "MONTHLY", transactionId: renewal, receipt: renewed)
            )
            #expect(record.status == .rejected)
            #expect(record.reason == "already_claimed")
            #expect(try await harness.access("MONTHLY", email: WorkerHarness.other).granted == false)
            #expect(try await harness.access("MONTHLY", email: WorkerHarness.buyer).granted, "the owner's subscription is intact")
            #expect(try await harness.ledger().allSatisfy { $0.customerEmail == WorkerHarness.buyer }, "no ledger row for the second customer")
            #expect(try await harness.entitlements().map(\.customerEmail) == [WorkerHarness.buyer])
            let claims = try await harness.database.query("SELECT customer_email FROM claims").rows.map { try $0.decode(String.self, "customer_email") }
            #expect(claims == [WorkerHarness.buyer])
        }
    }

    @Test("a lapsed subscription checked by one customer claims nothing: the next customer who buys it again is granted")
    func lapsedSubscriptionNotClaimed() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            try await harness.app(Self.bundle, selling: [.monthly])
            let now = Millis.now
            let original = ScenarioReceipt.transactionId()
            let lapsed = ScenarioEntry("monthly", original, original: original, purchase: now - 40 * Millis.day, expires: now - 10 * Millis.day)
            let checked = try await harness.workUntilFinal(try await harness.inject(
                offerId: "MONTHLY", transactionId: original, receipt: ScenarioReceipt.make(bundleId: Self.bundle, entries: [lapsed])
            ))
            #expect(checked.status == .rejected)
            #expect(checked.reason == "expired")
            #expect(try await harness.count("claims") == 0, "nothing was granted, so nothing is claimed")

            // The same Apple ID subscribes again (same original transaction), from another customer's account.
            let renewal = ScenarioReceipt.transactionId()
            let resubscribed = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                lapsed, ScenarioEntry("monthly", renewal, original: original, purchase: now - Millis.day, expires: now + 29 * Millis.day),
            ])
            let bought = try await harness.workUntilFinal(
                try await harness.inject(email: WorkerHarness.other, offerId: "MONTHLY", transactionId: renewal, receipt: resubscribed)
            )
            #expect(bought.status == .granted)
            #expect(try await harness.access("MONTHLY", email: WorkerHarness.other).granted)
            #expect(try await harness.access("MONTHLY", email: WorkerHarness.buyer).granted == false)
        }
    }

    @Test("a refunded purchase checked by one customer claims nothing: another customer is told refunded, not already_claimed")
    func refundedNotClaimed() async throws {
        try await WorkerHarness.rules(Self.bundle, selling: .premium) { harness in
            let transaction = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                ScenarioEntry("premium", transaction, original: transaction, purchase: Millis.now - 5 * Millis.day, cancelled: Millis.now - Millis.day),
            ])
            for email in [WorkerHarness.buyer, WorkerHarness.other] {
                let record = try await harness.workUntilFinal(
                    try await harness.inject(email: email, offerId: "PREMIUM", transactionId: transaction, receipt: receipt)
                )
                #expect(record.status == .rejected)
                #expect(record.reason == "refunded", "\(email)")
                #expect(try await harness.count("claims") == 0)
            }
            #expect(try await harness.entitlements().isEmpty)
            #expect(try await harness.ledger().map(\.state) == ["invalidated"], "the refund is kept in the ledger")
        }
    }

    @Test("two customers racing for one transaction: exactly one is granted, the other already_claimed", arguments: 0..<3)
    func race(_ round: Int) async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            let (transaction, receipt) = try await harness.coinsPurchase(bundle: Self.bundle)
            var jobs: [String] = []
            for index in 0..<8 {
                let email = index.isMultiple(of: 2) ? WorkerHarness.buyer : WorkerHarness.other
                jobs.append(try await harness.inject(email: email, offerId: "COINS100", transactionId: transaction, receipt: receipt))
            }
            let records = try await harness.workAllUntilFinal(jobs)
            let winners = Set(records.filter { $0.status == .granted }.map(\.customerEmail))
            #expect(winners.count == 1, "one owner")
            let owner = try #require(winners.first)
            for record in records {
                if record.customerEmail == owner {
                    #expect(record.status == .granted, "the owner's own resubmissions are harmless")
                } else {
                    #expect(record.status == .rejected)
                    #expect(record.reason == "already_claimed")
                }
            }
            #expect(try await harness.balance(owner) == 100)
            #expect(try await harness.count("wallet_entries") == 1)
            #expect(try await harness.ledger().map(\.customerEmail) == [owner])
        }
    }
}
