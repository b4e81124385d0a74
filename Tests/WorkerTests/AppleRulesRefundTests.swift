import Foundation
import Logging
import Shared
import Synchronization
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

        var product: RulesProduct {
            switch self {
            case .consumable: .coins100
            case .nonConsumable: .premium
            case .autoRenewable: .monthly
            case .nonRenewing: .pass30
            }
        }
    }

    /// Registers the app and one product of `kind`; returns the product's and its offer's ids.
    private static func appWithProduct(_ kind: Kind, to harness: WorkerHarness) async throws -> (productId: String, offerId: String) {
        try await harness.app(Self.bundle, selling: [kind.product])
        return (kind.product.productId, kind.product.offerId)
    }

    @Test("an entry with cancellation_date_ms is rejected refunded and grants nothing", arguments: Kind.allCases)
    func cancelledEntry(_ kind: Kind) async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            let (productId, offerId) = try await Self.appWithProduct(kind, to: harness)
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
            #expect(try await harness.entitlements().isEmpty, "no entitlement, live or revoked")
            // The ledger keeps the transaction, invalidated as refunded.
            let row = try #require(try await harness.ledgerRow(transaction))
            #expect(row.state == "invalidated")
            #expect(row.lastError == "refunded")
        }
    }

    @Test("a granted purchase refunded later: the next purchase's receipt lists it cancelled, and its access is revoked", arguments: [Kind.nonConsumable, .autoRenewable, .nonRenewing])
    func refundSeenInNextPurchase(_ kind: Kind) async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            let (productId, offerId) = try await Self.appWithProduct(kind, to: harness)
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

    @Test("a refunded non-consumable is not granted again through a restore: a restore's receipt taken before the refund is refunded")
    func refundedPurchaseRestoredAfter() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            let (productId, offerId) = try await Self.appWithProduct(.nonConsumable, to: harness)
            let now = Millis.now
            let (original, restore) = (ScenarioReceipt.transactionId(), ScenarioReceipt.transactionId())
            // Bought on a phone and granted; then refunded, as the phone's next receipt says.
            let bought = ScenarioReceipt.make(bundleId: Self.bundle, entries: [ScenarioEntry(productId, original, original: original, purchase: now - 3 * Millis.day)])
            #expect(try await harness.workUntilFinal(try await harness.submit(offerId: offerId, transactionId: original, receipt: bought)).status == .granted)
            let refunded = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                ScenarioEntry(productId, original, original: original, purchase: now - 3 * Millis.day, cancelled: now - Millis.day),
            ])
            let refund = try await harness.workUntilFinal(try await harness.submit(offerId: offerId, transactionId: nil, receipt: refunded))
            #expect(refund.reason == "refunded")
            #expect(try await harness.access(offerId).granted == false)

            // A tablet's receipt from before the refund lists the purchase restored there, under a transaction id of its own.
            let tablet = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                ScenarioEntry(productId, restore, original: original, purchase: now - 2 * Millis.day),
            ])
            let record = try await harness.workUntilFinal(try await harness.submit(offerId: offerId, transactionId: restore, receipt: tablet))
            #expect(record.status == .rejected)
            #expect(record.reason == "refunded")
            #expect(try await harness.access(offerId).granted == false, "the refunded purchase's access stays revoked")
        }
    }

    @Test("a refund of a non-consumable seen in the next purchase's receipt revokes the access its restore granted, though the ledger never saw the purchase itself")
    func refundedPurchaseRestoredBefore() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            let (productId, offerId) = try await Self.appWithProduct(.nonConsumable, to: harness)
            try await harness.product(Self.bundle, productId: "extra", offerId: "EXTRA", kind: .nonConsumable)
            let now = Millis.now
            let (original, restore) = (ScenarioReceipt.transactionId(), ScenarioReceipt.transactionId())
            // Only the tablet's receipt reaches Tollgate: the purchase restored there grants.
            let tablet = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                ScenarioEntry(productId, restore, original: original, purchase: now - 2 * Millis.day),
            ])
            #expect(try await harness.workUntilFinal(try await harness.submit(offerId: offerId, transactionId: restore, receipt: tablet)).status == .granted)
            #expect(try await harness.access(offerId).granted)

            // Then the customer's next purchase, on the phone: its receipt lists the purchase itself, refunded.
            let cancelledAt = now - Millis.day
            let next = ScenarioReceipt.transactionId()
            let phone = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                ScenarioEntry(productId, original, original: original, purchase: now - 3 * Millis.day, cancelled: cancelledAt),
                ScenarioEntry("extra", next, purchase: now),
            ])
            #expect(try await harness.workUntilFinal(try await harness.submit(offerId: "EXTRA", transactionId: next, receipt: phone)).status == .granted)
            #expect(try await harness.access(offerId).granted == false, "the restore's access is revoked with the purchase")
            let row = try #require(try await harness.ledgerRow(restore))
            #expect(row.state == "invalidated")
            #expect(Millis.of(row.cancellationDate) == cancelledAt)
        }
    }

    /// A non-consumable granted, then the customer's next purchase (EXTRA): a job (not enqueued) whose
    /// receipt lists the first purchase refunded. Returns the first purchase's offer, the next purchase's
    /// transaction id, and the job.
    private static func refundInNextPurchase(_ harness: WorkerHarness) async throws -> (offerId: String, next: String, job: ReceiptJob) {
        let (productId, offerId) = try await Self.appWithProduct(.nonConsumable, to: harness)
        try await harness.product(Self.bundle, productId: "extra", offerId: "EXTRA", kind: .nonConsumable)
        let now = Millis.now
        let first = ScenarioReceipt.transactionId()
        let firstReceipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: [ScenarioEntry(productId, first, original: first, purchase: now - Millis.day)])
        #expect(try await harness.workUntilFinal(try await harness.submit(offerId: offerId, transactionId: first, receipt: firstReceipt)).status == .granted)
        let next = ScenarioReceipt.transactionId()
        let job = ReceiptJob(
            jobId: UUID().uuidString.lowercased(), publisherId: harness.publisher.id, customerEmail: WorkerHarness.buyer, offerId: "EXTRA",
            transactionId: next, receiptData: ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                ScenarioEntry(productId, first, original: first, purchase: now - Millis.day, cancelled: now - 1000),
                ScenarioEntry("extra", next, purchase: now),
            ]),
            appType: .ios, ipAddress: nil, acceptedAtMilliseconds: WallClock.nowMilliseconds()
        )
        return (offerId, next, job)
    }

    @Test("a refund found in the next purchase's receipt is announced to API caches, and announced again by the job's replay")
    func refundAnnounced() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            let (offerId, next, job) = try await Self.refundInNextPurchase(harness)

            try await Self.listening(harness, offerId: offerId) { announcements in
                // The second run is what a replay does when the worker died between the first's commit and its
                // announcement: the refund is already revoked, and it is announced all the same.
                for run in 1...2 {
                    let outcome = await harness.processor.fulfiller.fulfil(job, logger: Logger(label: "test.worker"))
                    #expect(outcome == .granted(environment: "Production", expiresAt: nil, claimed: [next]), "run \(run)")
                    _ = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(20), "announcement \(run)") {
                        announcements() == run ? true : nil
                    }
                }
            }
            #expect(try await harness.access(offerId).granted == false)
        }
    }

    /// Runs `body` while listening on the access channel as an API process's cache does; `body` is given how
    /// many times the refund of `offerId` to the buyer has been announced so far.
    private static func listening(_ harness: WorkerHarness, offerId: String, _ body: (@Sendable () -> Int) async throws -> Void) async throws {
        let heard = Mutex<[RedisSubscriber.Event]>([])
        let subscriber = RedisSubscriber(
            configuration: try RedisConfiguration(url: TestEnvironment.redisURL()), channel: harness.queue.keys.accessChannel
        ) { event in heard.withLock { $0.append(event) } }
        subscriber.start()
        let refunded = RedisSubscriber.Event.message(
            harness.queue.keys.pending(publisherId: harness.publisher.id, customerEmail: WorkerHarness.buyer, offerId: offerId)
        )
        do {
            _ = try await Poll.until(timeout: .seconds(10), "subscribed") { heard.withLock { $0.contains(.subscribed) } ? true : nil }
            try await body { heard.withLock { $0.filter { $0 == refunded }.count } }
        } catch {
            await subscriber.shutdown()
            throw error
        }
        await subscriber.shutdown()
    }

    @Test("a refund whose announcement fails makes the job retry, so the next attempt announces it")
    func refundAnnouncementFails() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            let (offerId, next, job) = try await Self.refundInNextPurchase(harness)
            try await Self.listening(harness, offerId: offerId) { announcements in
                // This worker's Redis connection fails (nothing listens there); API caches still hold the old answer.
                var unreachable = try RedisConfiguration(url: "redis://127.0.0.1:1/0")
                unreachable.timeoutMilliseconds = 1000
                let broken = RedisClient(configuration: unreachable, connections: 1)
                let fulfiller = harness.emulatorFulfiller(queue: ReceiptQueue(redis: broken, prefix: harness.queue.keys.prefix))
                let outcome = await fulfiller.fulfil(job, logger: Logger(label: "test.worker"))
                await broken.shutdown()
                guard case .retry(.internal, _, _, _) = outcome else {
                    Issue.record("not retried: \(outcome)")
                    return
                }
                #expect(try await harness.access(offerId).granted == false, "the refund itself is committed")
                #expect(announcements() == 0)
                // The next attempt, with Redis back, announces the refund.
                let retried = await harness.processor.fulfiller.fulfil(job, logger: Logger(label: "test.worker"))
                #expect(retried == .granted(environment: "Production", expiresAt: nil, claimed: [next]))
                _ = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(20), "announced by the next attempt") {
                    announcements() == 1 ? true : nil
                }
            }
        }
    }

    /// A subscription's periods: the original purchase and `count - 1` renewals of 30 days each, the last
    /// one ending `lastEnds` from now.
    private static func periods(_ count: Int, lastEnds: Int64, cancelled: [Int: Int64] = [:]) -> [ScenarioEntry] {
        let first = ScenarioReceipt.transactionId()
        return (0..<count).map { index in
            let end = Millis.now + lastEnds - Int64(count - 1 - index) * 30 * Millis.day
            return ScenarioEntry(
                "monthly", index == 0 ? first : ScenarioReceipt.transactionId(), original: first, purchase: end - 30 * Millis.day,
                expires: end, cancelled: cancelled[index]
            )
        }
    }

    /// A monthly subscription of three periods, the last one current, granted from a receipt listing all
    /// three and submitted with the period at `index`.
    private static func grantedSubscription(submitting index: Int, harness: WorkerHarness) async throws -> [ScenarioEntry] {
        _ = try await Self.appWithProduct(.autoRenewable, to: harness)
        let entries = Self.periods(3, lastEnds: 25 * Millis.day)
        let receipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: entries)
        let granted = try await harness.workUntilFinal(try await harness.submit(offerId: "MONTHLY", transactionId: entries[index].transactionId, receipt: receipt))
        #expect(granted.status == .granted)
        #expect(try await harness.access("MONTHLY").expiresAt.map(Millis.of) == entries[2].expiresDateMs)
        return entries
    }

    private static func withPeriods(_ entries: [ScenarioEntry], cancelled: [Int: Int64]) -> [ScenarioEntry] {
        entries.enumerated().map { index, entry in
            var entry = entry
            entry.cancellationDateMs = cancelled[index] ?? entry.cancellationDateMs
            return entry
        }
    }

    @Test("a refunded renewal that the grant counted takes back the access it gave, though the grant was for the original purchase")
    func refundedRenewalCountedByGrant() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            // Submitted with the original purchase; Apple lists its two renewals, the last one current.
            let entries = try await Self.grantedSubscription(submitting: 0, harness: harness)
            let original = entries[0].transactionId

            // The current renewal is refunded; the customer's app submits its receipt again.
            let cancelledAt = Millis.now - 1000
            let refunded = ScenarioReceipt.make(bundleId: Self.bundle, entries: Self.withPeriods(entries, cancelled: [2: cancelledAt]))
            _ = try await harness.workUntilFinal(try await harness.inject(offerId: "MONTHLY", transactionId: original, receipt: refunded))
            #expect(try await harness.access("MONTHLY").granted == false, "the refunded period's access is taken back")
            let revoked = try #require(try await harness.entitlements().first { $0.offerId == "MONTHLY" })
            #expect(Millis.of(revoked.revokedAt) == cancelledAt)
            #expect(try await harness.ledgerRow(entries[2].transactionId)?.state == "invalidated")
        }
    }

    /// Two answers for one subscription on two workers: one taken just before Apple refunded the current
    /// period, one just after. The later answer's refund commits first; the older answer must not give the
    /// refunded period's access back, and later answers must not have to take it back again.
    @Test("an answer older than a refund already applied does not give the refunded period's access back")
    func staleAnswerAfterRefund() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            let entries = try await Self.grantedSubscription(submitting: 2, harness: harness)
            let cancelledAt = Millis.now - 1000
            let refunded = ScenarioReceipt.make(bundleId: Self.bundle, entries: Self.withPeriods(entries, cancelled: [2: cancelledAt]))
            #expect(try await harness.workUntilFinal(try await harness.inject(offerId: "MONTHLY", transactionId: entries[2].transactionId, receipt: refunded)).reason == "refunded")
            #expect(try await harness.access("MONTHLY").granted == false)

            // The older answer names the first period (middleware often does) and lists the current one unrefunded.
            let stale = ScenarioReceipt.make(bundleId: Self.bundle, entries: entries)
            _ = try await harness.workUntilFinal(try await harness.inject(offerId: "MONTHLY", transactionId: entries[0].transactionId, receipt: stale))
            #expect(try await harness.access("MONTHLY").granted == false, "the refund stands")
            #expect(try await harness.ledgerRow(entries[2].transactionId)?.state == "invalidated")
        }
    }

    @Test("a refunded period with a later period still paid for leaves the access until the later period ends")
    func refundedPeriodLaterStillPaid() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            let entries = try await Self.grantedSubscription(submitting: 2, harness: harness)

            // The middle period is refunded; the current one is not.
            let refunded = ScenarioReceipt.make(bundleId: Self.bundle, entries: Self.withPeriods(entries, cancelled: [1: Millis.now - 1000]))
            _ = try await harness.workUntilFinal(try await harness.inject(offerId: "MONTHLY", transactionId: entries[2].transactionId, receipt: refunded))
            let access = try await harness.access("MONTHLY")
            #expect(access.granted, "the current period is still paid for")
            #expect(access.expiresAt.map(Millis.of) == entries[2].expiresDateMs)
            #expect(try await harness.ledgerRow(entries[1].transactionId)?.state == "invalidated")
        }
    }

    @Test("a refunded period seen in another purchase's answer, with a period bought since in the same answer, leaves the access until that period ends")
    func refundAndNewPeriodInAnotherPurchase() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            let entries = try await Self.grantedSubscription(submitting: 2, harness: harness)
            try await harness.product(Self.bundle, .coins100)

            // The current period is refunded and the subscription bought again; the customer's next
            // purchase (coins) brings the answer that lists both.
            let now = Millis.now
            let again = ScenarioEntry(
                "monthly", ScenarioReceipt.transactionId(), original: entries[0].transactionId, purchase: now - 1000, expires: now + 30 * Millis.day
            )
            let coins = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(
                bundleId: Self.bundle, entries: Self.withPeriods(entries, cancelled: [2: now - 2000]) + [again, ScenarioEntry("coins100", coins, purchase: now)]
            )
            #expect(try await harness.workUntilFinal(try await harness.inject(offerId: "COINS100", transactionId: coins, receipt: receipt)).status == .granted)
            let access = try await harness.access("MONTHLY")
            #expect(access.granted, "the period bought again is paid for")
            #expect(access.expiresAt.map(Millis.of) == again.expiresDateMs)
            #expect(try await harness.ledgerRow(entries[2].transactionId)?.state == "invalidated")
            #expect(try await harness.ledgerRow(again.transactionId)?.state == "fulfilled")
        }
    }

    @Test("a refund already applied, seen again, does not take away the subscription bought again since")
    func oldRefundAfterResubscription() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            _ = try await Self.appWithProduct(.autoRenewable, to: harness)
            let now = Millis.now
            let first = ScenarioReceipt.transactionId()
            let bought = ScenarioEntry("monthly", first, original: first, purchase: now - 10 * Millis.day, expires: now + 20 * Millis.day)
            #expect(try await harness.workUntilFinal(try await harness.submit(
                offerId: "MONTHLY", transactionId: first, receipt: ScenarioReceipt.make(bundleId: Self.bundle, entries: [bought])
            )).status == .granted)

            // Refunded, and the refund applied.
            var refundedEntry = bought
            refundedEntry.cancellationDateMs = now - 5 * Millis.day
            let refunded = ScenarioReceipt.make(bundleId: Self.bundle, entries: [refundedEntry])
            #expect(try await harness.workUntilFinal(try await harness.inject(offerId: "MONTHLY", transactionId: first, receipt: refunded)).reason == "refunded")
            #expect(try await harness.access("MONTHLY").granted == false)

            // Bought again: a new period of the same subscription.
            let again = ScenarioReceipt.transactionId()
            let resubscribed = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                refundedEntry, ScenarioEntry("monthly", again, original: first, purchase: now - 1000, expires: now + 30 * Millis.day),
            ])
            #expect(try await harness.workUntilFinal(try await harness.inject(offerId: "MONTHLY", transactionId: again, receipt: resubscribed)).status == .granted)
            #expect(try await harness.access("MONTHLY").granted)

            // The old refunded receipt comes in once more (a restore, a resubmission after the dedup window).
            #expect(try await harness.workUntilFinal(try await harness.inject(offerId: "MONTHLY", transactionId: first, receipt: refunded)).reason == "refunded")
            let access = try await harness.access("MONTHLY")
            #expect(access.granted, "the period bought again is paid for")
            #expect(access.expiresAt.map(Millis.of) == now + 30 * Millis.day)
        }
    }

    @Test("a submission naming a refunded period of a subscription still paid for grants the period paid for; with none paid for, it is refunded")
    func refundedPeriodNamedWhileSubscribed() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            _ = try await Self.appWithProduct(.autoRenewable, to: harness)
            let now = Millis.now
            // Refunded, then bought again as a new period of the same subscription; the middleware still
            // names the transaction it saw first.
            let first = ScenarioReceipt.transactionId()
            let again = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                ScenarioEntry("monthly", first, original: first, purchase: now - 10 * Millis.day, expires: now + 20 * Millis.day, cancelled: now - 5 * Millis.day),
                ScenarioEntry("monthly", again, original: first, purchase: now - 1000, expires: now + 30 * Millis.day),
            ])
            let record = try await harness.workUntilFinal(try await harness.submit(offerId: "MONTHLY", transactionId: first, receipt: receipt))
            #expect(record.status == .granted)
            let access = try await harness.access("MONTHLY")
            #expect(access.granted)
            #expect(access.expiresAt.map(Millis.of) == now + 30 * Millis.day)
            #expect(try await harness.ledgerRow(again)?.state == "fulfilled")

            // Another customer's subscription: refunded, and the period after it lapsed. Nothing is paid for.
            let other = "other@example.com"
            let refunded = ScenarioReceipt.transactionId()
            let lapsed = ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                ScenarioEntry("monthly", refunded, original: refunded, purchase: now - 70 * Millis.day, expires: now - 40 * Millis.day, cancelled: now - 50 * Millis.day),
                ScenarioEntry("monthly", ScenarioReceipt.transactionId(), original: refunded, purchase: now - 40 * Millis.day, expires: now - 10 * Millis.day),
            ])
            let rejected = try await harness.workUntilFinal(try await harness.submit(email: other, offerId: "MONTHLY", transactionId: refunded, receipt: lapsed))
            #expect(rejected.status == .rejected)
            #expect(rejected.reason == "refunded")
            #expect(try await harness.access("MONTHLY", email: other).granted == false)
        }
    }

    /// The refund is known to PostgreSQL (a fresher receipt's answer listed it) when a job runs on an answer
    /// Apple gave before it, naming the refunded period: as when the answer itself names it, the period
    /// still paid for grants. Known from that answer only (`cancellations`), or from the ledger too (the
    /// refunded period had been granted before).
    @Test("a submission whose answer predates a refund PostgreSQL knows of grants the period still paid for", arguments: [false, true])
    func staleAnswerNamingKnownRefund(_ grantedBefore: Bool) async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            _ = try await Self.appWithProduct(.autoRenewable, to: harness)
            let now = Millis.now
            let (first, again) = (ScenarioReceipt.transactionId(), ScenarioReceipt.transactionId())
            func receipt(refunded: Bool) -> String {
                ScenarioReceipt.make(bundleId: Self.bundle, entries: [
                    ScenarioEntry(
                        "monthly", first, original: first, purchase: now - 10 * Millis.day, expires: now + 20 * Millis.day,
                        cancelled: refunded ? now - 5 * Millis.day : nil
                    ),
                    ScenarioEntry("monthly", again, original: first, purchase: now - 1000, expires: now + 30 * Millis.day),
                ])
            }
            let (stale, fresh) = (receipt(refunded: false), receipt(refunded: true))
            if grantedBefore {
                // Naming the later period: the earlier one, counted, becomes a fulfilled ledger row too.
                #expect(try await harness.workUntilFinal(try await harness.submit(offerId: "MONTHLY", transactionId: again, receipt: stale)).status == .granted)
                #expect(try await harness.ledgerRow(first)?.state == "fulfilled")
            }
            // The fresh answer, submitted without a transaction id (a submission naming one is deduplicated by it).
            #expect(try await harness.workUntilFinal(try await harness.submit(offerId: "MONTHLY", transactionId: nil, receipt: fresh)).status == .granted)
            let jobId = try await harness.submit(offerId: "MONTHLY", transactionId: first, receipt: stale)
            let record = try await harness.workUntilFinal(jobId)
            #expect(record.status == .granted)
            #expect(record.reason == nil)
            // Read from the ledger once Redis has forgotten the job (retention), the outcome is the same.
            let kept = try await AccessStore(database: harness.database).jobOutcome(jobId: jobId, publisherId: harness.publisher.id)
            #expect(kept?.status == .granted)
            let access = try await harness.access("MONTHLY")
            #expect(access.granted)
            #expect(access.expiresAt.map(Millis.of) == now + 30 * Millis.day)
            #expect(try await harness.ledgerRow(first)?.state == "invalidated", "the refunded period grants nothing")
        }
    }

    /// Where the refund of a consumable is learnt.
    enum RefundSource: String, CaseIterable, Sendable {
        case nextPurchase, resubmission
    }

    @Test("a refunded consumable's credit is reversed by a wallet entry of its own", arguments: RefundSource.allCases)
    func consumableReversed(_ source: RefundSource) async throws {
        try await WorkerHarness.rules(Self.bundle, selling: .coins100, .premium) { harness in
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
    @Test("a consumable bought beside a subscription, listed in both of Apple's arrays, is credited once; a refund that only latest_receipt_info shows is reversed once")
    func consumableBesideSubscription() async throws {
        try await WorkerHarness.rules(Self.bundle, selling: .coins100, .monthly) { harness in
            let now = Millis.now
            let monthly = ScenarioEntry("monthly", ScenarioReceipt.transactionId(), purchase: now - Millis.day, expires: now + 29 * Millis.day)
            let coins = ScenarioReceipt.transactionId()
            let bought = ScenarioEntry("coins100", coins, purchase: now - 1000)
            // The receipt holds a subscription, so the emulator lists both purchases in latest_receipt_info too.
            let receipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: [monthly, bought])
            #expect(try await harness.workUntilFinal(try await harness.submit(offerId: "COINS100", transactionId: coins, receipt: receipt)).status == .granted)
            #expect(try await harness.balance() == 100)

            // in_app is the receipt as the device signed it, before the refund; latest_receipt_info is Apple's
            // state now.
            var refunded = bought
            refunded.cancellationDateMs = now - 500
            let refundedReceipt = ScenarioReceipt.make(
                bundleId: Self.bundle, entries: [monthly, bought], extra: ["latestReceiptInfo": [monthly, refunded].map { $0.json(numbers: false) }]
            )
            for _ in 0..<2 {
                let record = try await harness.workUntilFinal(
                    try await harness.inject(offerId: "MONTHLY", transactionId: monthly.transactionId, receipt: refundedReceipt)
                )
                #expect(record.status == .granted)
            }
            #expect(try await harness.balance() == 0)
            #expect(try await harness.walletEntries() == [
                .init(customerEmail: WorkerHarness.buyer, transactionId: coins, kind: "credit", coins: 100),
                .init(customerEmail: WorkerHarness.buyer, transactionId: coins, kind: "reversal", coins: -100),
            ])
            #expect(try await harness.ledgerRow(coins)?.state == "invalidated")
        }
    }
}
