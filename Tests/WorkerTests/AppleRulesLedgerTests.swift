import Foundation
import Shared
import Testing
import TestSupport
@testable import Worker

/// Issue #3, rule 7: the ledger row of each transaction records its steps, the environment, the reason
/// when invalidated, and a digest of the receipt, never the receipt itself.
@Suite("Apple rules: ledger")
struct AppleRulesLedgerTests {
    static let bundle = "com.example.ledger"

    @Test("a granted row is fulfilled, received_at ≤ verified_at ≤ fulfilled_at, with the environment and the receipt's SHA-256, never the receipt", arguments: ["Production", "Sandbox"])
    func grantedRow(environment: String) async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            let (transaction, receipt) = try await harness.coinsPurchase(bundle: Self.bundle, environment: environment)
            let before = Date()
            let job = try await harness.submit(offerId: "COINS100", transactionId: transaction, receipt: receipt)
            #expect(try await harness.workUntilFinal(job).status == .granted)
            let after = Date()

            let row = try #require(try await harness.ledgerRow(transaction))
            #expect(row.state == "fulfilled")
            #expect(row.environment == environment)
            #expect(row.customerEmail == WorkerHarness.buyer)
            #expect(row.offerId == "COINS100")
            #expect(row.jobId == job)
            #expect(row.lastError == nil)
            #expect(row.invalidatedAt == nil)
            let verifiedAt = try #require(row.verifiedAt)
            let fulfilledAt = try #require(row.fulfilledAt)
            #expect(row.receivedAt <= verifiedAt)
            #expect(verifiedAt <= fulfilledAt)
            // Every step happened during this test (a millisecond of slack for the stored precision).
            #expect(row.receivedAt >= before.addingTimeInterval(-0.001))
            #expect(fulfilledAt <= after.addingTimeInterval(0.001))

            let digest = try await harness.sha256Hex(receipt)
            #expect(row.receiptDigest == digest)
            // Nothing in the row (nor anywhere in the ledger) holds the receipt or a piece of it.
            let text = try #require(try await harness.database.query("SELECT row_to_json(t)::text AS j FROM transactions t").first?.decode(String.self, "j"))
            #expect(!text.contains(receipt))
            #expect(!text.contains(String(receipt.prefix(24))))
            let decoded = String(decoding: Data(base64Encoded: receipt) ?? Data(), as: UTF8.self)
            #expect(!decoded.isEmpty)
            #expect(!text.contains(decoded))
        }
    }

    @Test("an invalidated row (refund) keeps its steps, the reason and the time it was invalidated")
    func invalidatedRow() async throws {
        try await WorkerHarness.rules(Self.bundle, selling: .premium) { harness in
            let now = Millis.now
            let transaction = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: [ScenarioEntry("premium", transaction, purchase: now - Millis.day)])
            #expect(try await harness.workUntilFinal(try await harness.submit(offerId: "PREMIUM", transactionId: transaction, receipt: receipt)).status == .granted)
            let granted = try #require(try await harness.ledgerRow(transaction))
            #expect(granted.state == "fulfilled")

            let refunded = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                ScenarioEntry("premium", transaction, purchase: now - Millis.day, cancelled: now - 500),
            ])
            let record = try await harness.workUntilFinal(try await harness.inject(offerId: "PREMIUM", transactionId: transaction, receipt: refunded))
            #expect(record.status == .rejected)
            #expect(record.reason == "refunded")
            let row = try #require(try await harness.ledgerRow(transaction))
            #expect(row.state == "invalidated")
            #expect(row.lastError == "refunded")
            #expect(row.receivedAt == granted.receivedAt)
            #expect(row.verifiedAt == granted.verifiedAt)
            let invalidatedAt = try #require(row.invalidatedAt)
            #expect(try #require(granted.fulfilledAt) <= invalidatedAt)
            #expect(Millis.of(row.cancellationDate) == now - 500)
            #expect(row.receiptDigest?.count == 64, "a SHA-256 digest, not a receipt")
            #expect(try await harness.access("PREMIUM").granted == false)
            #expect(try await harness.count("transactions") == 1)
        }
    }
}
