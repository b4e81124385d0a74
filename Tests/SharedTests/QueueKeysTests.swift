import Foundation
import Testing
@testable import Shared

@Suite("QueueKeys")
struct QueueKeysTests {
    static let keys = QueueKeys(prefix: "tollgate")
    static let publisher = UUID(uuidString: "5B0C7E5E-3E52-4B0B-9D0B-0E8E3C4A1F00")!

    static func job(
        customer: String = "viewer@example.com", offer: String = "offer.a", transaction: String? = "1000000000000001",
        receipt: String = "cmVjZWlwdA==", publisher: UUID = Self.publisher, jobId: String = UUID().uuidString
    ) -> ReceiptJob {
        Fixtures.job(jobId: jobId, publisherId: publisher, customerEmail: customer, offerId: offer, transactionId: transaction, receiptData: receipt)
    }

    @Test("every key carries the {q} hash tag and the prefix")
    func everyKeyIsTagged() {
        let job = Self.job()
        let all = [
            Self.keys.stream, Self.keys.retry, Self.keys.dead, Self.keys.jobPrefix, Self.keys.job("abc"), Self.keys.dedup(for: job),
            Self.keys.dedup(for: Self.job(transaction: nil)), Self.keys.claim(publisherId: Self.publisher, transactionId: "1"),
            Self.keys.pending(for: job), Self.keys.pending(publisherId: Self.publisher, customerEmail: "a@b.c", offerId: "o"),
        ]
        for key in all {
            #expect(key.contains("{q}"), "\(key)")
            #expect(key.hasPrefix("tollgate:"), "\(key)")
            // Exactly one hash tag: Redis Cluster hashes the first {…} only.
            #expect(key.components(separatedBy: "{").count == 2, "\(key)")
        }
        #expect(Set(all).count == all.count)
        #expect(Self.keys.job("abc") == Self.keys.jobPrefix + "abc")
    }

    @Test("the prefix separates deployments")
    func prefixSeparates() {
        let other = QueueKeys(prefix: "staging")
        let job = Self.job()
        #expect(other.stream != Self.keys.stream)
        #expect(other.dedup(for: job) != Self.keys.dedup(for: job))
        #expect(other.dedup(for: job).hasPrefix("staging:{q}:"))
    }

    @Test("the dedup key is stable: same submission, same key, whatever the job id or time")
    func dedupStable() {
        let first = Self.job(jobId: "one")
        var second = Self.job(jobId: "two")
        second.acceptedAtMilliseconds = first.acceptedAtMilliseconds + 5000
        second.ipAddress = "10.0.0.1"
        second.appType = .tvos
        #expect(Self.keys.dedup(for: first) == Self.keys.dedup(for: second))
        #expect(QueueKeys(prefix: "tollgate").dedup(for: first) == Self.keys.dedup(for: first))
        // A fixed input gives a fixed key across runs (no per-process salt).
        #expect(Self.keys.dedup(for: first) == Self.keys.dedup(for: Self.job(jobId: "three")))
    }

    @Test("the dedup key differs by customer, offer, transaction and publisher")
    func dedupDiffers() {
        let base = Self.keys.dedup(for: Self.job())
        #expect(Self.keys.dedup(for: Self.job(customer: "other@example.com")) != base)
        #expect(Self.keys.dedup(for: Self.job(offer: "offer.b")) != base)
        #expect(Self.keys.dedup(for: Self.job(transaction: "1000000000000002")) != base)
        #expect(Self.keys.dedup(for: Self.job(publisher: UUID())) != base)
        #expect(Self.keys.dedup(for: Self.job(transaction: nil)) != base)
    }

    @Test("with a transaction id the receipt does not matter")
    func transactionOverridesReceipt() {
        #expect(Self.keys.dedup(for: Self.job(receipt: "AAAA")) == Self.keys.dedup(for: Self.job(receipt: "BBBB")))
    }

    @Test("without a transaction id the receipt digest decides")
    func receiptDigestWithoutTransaction() {
        let a = Self.keys.dedup(for: Self.job(transaction: nil, receipt: "AAAA"))
        let aAgain = Self.keys.dedup(for: Self.job(transaction: nil, receipt: "AAAA"))
        let b = Self.keys.dedup(for: Self.job(transaction: nil, receipt: "BBBB"))
        #expect(a == aAgain)
        #expect(a != b)
        // The key holds a digest, never the receipt itself.
        let receipt = "UHJpdmF0ZVJlY2VpcHREYXRh"
        #expect(!Self.keys.dedup(for: Self.job(transaction: nil, receipt: receipt)).contains(receipt))
        #expect(ReceiptDigest.hex(of: "AAAA") != ReceiptDigest.hex(of: "BBBB"))
        #expect(ReceiptDigest.hex(of: "AAAA").count == 64)
    }

    @Test("the pending key is per publisher, customer and offer")
    func pendingKey() {
        let job = Self.job()
        #expect(Self.keys.pending(for: job) == Self.keys.pending(publisherId: Self.publisher, customerEmail: "viewer@example.com", offerId: "offer.a"))
        #expect(Self.keys.pending(for: Self.job(transaction: "9")) == Self.keys.pending(for: job))
        #expect(Self.keys.pending(for: Self.job(customer: "x@example.com")) != Self.keys.pending(for: job))
        #expect(Self.keys.pending(for: Self.job(offer: "offer.b")) != Self.keys.pending(for: job))
    }
}
