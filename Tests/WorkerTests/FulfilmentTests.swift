import Foundation
import Logging
@testable import Shared
import Testing
import TestSupport
@testable import Worker

/// The worker's fulfilment of one job, through the real emulator, Redis and PostgreSQL.
@Suite("Fulfilment")
struct FulfilmentTests {
    static let bundle = "com.example.worker"

    @Test("a non-renewing purchase grants durationDays from the purchase")
    func nonRenewing() async throws {
        try await WorkerHarness.with { harness in
            try await harness.app(Self.bundle)
            try await harness.product(Self.bundle, productId: "pass30", offerId: "PASS30", kind: .nonRenewing, days: 30)
            let purchase = Int64(WallClock.nowMilliseconds()) - 86_400_000
            let transaction = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(bundleId: Self.bundle, purchases: [.init(productId: "pass30", transactionId: transaction, purchaseDateMs: purchase)])
            let job = try await harness.submit(offerId: "PASS30", transactionId: transaction, receipt: receipt)
            let record = try await harness.workUntilFinal(job)
            #expect(record.status == .granted)
            #expect(record.environment == "Production")
            #expect(record.expiresAt == Int(purchase / 1000) + 30 * 86_400)
            let access = try await AccessStore(database: harness.database).access(publisherId: harness.publisher.id, customerEmail: "buyer@example.com", offerId: "PASS30")
            #expect(access.granted)
        }
    }

    @Test("a job whose payload this version cannot read is dead-lettered internal: not dropped, not put back, no longer pending")
    func unreadablePayload() async throws {
        try await WorkerHarness.with { harness in
            let job = try await Self.submitPass(harness)
            // What a newer API could write: an app type this version does not know.
            let key = harness.queue.keys.job(job)
            let payload = try #require(try await harness.redis.send("HGET", key, "payload").string)
            let newer = payload.replacingOccurrences(of: #""appType":"ios""#, with: #""appType":"visionos""#)
            try #require(newer != payload)
            try await harness.redis.send("HSET", key, "payload", newer)

            try await Self.expectDeadLetteredInternal(job, saying: "unreadable payload", harness)
            // Nothing is left for the restore to put back on the stream.
            #expect(try await harness.queue.restoreLost(olderThan: WallClock.nowMilliseconds() + 1, now: WallClock.nowMilliseconds()) == 0)
            #expect(try await harness.redis.send("XLEN", harness.queue.keys.stream).int == 0)
        }
    }

    /// Submits a purchase of the 30-day pass for buyer@example.com, with no worker running; returns its job id.
    static func submitPass(_ harness: WorkerHarness) async throws -> String {
        let transaction = ScenarioReceipt.transactionId()
        return try await harness.submit(offerId: "PASS30", transactionId: transaction, receipt: ScenarioReceipt.make(
            bundleId: Self.bundle, purchases: [.init(productId: "pass30", transactionId: transaction)]
        ))
    }

    /// Works `job` until it is final, and checks that it ended `failed` `internal`, in the dead letters with a detail
    /// saying `detail`, and no longer pending for its customer.
    static func expectDeadLetteredInternal(_ job: String, saying detail: String, _ harness: WorkerHarness) async throws {
        let record = try await harness.workUntilFinal(job)
        #expect(record.status == .failed)
        #expect(record.reason == "internal")
        let letter = try #require(try await harness.queue.deadLetters(limit: 10).deadLetters.first { $0.jobId == job })
        #expect(letter.detail.contains(detail))
        #expect(try await !harness.queue.hasPendingJob(publisherId: harness.publisher.id, customerEmail: "buyer@example.com", offerId: "PASS30"))
    }

    @Test("a job whose status lost its receipt is dead-lettered internal, not put back on the stream for good")
    func statusWithoutReceipt() async throws {
        try await WorkerHarness.with { harness in
            let lost = try await Self.submitPass(harness)
            // What an edit by hand could leave: a status without its receipt.
            try await harness.redis.send("HDEL", harness.queue.keys.job(lost), "payload")
            try await Self.expectDeadLetteredInternal(lost, saying: "receipt is missing", harness)

            // Nothing is left for the restore to put back on the stream (before: the job, every scan).
            #expect(try await harness.queue.restoreLost(olderThan: WallClock.nowMilliseconds() + 1, now: WallClock.nowMilliseconds()) == 0)
            #expect(try await harness.redis.send("XLEN", harness.queue.keys.stream).int == 0)
        }
    }

    @Test("a sandbox receipt is asked again at the sandbox URL (21007) and granted there")
    func sandboxRedirect() async throws {
        let record = try await Self.sandboxPurchase(allowSandbox: true)
        #expect(record.status == .granted)
        #expect(record.environment == "Sandbox")
    }

    @Test("a sandbox receipt for an app that does not allow sandbox is rejected sandbox_not_allowed")
    func sandboxNotAllowed() async throws {
        let record = try await Self.sandboxPurchase(allowSandbox: false)
        #expect(record.status == .rejected)
        #expect(record.reason == "sandbox_not_allowed")
    }

    @Test("an app and product created after the worker cached the catalog are found, not rejected")
    func catalogChangedSinceCached() async throws {
        try await WorkerHarness.with { harness in
            try await harness.app(Self.bundle)
            try await harness.product(Self.bundle, productId: "premium", offerId: "PREMIUM", kind: .nonConsumable)
            #expect(try await harness.purchase(Self.bundle, productId: "premium", offerId: "PREMIUM").status == .granted)

            // Within the cache's lifetime: a new product of the same app, then a new app with its product.
            try await harness.product(Self.bundle, productId: "extra", offerId: "EXTRA", kind: .nonConsumable)
            #expect(try await harness.purchase(Self.bundle, productId: "extra", offerId: "EXTRA").status == .granted)
            try await harness.app("com.example.tvos")
            try await harness.product("com.example.tvos", productId: "tv.premium", offerId: "PREMIUM", kind: .nonConsumable)
            let before = try await harness.emulatorStats().production
            #expect(try await harness.purchase("com.example.tvos", productId: "tv.premium", offerId: "PREMIUM", email: "tv@example.com").status == .granted)
            // Decided again on the same answer: Apple was asked once.
            #expect(try await harness.emulatorStats().production == before + 1)
        }
    }

    @Test("an expired catalog entry is refreshed by one job while the others go on with it, not asked of PostgreSQL by each")
    func catalogRefreshedByOneJob() async throws {
        let cache: ExpiringCache<UUID, Int> = Fulfiller.catalogCache()
        let publisher = UUID()
        let second: UInt64 = 1_000_000_000
        #expect(await cache.value(for: publisher, now: 0) { 1 } == 1)
        #expect(await cache.value(for: publisher, now: 4 * second) { 2 } == 1, "within its 5 s")
        let (released, release) = AsyncStream.makeStream(of: Void.self)
        let (began, started) = AsyncStream.makeStream(of: Void.self)
        // One job's refresh, waiting for a pooled connection as under load.
        let refresh = Task {
            await cache.value(for: publisher, now: 6 * second) {
                started.yield()
                for await _ in released { break }
                return 3
            }
        }
        for await _ in began { break }
        var loads = 0
        for job in 0..<100 {
            let catalog = await cache.value(for: publisher, now: 6 * second + UInt64(job)) {
                loads += 1
                return 4
            }
            #expect(catalog == 1, "the jobs in flight go on with the entry being refreshed")
        }
        #expect(loads == 0, "only the refreshing job asks PostgreSQL")
        release.yield()
        #expect(await refresh.value == 3)
        #expect(await cache.value(for: publisher, now: 7 * second) { 5 } == 3, "the refreshed catalog, fresh")
    }

    @Test("an app added to an offer after the worker cached the catalog: its sandbox receipt and its own shared secret are tried, not refused on the cached apps")
    func offerAppAddedSinceCached() async throws {
        try await WorkerHarness.with { harness in
            try await harness.app(Self.bundle, sharedSecret: "phone-secret", allowSandbox: false)
            try await harness.product(Self.bundle, productId: "premium", offerId: "PREMIUM", kind: .nonConsumable)
            let warm = try await harness.purchase(Self.bundle, productId: "premium", offerId: "PREMIUM", extra: ["sharedSecret": "phone-secret"])
            #expect(warm.status == .granted, "\(warm.reason ?? "")")

            // Within the cache's lifetime, a second app selling the offer: sandbox allowed, a secret of its own.
            try await harness.app("com.example.tvos", sharedSecret: "tv-secret", allowSandbox: true)
            try await harness.product("com.example.tvos", productId: "tv.premium", offerId: "PREMIUM", kind: .nonConsumable)

            let tested = ScenarioReceipt.transactionId()
            let sandboxReceipt = ScenarioReceipt.make(
                bundleId: "com.example.tvos", purchases: [.init(productId: "tv.premium", transactionId: tested)], environment: "Sandbox"
            )
            let sandbox = try await harness.workUntilFinal(
                try await harness.submit(email: "tester@example.com", offerId: "PREMIUM", transactionId: tested, receipt: sandboxReceipt)
            )
            #expect(sandbox.status == .granted, "\(sandbox.reason ?? "")")
            #expect(sandbox.environment == "Sandbox")

            let bought = try await harness.purchase(
                "com.example.tvos", productId: "tv.premium", offerId: "PREMIUM", email: "tv@example.com", extra: ["sharedSecret": "tv-secret"]
            )
            #expect(bought.status == .granted, "\(bought.reason ?? "")")
            #expect(try await harness.queue.deadLetters(limit: 10).deadLetters.isEmpty)
        }
    }

    @Test(
        "an offer sold in two apps, one app's product disabled: a job accepted since is rejected offer_mismatch, even after a later edit of the product; one accepted before is granted"
    )
    func productDisabledInOneApp() async throws {
        try await WorkerHarness.with { harness in
            try await harness.app(Self.bundle)
            try await harness.product(Self.bundle, productId: "premium", offerId: "PREMIUM", kind: .nonConsumable)
            try await harness.app("com.example.tvos")
            let tv = try await harness.product("com.example.tvos", productId: "tv.premium", offerId: "PREMIUM", kind: .nonConsumable)
            func receipt(_ transaction: String) -> String {
                ScenarioReceipt.make(bundleId: "com.example.tvos", purchases: [.init(productId: "tv.premium", transactionId: transaction)])
            }
            let early = ScenarioReceipt.transactionId()
            let before = try await harness.submit(email: "early@example.com", offerId: "PREMIUM", transactionId: early, receipt: receipt(early))

            let disabled = try await harness.catalog.updateProduct(id: tv.id, ProductPatch(enabled: false))
            let disabledAt = try #require(disabled.disabledAt)
            // Accepted strictly after the change, at the milliseconds jobs are stamped with.
            _ = try await Poll.until(timeout: .seconds(5), interval: .milliseconds(1), "the clock past the change") {
                Double(WallClock.nowMilliseconds()) / 1000 > disabledAt.timeIntervalSince1970 + 0.001 ? true : nil
            }
            let late = ScenarioReceipt.transactionId()
            let after = try await harness.submit(email: "late@example.com", offerId: "PREMIUM", transactionId: late, receipt: receipt(late))
            // An edit after that job was accepted (a new title, the product still disabled) must not put it back on sale for it.
            let submitted = WallClock.nowMilliseconds()
            _ = try await Poll.until(timeout: .seconds(5), interval: .milliseconds(1), "the clock past the submission") {
                WallClock.nowMilliseconds() > submitted + 2 ? true : nil
            }
            let renamed = try await harness.catalog.updateProduct(id: tv.id, ProductPatch(title: "Premium on TV"))
            #expect(renamed.disabledAt == disabledAt)
            #expect(renamed.updatedAt > disabledAt)

            #expect(try await harness.workUntilFinal(before).status == .granted, "paid while the product was on sale")
            let refused = try await harness.workUntilFinal(after)
            #expect(refused.status == .rejected)
            #expect(refused.reason == "offer_mismatch")
            #expect(try await harness.database.query(
                "SELECT count(*) AS n FROM entitlements WHERE customer_email = 'late@example.com'"
            ).first?.decode(Int.self, "n") == 0)
        }
    }

    @Test("a product disabled by a binary from before migration 9 (no disabled_at): a job accepted before its last change is still granted")
    func productDisabledByAnOlderBinary() async throws {
        try await WorkerHarness.with { harness in
            try await harness.app(Self.bundle)
            let premium = try await harness.product(Self.bundle, productId: "premium", offerId: "PREMIUM", kind: .nonConsumable)
            let transaction = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(bundleId: Self.bundle, purchases: [.init(productId: "premium", transactionId: transaction)])
            let job = try await harness.submit(offerId: "PREMIUM", transactionId: transaction, receipt: receipt)
            let submitted = WallClock.nowMilliseconds()
            _ = try await Poll.until(timeout: .seconds(5), interval: .milliseconds(1), "the clock past the submission") {
                WallClock.nowMilliseconds() > submitted + 2 ? true : nil
            }
            // What an API from before migration 9 wrote on a disable, during a rolling upgrade.
            try await harness.database.query("UPDATE products SET enabled = false, updated_at = now() WHERE id = $1", [premium.id])
            #expect(try await harness.workUntilFinal(job).status == .granted, "paid while the product was on sale")
        }
    }

    @Test("a product a newer binary disabled, then an older one (no disabled_at) enabled and disabled again: a job accepted while it was back on sale is granted")
    func productFlippedByMixedBinaries() async throws {
        try await WorkerHarness.with { harness in
            try await harness.app(Self.bundle)
            let premium = try await harness.product(Self.bundle, productId: "premium", offerId: "PREMIUM", kind: .nonConsumable)
            func clockPast(_ instant: Int) async throws {
                _ = try await Poll.until(timeout: .seconds(5), interval: .milliseconds(1), "the clock past \(instant)") {
                    WallClock.nowMilliseconds() > instant + 2 ? true : nil
                }
            }
            // This build disables it; an API from before migration 9 enables it again, as it wrote an enable.
            try await harness.database.query("UPDATE products SET enabled = false, disabled_at = now(), updated_at = now() WHERE id = $1", [premium.id])
            try await clockPast(WallClock.nowMilliseconds())
            try await harness.database.query("UPDATE products SET enabled = true, updated_at = now() WHERE id = $1", [premium.id])
            let transaction = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(bundleId: Self.bundle, purchases: [.init(productId: "premium", transactionId: transaction)])
            let job = try await harness.submit(offerId: "PREMIUM", transactionId: transaction, receipt: receipt)
            try await clockPast(WallClock.nowMilliseconds())
            // The older API disables it again.
            try await harness.database.query("UPDATE products SET enabled = false, updated_at = now() WHERE id = $1", [premium.id])
            #expect(try await harness.workUntilFinal(job).status == .granted, "paid while the product was on sale")
        }
    }

    /// The app `bundle` with `sharedSecret`, selling the non-consumable `premium` (offer PREMIUM).
    static func premium(_ harness: WorkerHarness, sharedSecret: String) async throws {
        try await harness.app(Self.bundle, sharedSecret: sharedSecret)
        try await harness.product(Self.bundle, productId: "premium", offerId: "PREMIUM", kind: .nonConsumable)
    }

    /// A new purchase of `premium` whose verification Apple answers only with `sharedSecret` (else 21004).
    static func premiumReceipt(sharedSecret: String) -> (transactionId: String, receipt: String) {
        let transaction = ScenarioReceipt.transactionId()
        let receipt = ScenarioReceipt.make(
            bundleId: Self.bundle, purchases: [.init(productId: "premium", transactionId: transaction)], extra: ["sharedSecret": sharedSecret]
        )
        return (transaction, receipt)
    }

    /// Submits a new purchase of `premium` (``premiumReceipt(sharedSecret:)``) for `email`; returns the job id.
    static func submitPremium(_ harness: WorkerHarness, sharedSecret: String, email: String = "buyer@example.com") async throws -> String {
        let (transaction, receipt) = Self.premiumReceipt(sharedSecret: sharedSecret)
        return try await harness.submit(email: email, offerId: "PREMIUM", transactionId: transaction, receipt: receipt)
    }

    @Test("after PostgreSQL was away, the trial (one job at a time) ends only on a job that wrote to it, not on one that ended without writing")
    func trialEndsOnAWrite() async throws {
        try await WorkerHarness.with { harness in
            try await Self.premium(harness, sharedSecret: "secret")
            let fulfiller = harness.emulatorFulfiller()
            let watch = fulfiller.database
            let logger = Logger(label: "test.worker")
            // A full disk: PostgreSQL answers the probe, so a trial opens.
            watch.note(PostgresError(.server, sqlState: "53100", "could not extend file: No space left on device"))
            #expect(await watch.untilBack(harness.database, logger: logger, stopping: { false }))
            #expect(watch.isOnTrial)

            func job(_ submission: (transactionId: String, receipt: String)) -> ReceiptJob {
                ReceiptJob(
                    jobId: UUID().uuidString.lowercased(), publisherId: harness.publisher.id, customerEmail: "buyer@example.com",
                    offerId: "PREMIUM", transactionId: submission.transactionId, receiptData: submission.receipt, appType: .ios,
                    ipAddress: nil, acceptedAtMilliseconds: WallClock.nowMilliseconds()
                )
            }
            // Apple answers 21004 (another app's secret): final, and nothing was written.
            guard case .failed(.sharedSecretMismatch, _) = await fulfiller.fulfil(job(Self.premiumReceipt(sharedSecret: "other")), logger: logger) else {
                Issue.record("not refused for its shared secret")
                return
            }
            #expect(watch.isOnTrial, "a job that wrote nothing says nothing of the disk")
            guard case .granted = await fulfiller.fulfil(job(Self.premiumReceipt(sharedSecret: "secret")), logger: logger) else {
                Issue.record("not granted")
                return
            }
            #expect(!watch.isOnTrial && !watch.isAway, "the grant's commit ends the trial")
        }
    }

    @Test("a job that failed though its grant committed, requeued: its first attempt finds the grant, whatever Apple answers now")
    func requeuedAfterCommittedGrant() async throws {
        try await WorkerHarness.with { harness in
            try await Self.premium(harness, sharedSecret: "first-secret")
            let jobId = try await Self.submitPremium(harness, sharedSecret: "first-secret")
            // The last attempt committed the grant, and its COMMIT's answer was lost: the job was dead-lettered.
            let delivery = try #require(try await harness.queue.readNew(consumer: "test", count: 1, blockMilliseconds: 100, blockingClient: harness.redis).first)
            guard case .ready(let job, _, _, _) = try await harness.queue.start(delivery, now: WallClock.nowMilliseconds(), maxStarts: 10) else {
                Issue.record("the job did not start")
                return
            }
            guard case .granted = await harness.emulatorFulfiller().fulfil(job, logger: Logger(label: "test.worker")) else {
                Issue.record("not granted")
                return
            }
            try await harness.queue.deadLetter(delivery, job: job, reason: .internal, detail: "commit unknown", now: WallClock.nowMilliseconds(), retentionSeconds: 3600)
            // Since then the app's shared secret no longer matches: Apple answers 21004, a final failure.
            try await harness.database.query("UPDATE apps SET shared_secret = 'second-secret' WHERE bundle_id = $1", [Self.bundle])

            let requeued = try await harness.queue.requeue(
                jobId: jobId, publisherId: job.publisherId, customerEmail: job.customerEmail, offerId: job.offerId,
                now: WallClock.nowMilliseconds() + 1, keyTTLSeconds: 3600
            )
            #expect(requeued == .requeued)
            let record = try await harness.workUntilFinal(jobId)
            #expect(record.status == .granted, "\(record.reason ?? "")")
            #expect(record.attempts == 1)
        }
    }

    enum Mismatch: String, CaseIterable, Sendable {
        case bundle, transaction, offer
    }

    @Test("the answer must name the publisher's bundle, the submitted transaction and a product of the offer", arguments: Mismatch.allCases)
    func mismatches(_ mismatch: Mismatch) async throws {
        try await WorkerHarness.with { harness in
            try await harness.app(Self.bundle)
            try await harness.product(Self.bundle, productId: "premium", offerId: "PREMIUM", kind: .nonConsumable)
            try await harness.product(Self.bundle, productId: "other", offerId: "OTHER", kind: .nonConsumable)
            let transaction = ScenarioReceipt.transactionId()
            let bundle = mismatch == .bundle ? "com.someone.else" : Self.bundle
            let product = mismatch == .offer ? "other" : "premium"
            let receipt = ScenarioReceipt.make(bundleId: bundle, purchases: [.init(productId: product, transactionId: transaction)])
            let submitted = mismatch == .transaction ? ScenarioReceipt.transactionId() : transaction
            let record = try await harness.workUntilFinal(try await harness.submit(offerId: "PREMIUM", transactionId: submitted, receipt: receipt))
            #expect(record.status == .rejected)
            let expected = ["bundle": "bundle_mismatch", "transaction": "transaction_not_found", "offer": "offer_mismatch"][mismatch.rawValue]
            #expect(record.reason == expected)
            #expect(try await harness.database.query("SELECT count(*) AS n FROM entitlements").first?.decode(Int.self, "n") == 0)
        }
    }

    @Test("bundle IDs are case-insensitive at Apple: an app registered as com.Example.Worker is the receipt's com.example.worker")
    func bundleCase() async throws {
        try await WorkerHarness.with { harness in
            try await harness.app("com.Example.Worker")
            try await harness.product("com.Example.Worker", productId: "premium", offerId: "PREMIUM", kind: .nonConsumable)
            let transaction = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(bundleId: Self.bundle, purchases: [.init(productId: "premium", transactionId: transaction)])
            let record = try await harness.workUntilFinal(try await harness.submit(offerId: "PREMIUM", transactionId: transaction, receipt: receipt))
            #expect(record.status == .granted, "\(record.reason ?? "")")
            #expect(try await harness.access("PREMIUM").granted)
        }
    }

    @Test("without a transactionId, the newest purchase of the offer not refunded is granted: an older one still paid for is credited")
    func newestPaidPurchase() async throws {
        try await WorkerHarness.with { harness in
            try await harness.app(Self.bundle)
            try await harness.product(Self.bundle, productId: "coins", offerId: "COINS", kind: .consumable, coins: 50)
            let now = Int64(WallClock.nowMilliseconds())
            let (older, newer) = (ScenarioReceipt.transactionId(), ScenarioReceipt.transactionId())
            let receipt = ScenarioReceipt.make(bundleId: Self.bundle, purchases: [
                .init(productId: "coins", transactionId: older, purchaseDateMs: now - 2 * 86_400_000),
                .init(productId: "coins", transactionId: newer, purchaseDateMs: now - 86_400_000, cancellationDateMs: now - 3_600_000),
            ])
            let record = try await harness.workUntilFinal(try await harness.submit(offerId: "COINS", transactionId: nil, receipt: receipt))
            #expect(record.status == .granted, "\(record.reason ?? "")")
            #expect(try await harness.balance() == 50)
            #expect(try await harness.ledgerRow(older)?.state == "fulfilled")

            // Every purchase refunded: the newest one answers.
            let refunded = ScenarioReceipt.transactionId()
            let allRefunded = ScenarioReceipt.make(bundleId: Self.bundle, purchases: [
                .init(productId: "coins", transactionId: refunded, purchaseDateMs: now - 86_400_000, cancellationDateMs: now - 3_600_000),
            ])
            let second = try await harness.workUntilFinal(try await harness.submit(offerId: "COINS", transactionId: nil, receipt: allRefunded))
            #expect(second.status == .rejected)
            #expect(second.reason == "refunded")
        }
    }

    @Test("Apple failing (HTTP 503) puts the job in retrying with a due time; it is granted on a later attempt")
    func retryThenGrant() async throws {
        try await WorkerHarness.with { harness in
            try await harness.app(Self.bundle)
            try await harness.product(Self.bundle, productId: "coins", offerId: "COINS", kind: .consumable, coins: 50)
            let transaction = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(
                bundleId: Self.bundle, purchases: [.init(productId: "coins", transactionId: transaction)],
                extra: ["fail": ["count": 2, "mode": "http503"]]
            )
            let job = try await harness.submit(offerId: "COINS", transactionId: transaction, receipt: receipt)
            try await harness.work()
            let retrying = try #require(try await harness.queue.record(jobId: job))
            #expect(retrying.status == .retrying)
            #expect(retrying.attempts == 1)
            #expect(retrying.reason == "apple_unavailable")
            #expect(retrying.nextAttemptAtMilliseconds != nil)
            let record = try await harness.workUntilFinal(job)
            #expect(record.status == .granted)
            #expect(record.attempts == 3)
            #expect(try await AccessStore(database: harness.database).coinBalance(publisherId: harness.publisher.id, customerEmail: "buyer@example.com") == 50)
        }
    }

    @Test("a wrong shared secret (21004) fails at once and is dead-lettered; the right one is sent as password")
    func sharedSecret() async throws {
        try await WorkerHarness.with { harness in
            try await Self.premium(harness, sharedSecret: "right-secret")
            #expect(try await harness.workUntilFinal(try await Self.submitPremium(harness, sharedSecret: "right-secret")).status == .granted)

            let job = try await Self.submitPremium(harness, sharedSecret: "another-secret", email: "second@example.com")
            let record = try await harness.workUntilFinal(job)
            #expect(record.status == .failed)
            #expect(record.reason == "shared_secret_mismatch")
            #expect(record.attempts == 1)
            #expect(try await harness.queue.deadLetters(limit: 10).deadLetters.map(\.jobId) == [job])
        }
    }

    @Test("a wrong shared secret put right in the catalog: the dead-lettered job, requeued, is granted")
    func sharedSecretPutRight() async throws {
        try await WorkerHarness.with { harness in
            try await Self.premium(harness, sharedSecret: "wrong-secret")
            let job = try await Self.submitPremium(harness, sharedSecret: "right-secret")
            #expect(try await harness.workUntilFinal(job).reason == "shared_secret_mismatch")

            let app = try await harness.catalog.updateApp(
                publisherId: harness.publisher.id, bundleId: Self.bundle.uppercased(), sharedSecret: .some("right-secret"), allowSandbox: nil
            )
            #expect(app?.sharedSecret == "right-secret")
            // The worker's app cache holds the old secret up to 5 s (README): an operator's requeue within them fails
            // again, one after them is granted. Requeued whenever it is failed, until it is granted.
            let changed = ContinuousClock.now
            _ = try await Poll.until(timeout: .seconds(40), interval: .milliseconds(250), "the requeued job granted with the new secret") {
                let record = try #require(try await harness.queue.record(jobId: job))
                if record.status == .granted { return true }
                if record.status == .failed {
                    let requeued = try await harness.queue.requeue(
                        jobId: job, publisherId: harness.publisher.id, customerEmail: record.customerEmail, offerId: record.offerId,
                        now: WallClock.nowMilliseconds(), keyTTLSeconds: 3600
                    )
                    #expect(requeued == .requeued)
                }
                try await harness.queue.promoteDue(now: WallClock.nowMilliseconds())
                try await harness.work()
                return nil
            }
            // The rest past 5 s is a loaded machine's room: what this catches is a cache kept far longer.
            #expect(ContinuousClock.now - changed < .seconds(25), "the worker used the new secret within its cache's 5 s")
        }
    }

    @Test("attempts past the limit dead-letter the job as failed apple_unavailable")
    func exhaustedRetries() async throws {
        try await WorkerHarness.with(retry: RetryPolicy(baseMilliseconds: 5, maxDelayMilliseconds: 10, maxAttempts: 3, maxAgeSeconds: 3600)) { harness in
            try await harness.app(Self.bundle)
            try await harness.product(Self.bundle, productId: "premium", offerId: "PREMIUM", kind: .nonConsumable)
            let transaction = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(
                bundleId: Self.bundle, purchases: [.init(productId: "premium", transactionId: transaction)],
                extra: ["fail": ["count": 100, "mode": "http500"]]
            )
            let record = try await harness.workUntilFinal(try await harness.submit(offerId: "PREMIUM", transactionId: transaction, receipt: receipt))
            #expect(record.status == .failed)
            #expect(record.reason == "apple_unavailable")
            #expect(record.attempts == 3)
        }
    }

    /// A sandbox receipt for a non-consumable, worked until its job is final.
    static func sandboxPurchase(allowSandbox: Bool) async throws -> JobRecord {
        var record: JobRecord?
        try await WorkerHarness.with { harness in
            try await harness.app(Self.bundle, allowSandbox: allowSandbox)
            try await harness.product(Self.bundle, productId: "premium", offerId: "PREMIUM", kind: .nonConsumable)
            let transaction = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(bundleId: Self.bundle, purchases: [.init(productId: "premium", transactionId: transaction)], environment: "Sandbox")
            record = try await harness.workUntilFinal(try await harness.submit(offerId: "PREMIUM", transactionId: transaction, receipt: receipt))
        }
        return try #require(record)
    }
}
