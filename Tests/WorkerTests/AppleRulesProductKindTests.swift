import Foundation
import Shared
import Testing
import TestSupport
@testable import Worker

/// Issue #3, rule 4 (CONTRACT.md "What a grant means"): what each product kind grants, through the real
/// worker against the emulator.
@Suite("Apple rules: product kinds")
struct AppleRulesProductKindTests {
    static let bundle = "com.example.kinds"

    /// An upgrade or a downgrade within a subscription group keeps the original transaction id: the answer
    /// lists periods of two products under one original. Each product's periods are access to its own offer.
    @Test("a subscription switched to another product of its group: each offer's access follows its own product's periods", arguments: ["upgrade", "downgrade"])
    func subscriptionSwitched(_ direction: String) async throws {
        try await WorkerHarness.rules(Self.bundle, selling: .monthly, .yearly) { harness in
            let now = Millis.now
            let (from, to) = direction == "upgrade" ? (("monthly", "MONTHLY"), ("yearly", "YEARLY")) : (("yearly", "YEARLY"), ("monthly", "MONTHLY"))
            let original = ScenarioReceipt.transactionId()
            let firstEnd = now + 10 * Millis.day
            let first = ScenarioEntry(from.0, original, original: original, purchase: now - 20 * Millis.day, expires: firstEnd)
            let granted = try await harness.workUntilFinal(try await harness.submit(
                offerId: from.1, transactionId: original, receipt: ScenarioReceipt.make(bundleId: Self.bundle, entries: [first])
            ))
            #expect(granted.status == .granted)

            // The switch: a period of the other product, same original, ending later.
            let switched = ScenarioReceipt.transactionId()
            let switchedEnd = firstEnd + 300 * Millis.day
            let receipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                first, ScenarioEntry(to.0, switched, original: original, purchase: firstEnd - Millis.day, expires: switchedEnd),
            ])
            let record = try await harness.workUntilFinal(try await harness.submit(offerId: to.1, transactionId: switched, receipt: receipt))
            #expect(record.status == .granted)
            let newAccess = try await harness.access(to.1)
            #expect(newAccess.granted, "the product paid for now is granted")
            #expect(Millis.of(newAccess.expiresAt) == switchedEnd)
            let oldAccess = try await harness.access(from.1)
            #expect(Millis.of(oldAccess.expiresAt) == firstEnd, "the earlier product's access is not extended by the other product's period")
            #expect(try await harness.ledgerRow(switched)?.state == "fulfilled")
        }
    }

    @Test("a subscription one job granted, lapsed since: another job for it is rejected expired, as a first check of it would be")
    func lapsedSubscriptionAgain() async throws {
        try await WorkerHarness.rules(Self.bundle, selling: .monthly) { harness in
            let now = Millis.now
            let original = ScenarioReceipt.transactionId()
            let paid = ScenarioEntry("monthly", original, original: original, purchase: now - 20 * Millis.day, expires: now + 10 * Millis.day)
            let first = try await harness.workUntilFinal(try await harness.submit(
                offerId: "MONTHLY", transactionId: original, receipt: ScenarioReceipt.make(bundleId: Self.bundle, entries: [paid])
            ))
            #expect(first.status == .granted)

            // Time passes: the period ends unrenewed. The access ran out yesterday, and Apple says so.
            let ended = now - Millis.day
            try await harness.database.query("UPDATE entitlements SET expires_at = $1", [Date(timeIntervalSince1970: Double(ended) / 1000)])
            let lapsed = ScenarioEntry("monthly", original, original: original, purchase: now - 20 * Millis.day, expires: ended)
            let again = try await harness.workUntilFinal(try await harness.inject(
                offerId: "MONTHLY", transactionId: original, receipt: ScenarioReceipt.make(bundleId: Self.bundle, entries: [lapsed])
            ))
            #expect(again.status == .rejected, "\(again)")
            #expect(again.reason == "expired")
            #expect(again.expiresAt == Int(ended / 1000))
            #expect(try await harness.access("MONTHLY").granted == false)
            #expect(try await harness.ledgerRow(original)?.state == "fulfilled", "the first job's grant stands")
        }
    }

    @Test("a refunded period of the product switched to takes that offer's access, and leaves the other product's alone")
    func switchedPeriodRefunded() async throws {
        try await WorkerHarness.rules(Self.bundle, selling: .monthly, .yearly) { harness in
            let now = Millis.now
            let original = ScenarioReceipt.transactionId()
            let monthlyEnd = now + 10 * Millis.day
            let monthly = ScenarioEntry("monthly", original, original: original, purchase: now - 20 * Millis.day, expires: monthlyEnd)
            let yearlyId = ScenarioReceipt.transactionId()
            let yearly = ScenarioEntry("yearly", yearlyId, original: original, purchase: now - Millis.day, expires: now + 360 * Millis.day)
            for (offerId, transaction) in [("MONTHLY", original), ("YEARLY", yearlyId)] {
                let receipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: offerId == "MONTHLY" ? [monthly] : [monthly, yearly])
                #expect(try await harness.workUntilFinal(try await harness.submit(offerId: offerId, transactionId: transaction, receipt: receipt)).status == .granted)
            }

            // The yearly period is refunded; the monthly one is not.
            var refunded = yearly
            refunded.cancellationDateMs = now - 1000
            let receipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: [monthly, refunded])
            #expect(try await harness.workUntilFinal(try await harness.inject(offerId: "YEARLY", transactionId: yearlyId, receipt: receipt)).reason == "refunded")
            #expect(try await harness.access("YEARLY").granted == false, "its only period is refunded; the monthly period is another offer's")
            let monthlyAccess = try await harness.access("MONTHLY")
            #expect(monthlyAccess.granted)
            #expect(Millis.of(monthlyAccess.expiresAt) == monthlyEnd)
        }
    }

    @Test("the same consumable receipt posted as ten jobs of one customer credits its coins once")
    func consumableTenTimes() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            let (transaction, receipt) = try await harness.coinsPurchase(bundle: Self.bundle)
            var jobs: [String] = []
            for _ in 0..<10 { jobs.append(try await harness.inject(offerId: "COINS100", transactionId: transaction, receipt: receipt)) }
            #expect(Set(jobs).count == 10, "ten distinct jobs reached the queue")
            // All ten delivered at once: the worker runs them concurrently, as it would in production.
            let records = try await harness.workAllUntilFinal(jobs)
            #expect(records.map(\.status) == Array(repeating: .granted, count: 10))
            #expect(try await harness.balance() == 100)
            #expect(try await harness.walletEntries() == [.init(customerEmail: WorkerHarness.buyer, transactionId: transaction, kind: "credit", coins: 100)])
            let ledger = try await harness.ledger()
            #expect(ledger.count == 1)
            #expect(ledger.first?.transactionId == transaction)
            #expect(ledger.first?.state == "fulfilled")
            #expect(try await harness.count("entitlements") == 0, "coins are not an entitlement")
        }
    }

    @Test("a consumable credits its coins times Apple's quantity; a credit no wallet entry holds fails the job, nothing written")
    func consumableQuantity() async throws {
        let large = RulesProduct(productId: "hoard", offerId: "HOARD", kind: .consumable, coins: 1_000_000_000)
        try await WorkerHarness.rules(Self.bundle, selling: .coins50, large) { harness in
            let three = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: [ScenarioEntry("coins50", three, quantity: 3)])
            #expect(try await harness.workUntilFinal(try await harness.submit(offerId: "COINS50", transactionId: three, receipt: receipt)).status == .granted)
            #expect(try await harness.balance() == 150)

            // 3 × 1,000,000,000 coins is more than PostgreSQL's integer: refused at once, not retried until the
            // policy runs out, and no credit, ledger row or claim is written.
            let tooMuch = ScenarioReceipt.transactionId()
            let record = try await harness.workUntilFinal(try await harness.submit(
                offerId: "HOARD", transactionId: tooMuch,
                receipt: ScenarioReceipt.make(bundleId: Self.bundle, entries: [ScenarioEntry("hoard", tooMuch, quantity: 3)])
            ))
            #expect(record.status == .failed)
            #expect(record.reason == "internal")
            #expect(record.attempts == 1)
            #expect(try await harness.balance() == 150)
            #expect(try await harness.ledgerRow(tooMuch) == nil)
        }
    }

    @Test("a non-consumable grants access with no expiry")
    func nonConsumable() async throws {
        try await WorkerHarness.rules(Self.bundle, selling: .premium) { harness in
            let transaction = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(
                bundleId: Self.bundle, purchases: [.init(productId: "premium", transactionId: transaction, purchaseDateMs: Millis.now - 400 * Millis.day)]
            )
            let record = try await harness.workUntilFinal(try await harness.submit(offerId: "PREMIUM", transactionId: transaction, receipt: receipt))
            #expect(record.status == .granted)
            #expect(record.expiresAt == nil)
            let access = try await harness.access("PREMIUM")
            #expect(access.granted)
            #expect(access.expiresAt == nil)
            let entitlements = try await harness.entitlements()
            #expect(entitlements.count == 1)
            #expect(entitlements.first?.expiresAt == nil)
            #expect(entitlements.first?.revokedAt == nil)
            #expect(try await harness.ledgerRow(transaction)?.state == "fulfilled")
            #expect(try await harness.count("wallet_entries") == 0)
        }
    }

    @Test("an auto-renewable grants until the greatest expires_date_ms over out-of-order entries, not the last one's", arguments: [false, true])
    func autoRenewableGreatestExpiry(submitNewest: Bool) async throws {
        try await WorkerHarness.rules(Self.bundle, selling: .monthly) { harness in
            let now = Millis.now
            let original = ScenarioReceipt.transactionId()
            let greatest = now + 20 * Millis.day + 457
            // Six periods, out of order with the newest in the middle; the last listed ended 10 days ago.
            let periods = Subscription.periods("monthly", original: original, count: 6, lastEnd: greatest)
            let newest = try #require(periods.first { $0.expiresDateMs == greatest }).transactionId
            #expect(periods.last?.expiresDateMs != greatest && periods.first?.expiresDateMs != greatest)
            let receipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: periods)
            let submitted = submitNewest ? newest : original
            let record = try await harness.workUntilFinal(try await harness.submit(offerId: "MONTHLY", transactionId: submitted, receipt: receipt))
            #expect(record.status == .granted)
            #expect(record.expiresAt == Int(greatest / 1000))
            let access = try await harness.access("MONTHLY")
            #expect(access.granted)
            #expect(Millis.of(access.expiresAt) == greatest)
            #expect(try await harness.entitlements().count == 1)
            #expect(try await harness.ledgerRow(submitted)?.state == "fulfilled")
        }
    }

    /// Grace period relative to the subscription's last expiry.
    enum Grace: String, CaseIterable, Sendable {
        case later, earlier
    }

    @Test("an auto-renewable is extended to grace_period_expires_date_ms when that is later, and only then", arguments: Grace.allCases)
    func autoRenewableGrace(_ grace: Grace) async throws {
        try await WorkerHarness.rules(Self.bundle, selling: .monthly) { harness in
            let now = Millis.now
            let original = ScenarioReceipt.transactionId()
            let renewal = ScenarioReceipt.transactionId()
            let lastExpiry = grace == .later ? now - Millis.day + 311 : now + 10 * Millis.day + 311
            let graceEnd = grace == .later ? now + 6 * Millis.day + 789 : now + 3 * Millis.day + 789
            let receipt = ScenarioReceipt.make(
                bundleId: Self.bundle,
                entries: [
                    ScenarioEntry("monthly", renewal, original: original, purchase: now - 25 * Millis.day, expires: lastExpiry),
                    ScenarioEntry("monthly", original, original: original, purchase: now - 55 * Millis.day, expires: now - 25 * Millis.day),
                ],
                grace: [(original: original, productId: "monthly", endMs: graceEnd)]
            )
            let record = try await harness.workUntilFinal(try await harness.submit(offerId: "MONTHLY", transactionId: renewal, receipt: receipt))
            let expected = max(lastExpiry, graceEnd)
            #expect(record.status == .granted)
            #expect(record.expiresAt == Int(expected / 1000))
            let access = try await harness.access("MONTHLY")
            #expect(access.granted)
            #expect(Millis.of(access.expiresAt) == expected)
        }
    }

    @Test("a later receipt listing a renewal extends the same entitlement (submitted renewal, or another purchase's receipt)", arguments: [false, true])
    func renewalExtends(viaOtherPurchase: Bool) async throws {
        try await WorkerHarness.rules(Self.bundle, selling: .monthly, .coins50) { harness in
            let now = Millis.now
            let original = ScenarioReceipt.transactionId()
            let firstEnd = now + 5 * Millis.day + 101
            let first = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                ScenarioEntry("monthly", original, original: original, purchase: now - 25 * Millis.day, expires: firstEnd),
            ])
            let firstJob = try await harness.submit(offerId: "MONTHLY", transactionId: original, receipt: first)
            #expect(try await harness.workUntilFinal(firstJob).expiresAt == Int(firstEnd / 1000))
            #expect(Millis.of(try await harness.access("MONTHLY").expiresAt) == firstEnd)

            // A month later Apple renewed it; the next receipt lists the renewal.
            let renewal = ScenarioReceipt.transactionId()
            let coins = ScenarioReceipt.transactionId()
            let renewedEnd = firstEnd + 30 * Millis.day
            let second = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                ScenarioEntry("monthly", renewal, original: original, purchase: firstEnd - 1000, expires: renewedEnd),
                ScenarioEntry("monthly", original, original: original, purchase: now - 25 * Millis.day, expires: firstEnd),
                ScenarioEntry("coins50", coins, purchase: now),
            ])
            let secondJob = viaOtherPurchase
                ? try await harness.submit(offerId: "COINS50", transactionId: coins, receipt: second)
                : try await harness.submit(offerId: "MONTHLY", transactionId: renewal, receipt: second)
            let record = try await harness.workUntilFinal(secondJob)
            #expect(record.status == .granted)
            if !viaOtherPurchase { #expect(record.expiresAt == Int(renewedEnd / 1000)) }
            let entitlements = try await harness.entitlements()
            #expect(entitlements.count == 1, "the same entitlement, not a second one")
            #expect(Millis.of(entitlements.first?.expiresAt) == renewedEnd)
            #expect(Millis.of(try await harness.access("MONTHLY").expiresAt) == renewedEnd)
            let renewalRow = try #require(try await harness.ledgerRow(renewal))
            #expect(renewalRow.customerEmail == WorkerHarness.buyer)
            #expect(renewalRow.originalTransactionId == original)
            #expect(renewalRow.state == "fulfilled")
            if viaOtherPurchase { #expect(try await harness.balance() == 50) }
        }
    }

    @Test("a non-renewing purchase stacks after access still active, once per transaction: replays never stack again")
    func nonRenewingStacks() async throws {
        try await WorkerHarness.rules(Self.bundle, selling: .pass30) { harness in
            let now = Millis.now
            let firstTx = ScenarioReceipt.transactionId()
            let firstPurchase = now - 2 * Millis.day
            let firstReceipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: [ScenarioEntry("pass30", firstTx, purchase: firstPurchase)])
            let firstEnd = Int(firstPurchase / 1000) + 30 * 86_400
            #expect(try await harness.workUntilFinal(try await harness.submit(offerId: "PASS30", transactionId: firstTx, receipt: firstReceipt)).expiresAt == firstEnd)

            // Bought again while the first pass runs: the second 30 days start when the first end.
            let secondTx = ScenarioReceipt.transactionId()
            let secondReceipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                ScenarioEntry("pass30", firstTx, purchase: firstPurchase), ScenarioEntry("pass30", secondTx, purchase: now),
            ])
            let stacked = try await harness.workUntilFinal(try await harness.submit(offerId: "PASS30", transactionId: secondTx, receipt: secondReceipt))
            #expect(stacked.status == .granted)
            let stackedEnd = firstEnd + 30 * 86_400
            #expect(stacked.expiresAt == stackedEnd)
            #expect(Millis.of(try await harness.access("PASS30").expiresAt).map { Int($0 / 1000) } == stackedEnd)

            // Replays of either transaction (new jobs, same receipt) grant, but never add days.
            let replays = [
                try await harness.inject(offerId: "PASS30", transactionId: secondTx, receipt: secondReceipt),
                try await harness.inject(offerId: "PASS30", transactionId: firstTx, receipt: firstReceipt),
                try await harness.inject(offerId: "PASS30", transactionId: secondTx, receipt: secondReceipt),
            ]
            for replay in replays {
                let record = try await harness.workUntilFinal(replay)
                #expect(record.status == .granted)
                #expect(record.expiresAt == stackedEnd)
            }
            #expect(Millis.of(try await harness.access("PASS30").expiresAt).map { Int($0 / 1000) } == stackedEnd)
            #expect(try await harness.entitlements().count == 1)
            #expect(try await harness.ledger().map(\.state) == ["fulfilled", "fulfilled"])
        }
    }

    @Test("a receipt with 300 in_app entries: the submitted one is found among them and only it is credited")
    func hundredsOfEntries() async throws {
        try await WorkerHarness.rules(Self.bundle, selling: .coins100, .premium) { harness in
            let now = Millis.now
            var entries: [ScenarioEntry] = []
            for index in 0..<300 {
                let product = index.isMultiple(of: 7) ? "premium" : "coins100"
                entries.append(ScenarioEntry(product, ScenarioReceipt.transactionId(), purchase: now - Int64(300 - index) * 60_000))
            }
            let target = entries[173]
            #expect(target.productId == "coins100")
            let receipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: entries)
            let record = try await harness.workUntilFinal(try await harness.submit(offerId: "COINS100", transactionId: target.transactionId, receipt: receipt))
            #expect(record.status == .granted)
            #expect(try await harness.balance() == 100)
            #expect(try await harness.walletEntries().map(\.transactionId) == [target.transactionId])
            #expect(try await harness.ledger().map(\.transactionId) == [target.transactionId])
            #expect(try await harness.access("PREMIUM").granted == false, "other entries of the receipt grant nothing by themselves")
        }
    }

    @Test("millisecond values written as strings or as JSON numbers in the scenario grant the same expiry", arguments: [false, true])
    func millisecondsInScenario(numbers: Bool) async throws {
        try await WorkerHarness.rules(Self.bundle, selling: .monthly) { harness in
            let now = Millis.now
            let original = ScenarioReceipt.transactionId()
            let end = now + 9 * Millis.day + 999
            let receipt = ScenarioReceipt.make(
                bundleId: Self.bundle,
                entries: [ScenarioEntry("monthly", original, original: original, purchase: now - 21 * Millis.day, expires: end)], numbers: numbers
            )
            let record = try await harness.workUntilFinal(try await harness.submit(offerId: "MONTHLY", transactionId: original, receipt: receipt))
            #expect(record.status == .granted)
            #expect(record.expiresAt == Int(end / 1000))
            #expect(Millis.of(try await harness.access("MONTHLY").expiresAt) == end)
        }
    }

    /// What the numeric answer carries.
    enum NumericCase: String, CaseIterable, Sendable {
        case subscriptionWithGrace, refund
    }

    @Test("Apple's answer with millisecond values as JSON numbers (not strings) is read the same", arguments: NumericCase.allCases)
    func millisecondsAsNumbersInAnswer(_ numericCase: NumericCase) async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            try await harness.app(Self.bundle, selling: [.monthly])
            let now = Millis.now
            let original = ScenarioReceipt.transactionId()
            let renewal = ScenarioReceipt.transactionId()
            let latest = now - Millis.day + 17
            let graceEnd = now + 4 * Millis.day + 71
            let cancelled: Int64? = numericCase == .refund ? now - 2 * Millis.day : nil
            let receipt = ScenarioReceipt.make(
                bundleId: Self.bundle,
                entries: [
                    ScenarioEntry("monthly", original, original: original, purchase: now - 61 * Millis.day, expires: now - 31 * Millis.day),
                    ScenarioEntry("monthly", renewal, original: original, purchase: now - 31 * Millis.day, expires: latest, cancelled: cancelled),
                ],
                grace: numericCase == .refund ? [] : [(original: original, productId: "monthly", endMs: graceEnd)],
                // The emulator sends every …_ms as a JSON number (docs/emulator.md).
                extra: ["millisecondsAsNumbers": true]
            )
            let record = try await harness.workUntilFinal(try await harness.submit(offerId: "MONTHLY", transactionId: renewal, receipt: receipt))
            switch numericCase {
            case .subscriptionWithGrace:
                #expect(record.status == .granted)
                #expect(record.expiresAt == Int(graceEnd / 1000))
                #expect(Millis.of(try await harness.access("MONTHLY").expiresAt) == graceEnd)
            case .refund:
                #expect(record.status == .rejected)
                #expect(record.reason == "refunded")
                #expect(try await harness.access("MONTHLY").granted == false)
                #expect(Millis.of(try await harness.ledgerRow(renewal)?.cancellationDate) == cancelled)
            }
        }
    }
}
