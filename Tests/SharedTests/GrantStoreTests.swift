import Foundation
import Testing
import TestSupport
@testable import Shared

extension GrantOutcome {
    var isGranted: Bool {
        if case .granted = self { return true }
        return false
    }
}

@Suite("GrantStore, CatalogStore and AccessStore against a real PostgreSQL")
struct GrantStoreTests {
    static let day: TimeInterval = 86_400

    /// A publisher with one app and one product of each kind, on a fresh database.
    struct World {
        let database: PostgresClient
        let grants: GrantStore
        let access: AccessStore
        let catalog: CatalogStore
        let publisher: Publisher
        let app: App
        let coins: Product
        let lifetime: Product
        let pass: Product
        let subscription: Product

        /// A job with a receipt of its own, so that a ledger row's digest tells which job brought it in.
        func job(_ customer: String, _ product: Product, transactionId: String) -> ReceiptJob {
            Fixtures.job(
                publisherId: self.publisher.id, customerEmail: customer, offerId: product.offerId, transactionId: transactionId,
                receiptData: Data("receipt \(UUID())".utf8).base64EncodedString()
            )
        }

        func request(
            _ customer: String, _ product: Product, _ transaction: AppleTransaction, renewals: [AppleTransaction] = [],
            grace: Int64? = nil, verifiedAt: Date = Date()
        ) -> GrantRequest {
            GrantRequest(
                job: self.job(customer, product, transactionId: transaction.transactionId), app: self.app, product: product,
                transaction: transaction, renewals: renewals, gracePeriodEndMilliseconds: grace, environment: "Production",
                verifiedAt: verifiedAt
            )
        }

        func balance(_ customer: String) async throws -> Int {
            try await self.access.coinBalance(publisherId: self.publisher.id, customerEmail: customer)
        }

        func access(_ customer: String, _ product: Product) async throws -> (granted: Bool, expiresAt: Date?) {
            try await self.access.access(publisherId: self.publisher.id, customerEmail: customer, offerId: product.offerId)
        }

        func ledger(_ transactionId: String) async throws -> [String] {
            try await self.database.query("SELECT state FROM transactions WHERE transaction_id = $1", [transactionId])
                .rows.map { try $0.decode(String.self, "state") }
        }

        /// A ledger row's dates, in Unix milliseconds.
        func periodDates(_ transactionId: String) async throws -> [(purchased: Int64?, expires: Int64?, grantedUntil: Int64?)] {
            try await self.database.query(
                "SELECT purchase_date, expires_date, granted_until FROM transactions WHERE transaction_id = $1", [transactionId]
            ).rows.map { row in
                let milliseconds = { (column: String) in try row.decode(Date?.self, column).map(GrantStoreTests.ms) }
                return (try milliseconds("purchase_date"), try milliseconds("expires_date"), try milliseconds("granted_until"))
            }
        }

        /// The receipt digests a transaction's ledger rows keep.
        func receiptDigests(_ transactionId: String) async throws -> [String?] {
            try await self.database.query("SELECT receipt_digest FROM transactions WHERE transaction_id = $1", [transactionId])
                .rows.map { try $0.decode(String?.self, "receipt_digest") }
        }

        func walletEntries(_ customer: String) async throws -> [(kind: String, coins: Int)] {
            try await self.database.query(
                "SELECT kind, coins FROM wallet_entries WHERE customer_email = $1 ORDER BY id", [customer]
            ).rows.map { (try $0.decode(String.self, "kind"), try $0.decode(Int.self, "coins")) }
        }
    }

    static func withWorld<T>(connections: Int = 4, _ body: (World) async throws -> T) async throws -> T {
        try await TestDatabase.withFresh(connections: connections) { database, _ in
            let catalog = CatalogStore(database: database)
            let (publisher, _) = try await catalog.createPublisher(name: "Publisher \(Fixtures.suffix(3))")
            let app = try await catalog.createApp(publisherId: publisher.id, bundleId: "com.example.tv", sharedSecret: "s3cret", allowSandbox: true)
            func product(_ productId: String, _ kind: ProductKind, coins: Int? = nil, days: Int? = nil) async throws -> Product {
                try await catalog.createProduct(ProductDraft(
                    publisherId: publisher.id, bundleId: app.bundleId, productId: productId, offerId: nil, kind: kind,
                    title: productId, description: nil, coins: coins, durationDays: days, enabled: true
                ))
            }
            let world = World(
                database: database, grants: GrantStore(database: database), access: AccessStore(database: database), catalog: catalog,
                publisher: publisher, app: app,
                coins: try await product("coins.100", .consumable, coins: 100),
                lifetime: try await product("premium.lifetime", .nonConsumable),
                pass: try await product("pass.30days", .nonRenewing, days: 30),
                subscription: try await product("sub.monthly", .autoRenewable)
            )
            return try await body(world)
        }
    }

    static func ms(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }

    static func close(_ a: Date?, _ b: Date?, within seconds: TimeInterval = 0.001) -> Bool {
        guard let a, let b else { return a == nil && b == nil }
        return abs(a.timeIntervalSince(b)) <= seconds
    }

    @Test("CatalogStore creates a publisher, an app and products; offerId defaults to productId")
    func catalog() async throws {
        try await Self.withWorld { world in
            let products = try await world.catalog.products(publisherId: world.publisher.id)
            #expect(products.count == 4)
            #expect(Set(products.map(\.kind)) == Set(ProductKind.allCases))
            #expect(world.coins.offerId == "coins.100")
            #expect(world.coins.coins == 100)
            #expect(world.pass.durationDays == 30)
            #expect(world.coins.bundleId == "com.example.tv")
            #expect(try await world.catalog.product(id: world.coins.id) == world.coins)
            #expect(try await world.catalog.products(publisherId: world.publisher.id, offerId: "sub.monthly") == [world.subscription])
            #expect(try await world.catalog.apps(publisherId: world.publisher.id) == [world.app])
            await #expect(throws: CatalogError.conflict("bundleId")) {
                _ = try await world.catalog.createApp(publisherId: world.publisher.id, bundleId: "com.example.tv", sharedSecret: nil, allowSandbox: false)
            }
            await #expect(throws: CatalogError.unknownPublisher) {
                _ = try await world.catalog.createApp(publisherId: UUID(), bundleId: "x", sharedSecret: nil, allowSandbox: false)
            }
            // A product of an app not registered yet creates the app; registering it then sets its settings, once.
            let early = try await world.catalog.createProduct(ProductDraft(
                publisherId: world.publisher.id, bundleId: "com.example.later", productId: "p", offerId: nil, kind: .nonConsumable,
                title: "t", description: nil, coins: nil, durationDays: nil, enabled: true
            ))
            let registered = try await world.catalog.createApp(publisherId: world.publisher.id, bundleId: "com.example.later", sharedSecret: "s", allowSandbox: false)
            #expect(registered.id == early.appId)
            #expect(try await world.catalog.apps(publisherId: world.publisher.id).last == registered)
            await #expect(throws: CatalogError.conflict("bundleId")) {
                _ = try await world.catalog.createApp(publisherId: world.publisher.id, bundleId: "com.example.later", sharedSecret: nil, allowSandbox: true)
            }
            let disabled = try await world.catalog.updateProduct(id: world.coins.id, ProductPatch(enabled: false))
            #expect(disabled.enabled == false)
            #expect(disabled.coins == 100)
        }
    }

    /// Apple's bundle ids, and the worker's matching of a receipt's `bundle_id`, are case-insensitive: one
    /// more app for another case of the same id would let a receipt granted through the first be matched to
    /// the second (an exact match wins) and granted again there, its coins credited twice.
    @Test("a bundle id in another case names the same app: a product joins it, registering it again is a conflict, registering an early one renames it")
    func bundleIdsIgnoreCase() async throws {
        try await Self.withWorld { world in
            let product = try await world.catalog.createProduct(ProductDraft(
                publisherId: world.publisher.id, bundleId: "com.Example.TV", productId: "coins.500", offerId: nil, kind: .consumable,
                title: "t", description: nil, coins: 500, durationDays: nil, enabled: true
            ))
            #expect(product.appId == world.app.id)
            #expect(product.bundleId == "com.example.tv")
            await #expect(throws: CatalogError.conflict("bundleId")) {
                _ = try await world.catalog.createApp(publisherId: world.publisher.id, bundleId: "COM.EXAMPLE.TV", sharedSecret: nil, allowSandbox: false)
            }
            let early = try await world.catalog.createProduct(ProductDraft(
                publisherId: world.publisher.id, bundleId: "com.example.radio", productId: "p", offerId: nil, kind: .nonConsumable,
                title: "t", description: nil, coins: nil, durationDays: nil, enabled: true
            ))
            let registered = try await world.catalog.createApp(publisherId: world.publisher.id, bundleId: "com.Example.Radio", sharedSecret: "s", allowSandbox: false)
            #expect(registered.id == early.appId)
            #expect(try await world.catalog.product(id: early.id)?.bundleId == "com.Example.Radio")
            #expect(try await world.catalog.apps(publisherId: world.publisher.id).map(\.bundleId) == ["com.example.tv", "com.Example.Radio"])
        }
    }

    @Test("a consumable granted twice for the same transaction credits the wallet once")
    func consumableOnce() async throws {
        try await Self.withWorld { world in
            let transaction = AppleTransaction(productId: "coins.100", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(Date()))
            let first = try await world.grants.grant(world.request("a@example.com", world.coins, transaction))
            let second = try await world.grants.grant(world.request("a@example.com", world.coins, transaction))
            #expect(first == .granted(expiresAt: nil))
            #expect(second == .granted(expiresAt: nil))
            #expect(try await world.balance("a@example.com") == 100)
            #expect(try await world.ledger(transaction.transactionId) == ["fulfilled"])
            #expect(try await world.walletEntries("a@example.com").map(\.coins) == [100])
            // Another transaction credits again.
            let other = AppleTransaction(productId: "coins.100", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(Date()))
            _ = try await world.grants.grant(world.request("a@example.com", world.coins, other))
            #expect(try await world.balance("a@example.com") == 200)
        }
    }

    @Test("a lapsed subscription another job granted is expired for a new job, but still granted for a job that granted it itself")
    func lapsedForOthersOnly() async throws {
        try await Self.withWorld { world in
            let now = Date()
            let paid = try #require(Self.subscription(now, endingInDays: 10).first)
            #expect(try await world.grants.grant(world.request("a@example.com", world.subscription, paid)).isGranted)
            // A second job grants it on the first job's ledger row.
            let second = world.request("a@example.com", world.subscription, paid)
            #expect(try await world.grants.grant(second).isGranted)

            // It lapses unrenewed.
            let ended = now.addingTimeInterval(-Self.day)
            try await world.database.query("UPDATE entitlements SET expires_at = $1", [ended])
            let lapsed = Self.period(paid.originalTransactionId, paid.transactionId, ends: ended)
            let third = try await world.grants.grant(world.request("a@example.com", world.subscription, lapsed))
            guard case .expired(let end) = third else {
                Issue.record("a new job for the lapsed subscription: \(third)")
                return
            }
            #expect(Self.close(end, ended))
            // The second job again (requeued after its grant, say): what it granted stands.
            var again = second
            again.transaction = lapsed
            #expect(try await world.grants.grant(again).isGranted)
        }
    }

    @Test("a subscription revoked by the refund of a later period is expired for a new job naming an earlier one, not granted")
    func revokedSubscriptionForNewJob() async throws {
        try await Self.withWorld { (world: World) async throws in
            let now = Date()
            let periods = Self.subscription(now, endingInDays: -5, 25)
            let first = periods[0]
            var second = periods[1]
            #expect(try await world.grants.grant(world.request("a@example.com", world.subscription, first, renewals: [first, second])).isGranted)
            second.cancellationDateMilliseconds = Self.ms(now.addingTimeInterval(-Self.day))
            #expect(try await world.grants.grant(world.request("a@example.com", world.subscription, second, renewals: [first, second])) == .refunded)
            #expect(try await world.access("a@example.com", world.subscription).granted == false)
            // The middleware names the first period again: it ended five days ago, and nothing else is paid for.
            let outcome = try await world.grants.grant(world.request("a@example.com", world.subscription, first, renewals: [first, second]))
            #expect(outcome == .expired(expiresAt: Self.date(first.expiresDateMilliseconds)))
            #expect(try await world.access("a@example.com", world.subscription).granted == false)
        }
    }

    @Test("a pass whose access a refund of a later pass revoked is expired for a new job naming it, not granted")
    func revokedPassForNewJob() async throws {
        try await Self.withWorld { (world: World) async throws in
            let now = Date()
            let ended = AppleTransaction(
                productId: "pass.30days", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(now.addingTimeInterval(-40 * Self.day))
            )
            var later = AppleTransaction(
                productId: "pass.30days", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(now.addingTimeInterval(-5 * Self.day))
            )
            for pass in [ended, later] { #expect(try await world.grants.grant(world.request("a@example.com", world.pass, pass, verifiedAt: now)).isGranted) }
            later.cancellationDateMilliseconds = Self.ms(now)
            #expect(try await world.grants.grant(world.request("a@example.com", world.pass, later, verifiedAt: now)) == .refunded)
            #expect(try await world.access("a@example.com", world.pass).granted == false)
            let outcome = try await world.grants.grant(world.request("a@example.com", world.pass, ended, verifiedAt: now))
            #expect(outcome == .expired(expiresAt: Self.date(ended.purchaseDateMilliseconds).addingTimeInterval(30 * Self.day)))
        }
    }

    @Test("refunding a non-consumable takes the access back although a restore of it (same original transaction) was granted too")
    func refundedLifetimeWithRestore() async throws {
        try await Self.withWorld { (world: World) async throws in
            let bought = Self.ms(Date().addingTimeInterval(-Self.day))
            var purchase = AppleTransaction(productId: "premium.lifetime", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: bought)
            let restore = AppleTransaction(
                productId: "premium.lifetime", transactionId: Fixtures.transactionId(), originalTransactionId: purchase.transactionId,
                purchaseDateMilliseconds: Self.ms(Date())
            )
            #expect(try await world.grants.grant(world.request("a@example.com", world.lifetime, purchase)) == .granted(expiresAt: nil))
            #expect(try await world.grants.grant(world.request("a@example.com", world.lifetime, restore)) == .granted(expiresAt: nil))
            #expect(try await world.ledger(restore.transactionId) == ["fulfilled"])

            purchase.cancellationDateMilliseconds = Self.ms(Date())
            #expect(try await world.grants.grant(world.request("a@example.com", world.lifetime, purchase)) == .refunded)
            #expect(try await world.access("a@example.com", world.lifetime) == (false, nil))
            #expect(try await world.ledger(restore.transactionId) == ["invalidated"])
            // A later submission of the restore, in an answer that does not show the refund, is refunded too.
            #expect(try await world.grants.grant(world.request("a@example.com", world.lifetime, restore)) == .refunded)
            #expect(try await world.access("a@example.com", world.lifetime).granted == false)
        }
    }

    @Test("a stale answer that lists a refunded period as paid does not extend the access a refund left to an earlier period")
    func staleRenewalAfterRefund() async throws {
        try await Self.withWorld { (world: World) async throws in
            let now = Date()
            let periods = Self.subscription(now, endingInDays: 10, 40)
            let first = periods[0]
            var second = periods[1]
            #expect(try await world.grants.grant(world.request("a@example.com", world.subscription, first, renewals: [first, second])).isGranted)
            var refunded = second
            refunded.cancellationDateMilliseconds = Self.ms(now)
            _ = try await world.grants.applyEvidence(Self.evidence(world, "a@example.com", [first, refunded]))
            let left = Self.date(first.expiresDateMilliseconds)
            #expect(Self.close(try await world.access("a@example.com", world.subscription).expiresAt, left), "the first period is still paid for")
            // An answer from before the refund, applied late.
            second.cancellationDateMilliseconds = nil
            _ = try await world.grants.applyEvidence(Self.evidence(world, "a@example.com", [first, second]))
            #expect(Self.close(try await world.access("a@example.com", world.subscription).expiresAt, left))
        }
    }

    @Test("a job's outcome is readable from the ledger by its id, only for its own publisher")
    func jobOutcomeFromLedger() async throws {
        try await Self.withWorld { world in
            let transaction = AppleTransaction(productId: "coins.100", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(Date()))
            let request = world.request("a@example.com", world.coins, transaction)
            _ = try await world.grants.grant(request)
            let record = try #require(try await world.access.jobOutcome(jobId: request.job.jobId, publisherId: world.publisher.id))
            #expect(record.status == .granted)
            #expect(record.customerEmail == "a@example.com")
            #expect(record.offerId == world.coins.offerId)
            #expect(record.environment == "Production")
            #expect(try await world.access.jobOutcome(jobId: request.job.jobId, publisherId: UUID()) == nil)
            #expect(try await world.access.jobOutcome(jobId: "unknown", publisherId: world.publisher.id) == nil)

            // A refund found later takes the coins back but does not rewrite the job: `granted` is final.
            var refunded = transaction
            refunded.cancellationDateMilliseconds = Self.ms(Date())
            #expect(try await world.grants.grant(world.request("a@example.com", world.coins, refunded)) == .refunded)
            #expect(try await world.balance("a@example.com") == 0)
            #expect(try await world.access.jobOutcome(jobId: request.job.jobId, publisherId: world.publisher.id)?.status == .granted)

            // A job whose own check found the refund was rejected.
            var never = AppleTransaction(productId: "coins.100", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(Date()))
            never.cancellationDateMilliseconds = Self.ms(Date())
            let rejected = world.request("a@example.com", world.coins, never)
            #expect(try await world.grants.grant(rejected) == .refunded)
            let outcome = try #require(try await world.access.jobOutcome(jobId: rejected.job.jobId, publisherId: world.publisher.id))
            #expect(outcome.status == .rejected)
            #expect(outcome.reason == "refunded")
        }
    }

    @Test("a non-consumable grants access with no expiry")
    func nonConsumable() async throws {
        try await Self.withWorld { world in
            #expect(try await world.access("a@example.com", world.lifetime) == (false, nil))
            let transaction = AppleTransaction(productId: "premium.lifetime", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(Date()))
            #expect(try await world.grants.grant(world.request("a@example.com", world.lifetime, transaction)) == .granted(expiresAt: nil))
            let access = try await world.access("a@example.com", world.lifetime)
            #expect(access.granted)
            #expect(access.expiresAt == nil)
            #expect(try await world.ledger(transaction.transactionId) == ["fulfilled"])
            // Other customers and offers are untouched.
            #expect(try await world.access("b@example.com", world.lifetime).granted == false)
            #expect(try await world.access("a@example.com", world.pass).granted == false)
        }
    }

    @Test("non-renewing passes stack: the second ends 30 days after the first; a replay does not stack again")
    func nonRenewingStacks() async throws {
        try await Self.withWorld { world in
            let now = Date()
            let firstPurchase = now.addingTimeInterval(-Self.day)
            let first = AppleTransaction(productId: "pass.30days", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(firstPurchase))
            let second = AppleTransaction(productId: "pass.30days", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(now))
            let firstEnd = Date(timeIntervalSince1970: Double(Self.ms(firstPurchase)) / 1000).addingTimeInterval(30 * Self.day)
            let secondEnd = firstEnd.addingTimeInterval(30 * Self.day)

            guard case .granted(let end1) = try await world.grants.grant(world.request("a@example.com", world.pass, first, verifiedAt: now)) else {
                Issue.record("the first pass was not granted")
                return
            }
            #expect(Self.close(end1, firstEnd))
            guard case .granted(let end2) = try await world.grants.grant(world.request("a@example.com", world.pass, second, verifiedAt: now)) else {
                Issue.record("the second pass was not granted")
                return
            }
            #expect(Self.close(end2, secondEnd))
            #expect(Self.close(try await world.access("a@example.com", world.pass).expiresAt, secondEnd))

            // Replays of either transaction change nothing.
            for transaction in [second, first, second] {
                guard case .granted(let replayed) = try await world.grants.grant(world.request("a@example.com", world.pass, transaction, verifiedAt: now)) else {
                    Issue.record("a replay was not granted")
                    return
                }
                #expect(Self.close(replayed, secondEnd))
            }
            let access = try await world.access("a@example.com", world.pass)
            #expect(access.granted)
            #expect(Self.close(access.expiresAt, secondEnd))
            #expect(try await world.ledger(first.transactionId) == ["fulfilled"])
            #expect(try await world.ledger(second.transactionId) == ["fulfilled"])
        }
    }

    @Test("an auto-renewable's access ends at the latest expiry among renewals given out of order")
    func autoRenewableLatestExpiry() async throws {
        try await Self.withWorld { world in
            let now = Date()
            let original = Fixtures.transactionId()
            func period(_ id: String, _ expires: Date) -> AppleTransaction {
                AppleTransaction(
                    productId: "sub.monthly", transactionId: id, originalTransactionId: original,
                    purchaseDateMilliseconds: Self.ms(expires.addingTimeInterval(-30 * Self.day)), expiresDateMilliseconds: Self.ms(expires)
                )
            }
            let p1 = period(original, now.addingTimeInterval(-40 * Self.day))
            let p2 = period(Fixtures.transactionId(), now.addingTimeInterval(-10 * Self.day))
            let p3 = period(Fixtures.transactionId(), now.addingTimeInterval(20 * Self.day))
            let latest = Date(timeIntervalSince1970: Double(p3.expiresDateMilliseconds!) / 1000)

            let request = world.request("a@example.com", world.subscription, p1, renewals: [p3, p1, p2])
            let outcome = try await world.grants.grant(request)
            #expect(outcome == .granted(expiresAt: latest))
            // Every row names the receipt that brought it in.
            for period in [p1, p2, p3] {
                #expect(try await world.receiptDigests(period.transactionId) == [ReceiptDigest.hex(of: request.job.receiptData)])
            }
            // The other periods became ledger rows of their own, each with its dates to the millisecond.
            for period in [p2, p3] {
                let dates = try await world.periodDates(period.transactionId)
                #expect(dates.count == 1)
                #expect(dates.first?.purchased == period.purchaseDateMilliseconds)
                #expect(dates.first?.expires == period.expiresDateMilliseconds)
                #expect(dates.first?.grantedUntil == period.expiresDateMilliseconds)
            }
            let access = try await world.access("a@example.com", world.subscription)
            #expect(access.granted)
            #expect(Self.close(access.expiresAt, latest))

            // A later renewal extends it; an older answer never shortens it.
            let p4 = period(Fixtures.transactionId(), now.addingTimeInterval(50 * Self.day))
            let extended = Date(timeIntervalSince1970: Double(p4.expiresDateMilliseconds!) / 1000)
            #expect(try await world.grants.grant(world.request("a@example.com", world.subscription, p4, renewals: [p2, p4, p1, p3])) == .granted(expiresAt: extended))
            #expect(try await world.grants.grant(world.request("a@example.com", world.subscription, p2, renewals: [p1, p2])) == .granted(expiresAt: extended))
            #expect(Self.close(try await world.access("a@example.com", world.subscription).expiresAt, extended))
        }
    }

    @Test("a grace period extends an auto-renewable's access past its last expiry")
    func autoRenewableGrace() async throws {
        try await Self.withWorld { world in
            let now = Date()
            let expired = AppleTransaction(
                productId: "sub.monthly", transactionId: Fixtures.transactionId(),
                purchaseDateMilliseconds: Self.ms(now.addingTimeInterval(-31 * Self.day)), expiresDateMilliseconds: Self.ms(now.addingTimeInterval(-Self.day))
            )
            let graceEnd = Self.ms(now.addingTimeInterval(5 * Self.day))
            let outcome = try await world.grants.grant(world.request("a@example.com", world.subscription, expired, grace: graceEnd))
            #expect(outcome == .granted(expiresAt: Date(timeIntervalSince1970: Double(graceEnd) / 1000)))
            let access = try await world.access("a@example.com", world.subscription)
            #expect(access.granted)
            #expect(Self.close(access.expiresAt, Date(timeIntervalSince1970: Double(graceEnd) / 1000)))

            // A grace period that ends before the expiry does not shorten it.
            let active = AppleTransaction(
                productId: "sub.monthly", transactionId: Fixtures.transactionId(),
                purchaseDateMilliseconds: Self.ms(now), expiresDateMilliseconds: Self.ms(now.addingTimeInterval(30 * Self.day))
            )
            let outcomeB = try await world.grants.grant(world.request("b@example.com", world.subscription, active, grace: Self.ms(now.addingTimeInterval(Self.day))))
            #expect(outcomeB == .granted(expiresAt: Date(timeIntervalSince1970: Double(active.expiresDateMilliseconds!) / 1000)))
        }
    }

    @Test("a transaction another customer was granted is already claimed", arguments: ["consumable", "non_consumable", "auto_renewable"])
    func alreadyClaimed(kind: String) async throws {
        try await Self.withWorld { world in
            let product = [world.coins, world.lifetime, world.subscription].first { $0.kind.rawValue == kind }!
            let transaction = AppleTransaction(
                productId: product.productId, transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(Date()),
                expiresDateMilliseconds: product.kind == .autoRenewable ? Self.ms(Date().addingTimeInterval(30 * Self.day)) : nil
            )
            guard case .granted = try await world.grants.grant(world.request("first@example.com", product, transaction)) else {
                Issue.record("the first customer was not granted")
                return
            }
            #expect(try await world.grants.grant(world.request("second@example.com", product, transaction)) == .alreadyClaimed)
            #expect(try await world.access("second@example.com", product).granted == false)
            #expect(try await world.balance("second@example.com") == 0)
            if product.kind == .consumable {
                #expect(try await world.balance("first@example.com") == 100)
            } else {
                #expect(try await world.access("first@example.com", product).granted)
            }
            #expect(try await world.ledger(transaction.transactionId).count == 1)
        }
    }

    @Test("a renewal of a subscription owned by another customer is already claimed (claims follow original_transaction_id)")
    func claimedByOriginal() async throws {
        try await Self.withWorld { world in
            let now = Date()
            let original = Fixtures.transactionId()
            let first = AppleTransaction(productId: "sub.monthly", transactionId: original, purchaseDateMilliseconds: Self.ms(now), expiresDateMilliseconds: Self.ms(now.addingTimeInterval(Self.day)))
            let renewal = AppleTransaction(
                productId: "sub.monthly", transactionId: Fixtures.transactionId(), originalTransactionId: original,
                purchaseDateMilliseconds: Self.ms(now), expiresDateMilliseconds: Self.ms(now.addingTimeInterval(31 * Self.day))
            )
            _ = try await world.grants.grant(world.request("first@example.com", world.subscription, first))
            #expect(try await world.grants.grant(world.request("second@example.com", world.subscription, renewal, renewals: [first, renewal])) == .alreadyClaimed)
            #expect(try await world.access("second@example.com", world.subscription).granted == false)
        }
    }

    @Test("a cancelled transaction that had granted access is refunded and revokes the access")
    func refundRevokesAccess() async throws {
        try await Self.withWorld { (world: World) async throws in
            let purchase = Self.ms(Date().addingTimeInterval(-Self.day))
            var transaction = AppleTransaction(productId: "premium.lifetime", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: purchase)
            #expect(try await world.grants.grant(world.request("a@example.com", world.lifetime, transaction)) == .granted(expiresAt: nil))
            #expect(try await world.access("a@example.com", world.lifetime).granted)
            transaction.cancellationDateMilliseconds = Self.ms(Date())
            #expect(try await world.grants.grant(world.request("a@example.com", world.lifetime, transaction)) == .refunded)
            #expect(try await world.access("a@example.com", world.lifetime) == (false, nil))
            #expect(try await world.ledger(transaction.transactionId) == ["invalidated"])
            // A stale answer from before the refund, committed late, does not bring it back.
            transaction.cancellationDateMilliseconds = nil
            #expect(try await world.grants.grant(world.request("a@example.com", world.lifetime, transaction)) == .refunded)
            #expect(try await world.access("a@example.com", world.lifetime).granted == false)
            #expect(try await world.ledger(transaction.transactionId) == ["invalidated"])
        }
    }

    @Test("a cancelled consumable is refunded and its credit reversed once")
    func refundReversesCredit() async throws {
        try await Self.withWorld { world in
            var transaction = AppleTransaction(productId: "coins.100", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(Date()))
            _ = try await world.grants.grant(world.request("a@example.com", world.coins, transaction))
            #expect(try await world.balance("a@example.com") == 100)
            transaction.cancellationDateMilliseconds = Self.ms(Date())
            #expect(try await world.grants.grant(world.request("a@example.com", world.coins, transaction)) == .refunded)
            #expect(try await world.balance("a@example.com") == 0)
            #expect(try await world.grants.grant(world.request("a@example.com", world.coins, transaction)) == .refunded)
            #expect(try await world.balance("a@example.com") == 0)
            transaction.cancellationDateMilliseconds = nil
            #expect(try await world.grants.grant(world.request("a@example.com", world.coins, transaction)) == .refunded)
            #expect(try await world.balance("a@example.com") == 0)
            let entries = try await world.walletEntries("a@example.com")
            #expect(entries.map(\.kind) == ["credit", "reversal"])
            #expect(entries.map(\.coins) == [100, -100])
        }
    }

    @Test("a transaction cancelled before it was ever granted grants nothing")
    func cancelledBeforeGrant() async throws {
        try await Self.withWorld { (world: World) async throws in
            let transaction = AppleTransaction(
                productId: "coins.100", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(Date()),
                cancellationDateMilliseconds: Self.ms(Date())
            )
            #expect(try await world.grants.grant(world.request("a@example.com", world.coins, transaction)) == .refunded)
            #expect(try await world.balance("a@example.com") == 0)
            #expect(try await world.walletEntries("a@example.com").isEmpty)
        }
    }

    @Test("an auto-renewable whose periods all ended is expired and grants nothing")
    func autoRenewableExpired() async throws {
        try await Self.withWorld { world in
            let now = Date()
            let original = Fixtures.transactionId()
            let old = AppleTransaction(
                productId: "sub.monthly", transactionId: original, purchaseDateMilliseconds: Self.ms(now.addingTimeInterval(-60 * Self.day)),
                expiresDateMilliseconds: Self.ms(now.addingTimeInterval(-30 * Self.day))
            )
            let lastEnd = Self.ms(now.addingTimeInterval(-Self.day))
            let last = AppleTransaction(
                productId: "sub.monthly", transactionId: Fixtures.transactionId(), originalTransactionId: original,
                purchaseDateMilliseconds: Self.ms(now.addingTimeInterval(-31 * Self.day)), expiresDateMilliseconds: lastEnd
            )
            let outcome = try await world.grants.grant(world.request("a@example.com", world.subscription, last, renewals: [last, old]))
            #expect(outcome == .expired(expiresAt: Date(timeIntervalSince1970: Double(lastEnd) / 1000)))
            #expect(try await world.access("a@example.com", world.subscription) == (false, nil))
            #expect(try await world.ledger(last.transactionId) == ["invalidated"])
        }
    }

    /// What an answer listing `transactions` (brought in by `customer`'s job) says about them.
    static func evidence(_ world: World, _ customer: String, _ transactions: [AppleTransaction]) -> Evidence {
        Evidence(
            publisherId: world.publisher.id, appId: world.app.id,
            products: Dictionary(uniqueKeysWithValues: [world.coins, world.lifetime, world.pass, world.subscription].map { ($0.productId, $0) }),
            answer: AppleAnswer(status: 0, latestReceiptInfo: transactions), environment: "Production",
            job: world.job(customer, world.subscription, transactionId: transactions[0].transactionId), verifiedAt: Date()
        )
    }

    /// The monthly periods of one new subscription, ending `days` days from `now` each; the first one's id
    /// is the subscription's original transaction id.
    static func subscription(_ now: Date, endingInDays days: Double...) -> [AppleTransaction] {
        let original = Fixtures.transactionId()
        return days.enumerated().map { index, day in
            Self.period(original, index == 0 ? original : Fixtures.transactionId(), ends: now.addingTimeInterval(day * Self.day))
        }
    }

    /// The first two periods of one new subscription (see ``subscription(_:endingInDays:)``).
    static func twoPeriods(_ now: Date, endingInDays first: Double, _ second: Double) -> (AppleTransaction, AppleTransaction) {
        let periods = Self.subscription(now, endingInDays: first, second)
        return (periods[0], periods[1])
    }

    /// A period of a subscription, bought 30 days before it ends unless `bought` says when.
    static func period(_ original: String, _ id: String, ends: Date, bought: Date? = nil, cancelled: Date? = nil) -> AppleTransaction {
        AppleTransaction(
            productId: "sub.monthly", transactionId: id, originalTransactionId: original,
            purchaseDateMilliseconds: Self.ms(bought ?? ends.addingTimeInterval(-30 * Self.day)), expiresDateMilliseconds: Self.ms(ends),
            cancellationDateMilliseconds: cancelled.map(Self.ms)
        )
    }

    @Test("a renewal found in any answer extends the owner's access and is recorded as fulfilled")
    func renewalEvidenceExtends() async throws {
        try await Self.withWorld { world in
            let now = Date()
            let (first, renewal) = Self.twoPeriods(now, endingInDays: 10, 40)
            _ = try await world.grants.grant(world.request("a@example.com", world.subscription, first, renewals: [first]))
            // Another customer's receipt lists the renewal: the owner's access follows it.
            let evidence = Self.evidence(world, "b@example.com", [first, renewal])
            let applied = try await world.grants.applyEvidence(evidence)
            #expect(applied.extended == 1)
            #expect(try await world.receiptDigests(renewal.transactionId) == [ReceiptDigest.hex(of: evidence.job.receiptData)])
            #expect(Self.close(try await world.access("a@example.com", world.subscription).expiresAt, Self.date(renewal.expiresDateMilliseconds)))
            #expect(try await world.ledger(renewal.transactionId) == ["fulfilled"])
            let dates = try await world.periodDates(renewal.transactionId)
            #expect(dates.first?.purchased == renewal.purchaseDateMilliseconds && dates.first?.expires == renewal.expiresDateMilliseconds)
            #expect(dates.first?.grantedUntil == renewal.expiresDateMilliseconds)
            #expect(try await world.access("b@example.com", world.subscription).granted == false)
            #expect(applied.bearsOn == [CustomerOffer(customerEmail: "a@example.com", offerId: world.subscription.offerId)])

            // The same evidence again (a replay) changes nothing and still says whose access it bears on.
            let again = try await world.grants.applyEvidence(Self.evidence(world, "b@example.com", [first, renewal]))
            #expect(again == AppliedEvidence(revoked: 0, extended: 0, bearsOn: applied.bearsOn))
        }
    }

    @Test("a refund found in any answer revokes the owner's access, and a replay reports it again without revoking twice")
    func refundEvidenceRevokes() async throws {
        try await Self.withWorld { world in
            var purchase = AppleTransaction(productId: "premium.lifetime", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(Date()))
            _ = try await world.grants.grant(world.request("a@example.com", world.lifetime, purchase))
            purchase.cancellationDateMilliseconds = Self.ms(Date())
            let owner = [CustomerOffer(customerEmail: "a@example.com", offerId: world.lifetime.offerId)]
            let applied = try await world.grants.applyEvidence(Self.evidence(world, "b@example.com", [purchase]))
            #expect(applied == AppliedEvidence(revoked: 1, extended: 0, bearsOn: owner))
            #expect(try await world.access("a@example.com", world.lifetime).granted == false)
            let again = try await world.grants.applyEvidence(Self.evidence(world, "b@example.com", [purchase]))
            #expect(again == AppliedEvidence(revoked: 0, extended: 0, bearsOn: owner))
            #expect(try await world.ledger(purchase.transactionId) == ["invalidated"])
        }
    }

    /// Runs `body` while the test holds `customer`'s lock on `offer`; `waiting(n)` returns once `n` sessions
    /// wait for an advisory lock. Work `body` starts in tasks takes the locks it waits for in the order it
    /// began waiting once the test lets go (PostgreSQL grants a lock's waiters first come, first served).
    static func holdingLock<R>(
        _ world: World, of customer: String, _ offer: Product, _ body: (_ waiting: (Int) async throws -> Void) async throws -> R
    ) async throws -> R {
        let lock = GrantStore.lockStatement(publisherId: world.publisher.id, customerEmail: customer, offerId: offer.offerId)
        return try await world.database.withTransaction { session in
            try await session.query(lock.0, lock.1)
            return try await body { count in
                _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(20), "\(count) waiting for a lock") {
                    try await session.query(
                        """
                        SELECT count(*) AS waiting FROM pg_locks
                        WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                        """
                    ).first?.decode(Int.self, "waiting") == count ? true : nil
                }
            }
        }
    }

    /// Applies each of `evidence` in its own task behind the lock of `customer`'s subscription offer,
    /// starting each once the ones before wait for a lock, so they take it in that order.
    static func queued(_ world: World, behindLockOf customer: String, _ evidence: [Evidence]) async throws -> [Task<AppliedEvidence, any Error>] {
        try await Self.holdingLock(world, of: customer, world.subscription) { waiting in
            var tasks: [Task<AppliedEvidence, any Error>] = []
            for next in evidence {
                tasks.append(Task { try await world.grants.applyEvidence(next) })
                try await waiting(tasks.count)
            }
            return tasks
        }
    }

    /// Two answers applied at once, each refunding a period of one customer's subscription and renewing
    /// the other's. The test holds b's lock until the first waits for it and the second waits too: taking
    /// the refund's lock, then the renewal's, as each answer lists them, the second would hold a's lock
    /// and wait for b's while the first, given b's, waited for a's. PostgreSQL would abort one.
    @Test("crossed evidence (each answer refunds what the other renews) applied at once: both commit, no deadlock")
    func crossedEvidence() async throws {
        try await Self.withWorld(connections: 4) { world in
            let now = Date()
            let (a, b) = (Self.subscription(now, endingInDays: 10, 40), Self.subscription(now, endingInDays: 10, 40))
            let (firstA, firstB) = (a[0], b[0])
            _ = try await world.grants.grant(world.request("a@example.com", world.subscription, firstA, renewals: [firstA]))
            _ = try await world.grants.grant(world.request("b@example.com", world.subscription, firstB, renewals: [firstB]))
            func crossed(refunding first: AppleTransaction, renewing renewal: AppleTransaction) -> Evidence {
                var refunded = first
                refunded.cancellationDateMilliseconds = Self.ms(now)
                return Self.evidence(world, "x@example.com", [refunded, renewal])
            }
            let one = crossed(refunding: firstB, renewing: a[1])
            let other = crossed(refunding: firstA, renewing: b[1])
            let tasks = try await Self.queued(world, behindLockOf: "b@example.com", [one, other])
            let (first, second) = (tasks[0], tasks[1])
            let results = [await first.result, await second.result]
            for result in results {
                if case .failure(let error) = result { Issue.record("an answer was not applied: \(error)") }
            }
            #expect(try results.map { try $0.get().bearsOn.count } == [2, 2])
            // The first answer went first (it waited first): b's refund revoked b's access before the second
            // answer's renewal could extend it; a's refund, second, finds a's renewal already recorded and keeps it.
            #expect(Self.close(try await world.access("a@example.com", world.subscription).expiresAt, Self.date(Self.ms(now.addingTimeInterval(40 * Self.day)))))
            #expect(try await world.access("b@example.com", world.subscription).granted == false)
        }
    }

    /// A fresh answer refunds a subscription's second period while a stale one (taken before the refund)
    /// still lists it as paid; the test holds the customer's lock until both wait, in the order given.
    /// The second period is in the ledger already (the first grant counted it) or not yet. Whichever goes
    /// first, the refund stands: queued first, what the stale answer read before waiting must not count;
    /// queued second, it must wait for the stale answer's commit and take the period back, not find no
    /// ledger row for it and be lost.
    @Test("a refund and a stale renewal of the same period, queued in either order: the refund stands", arguments: [true, false], [true, false])
    func refundAndStaleRenewalQueued(refundFirst: Bool, periodInLedger: Bool) async throws {
        try await Self.withWorld(connections: 4) { world in
            let now = Date()
            let (first, second) = Self.twoPeriods(now, endingInDays: 10, 40)
            let counted = periodInLedger ? [first, second] : [first]
            #expect(try await world.grants.grant(world.request("a@example.com", world.subscription, first, renewals: counted)).isGranted)
            var refunded = second
            refunded.cancellationDateMilliseconds = Self.ms(now)
            let (fresh, stale) = (Self.evidence(world, "a@example.com", [first, refunded]), Self.evidence(world, "b@example.com", [first, second]))
            let tasks = try await Self.queued(world, behindLockOf: "a@example.com", refundFirst ? [fresh, stale] : [stale, fresh])
            let (refund, renewal) = refundFirst ? (tasks[0], tasks[1]) : (tasks[1], tasks[0])
            // A refund queued first of a period not in the ledger finds nothing to revoke: it is recorded, and
            // the stale answer then extends nothing with it. Only a stale answer first records the period.
            #expect(try await refund.value.revoked == (refundFirst && !periodInLedger ? 0 : 1))
            #expect(try await renewal.value.extended == (!refundFirst && !periodInLedger ? 1 : 0))
            #expect(Self.close(try await world.access("a@example.com", world.subscription).expiresAt, Self.date(first.expiresDateMilliseconds)))
        }
    }

    /// Another receipt's answer lists a purchase as refunded before the purchase's first grant, which runs with
    /// an answer Apple gave before the refund: the evidence finds no ledger row to revoke, the grant must still
    /// grant nothing. A non-consumable's refund, of the purchase, stands for a restore of it too.
    @Test("a refund seen before the purchase's first grant stands: the grant of a stale answer grants nothing",
        arguments: ["coins", "lifetime restore", "pass", "subscription"])
    func refundSeenBeforeFirstGrant(_ bought: String) async throws {
        try await Self.withWorld { (world: World) async throws in
            let now = Date()
            let (product, purchase): (Product, AppleTransaction) = switch bought {
            case "coins": (world.coins, AppleTransaction(productId: "coins.100", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(now)))
            case "lifetime restore": (world.lifetime, AppleTransaction(productId: "premium.lifetime", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(now)))
            case "pass": (world.pass, AppleTransaction(productId: "pass.30days", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(now)))
            default: (world.subscription, Self.subscription(now, endingInDays: 20)[0])
            }
            var refunded = purchase
            refunded.cancellationDateMilliseconds = Self.ms(now)
            #expect(try await world.grants.applyEvidence(Self.evidence(world, "b@example.com", [refunded])) == AppliedEvidence(revoked: 0, extended: 0, bearsOn: []))
            // The stale answer: a restore of the purchase (a new transaction id), or the purchase itself.
            let granted = bought == "lifetime restore"
                ? AppleTransaction(
                    productId: "premium.lifetime", transactionId: Fixtures.transactionId(), originalTransactionId: purchase.transactionId,
                    purchaseDateMilliseconds: Self.ms(now)
                )
                : purchase
            #expect(try await world.grants.grant(world.request("a@example.com", product, granted, renewals: [granted])) == .refunded)
            #expect(try await world.access("a@example.com", product).granted == false)
            #expect(try await world.balance("a@example.com") == 0)
            #expect(try await world.ledger(granted.transactionId) == ["invalidated"])
        }
    }

    /// An answer Apple gave before a period was refunded names that period, and a later one is still paid
    /// for: the later one grants (the period named grants nothing), and the job's outcome read back from the
    /// ledger, once Redis has forgotten it, is that grant.
    @Test("a stale answer naming a period refunded since grants the period still paid for, and the ledger says so")
    func staleAnswerNamingRefundedPeriod() async throws {
        try await Self.withWorld { world in
            let now = Date()
            let (first, second) = Self.twoPeriods(now, endingInDays: 10, 40)
            var refunded = first
            refunded.cancellationDateMilliseconds = Self.ms(now)
            _ = try await world.grants.applyEvidence(Self.evidence(world, "b@example.com", [refunded]))
            let request = world.request("a@example.com", world.subscription, first, renewals: [first, second])
            #expect(try await world.grants.grant(request) == .granted(expiresAt: Self.date(second.expiresDateMilliseconds)))
            #expect(try await world.ledger(first.transactionId) == ["invalidated"])
            #expect(try await world.ledger(second.transactionId) == ["fulfilled"])
            // The period granted instead names this job's receipt (the refunded one keeps the evidence's).
            #expect(try await world.receiptDigests(second.transactionId) == [ReceiptDigest.hex(of: request.job.receiptData)])
            let outcome = try await world.access.jobOutcome(jobId: request.job.jobId, publisherId: world.publisher.id)
            #expect(outcome?.status == .granted)
            #expect(outcome?.reason == nil)
        }
    }

    /// The race itself: a purchase's first grant is in flight (it waits behind the customer's lock, which the
    /// test holds) when another receipt's answer lists the purchase as refunded. The refund must wait for the
    /// grant's commit and take back what it granted; else it finds no ledger row and is lost.
    @Test("a refund seen while the purchase's first grant is in flight waits for it and takes its coins back")
    func refundWhileFirstGrantInFlight() async throws {
        try await Self.withWorld(connections: 4) { world in
            let purchase = AppleTransaction(productId: "coins.100", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(Date()))
            var refunded = purchase
            refunded.cancellationDateMilliseconds = Self.ms(Date())
            let evidence = Self.evidence(world, "b@example.com", [refunded])
            let (grant, refund) = try await Self.holdingLock(world, of: "a@example.com", world.coins) { waiting in
                let grant = Task { try await world.grants.grant(world.request("a@example.com", world.coins, purchase)) }
                try await waiting(1)
                let refund = Task { try await world.grants.applyEvidence(evidence) }
                try await waiting(2)
                return (grant, refund)
            }
            #expect(try await grant.value == .granted(expiresAt: nil))
            #expect(try await refund.value.revoked == 1)
            #expect(try await world.balance("a@example.com") == 0)
            #expect(try await world.walletEntries("a@example.com").map(\.kind) == ["credit", "reversal"])
        }
    }

    @Test("a subscription that lapsed, or was refunded, and was bought again grants again", arguments: ["lapsed", "refunded"])
    func subscriptionBoughtAgain(_ history: String) async throws {
        try await Self.withWorld { world in
            let now = Date()
            let periods = Self.subscription(now, endingInDays: history == "lapsed" ? -5 : 10, 29)
            var first = periods[0]
            if history == "lapsed" {
                #expect(try await world.grants.grant(world.request("a@example.com", world.subscription, first, renewals: [first])) == .expired(expiresAt: Self.date(first.expiresDateMilliseconds)))
            } else {
                _ = try await world.grants.grant(world.request("a@example.com", world.subscription, first, renewals: [first]))
                first.cancellationDateMilliseconds = Self.ms(now)
                #expect(try await world.grants.grant(world.request("a@example.com", world.subscription, first, renewals: [first])) == .refunded)
            }
            #expect(try await world.access("a@example.com", world.subscription).granted == false)

            // Bought again in the same group: the same original transaction. The answer's evidence runs first.
            let again = periods[1]
            _ = try await world.grants.applyEvidence(Self.evidence(world, "a@example.com", [first, again]))
            // A lapse granted nothing, so nobody owns the subscription and the evidence records the period for
            // no one; a refund leaves it its owner's, recorded but not yet granted.
            #expect(try await world.ledger(again.transactionId) == (history == "lapsed" ? [] : ["verified"]))
            let end = Self.date(again.expiresDateMilliseconds)
            #expect(try await world.grants.grant(world.request("a@example.com", world.subscription, again, renewals: [first, again])) == .granted(expiresAt: end))
            let access = try await world.access("a@example.com", world.subscription)
            #expect(access.granted)
            #expect(Self.close(access.expiresAt, end))
            #expect(try await world.ledger(again.transactionId) == ["fulfilled"])
        }
    }

    @Test("a period checked for one customer that granted nothing becomes another's when they are granted it, and its refund takes back theirs")
    func ledgerRowChangesHandsWithTheClaim() async throws {
        try await Self.withWorld { world in
            let now = Date()
            let (lapsed, again) = Self.twoPeriods(now, endingInDays: -5, 29)
            #expect(try await world.grants.grant(world.request("a@example.com", world.subscription, lapsed, renewals: [lapsed])) == .expired(expiresAt: Self.date(lapsed.expiresDateMilliseconds)))

            // The same Apple ID subscribes again; another customer submits it, naming the lapsed period.
            let request = world.request("b@example.com", world.subscription, lapsed, renewals: [lapsed, again])
            #expect(try await world.grants.grant(request) == .granted(expiresAt: Self.date(again.expiresDateMilliseconds)))
            let row = try #require(try await world.database.query(
                "SELECT customer_email, job_id, state FROM transactions WHERE transaction_id = $1", [lapsed.transactionId]
            ).first)
            #expect(try row.decode(String.self, "customer_email") == "b@example.com")
            #expect(try row.decode(String?.self, "job_id") == request.job.jobId)
            #expect(try row.decode(String.self, "state") == "fulfilled")
            #expect(try await world.grants.committedGrant(request.job) != nil)

            // Both periods refunded: the access taken back is b's.
            var refunded = [lapsed, again]
            for index in refunded.indices { refunded[index].cancellationDateMilliseconds = Self.ms(now) }
            _ = try await world.grants.applyEvidence(Self.evidence(world, "b@example.com", refunded))
            #expect(try await world.access("b@example.com", world.subscription).granted == false)
        }
    }

    @Test("a subscription in its billing grace period keeps it when an answer also lists an old period refunded long ago")
    func graceKeptThroughOldRefund() async throws {
        try await Self.withWorld { world in
            let now = Date()
            let periods = Self.subscription(now, endingInDays: -31, -1)
            var old = periods[0]
            let last = periods[1]
            let graceEnd = Self.ms(now.addingTimeInterval(5 * Self.day))
            #expect(try await world.grants.grant(world.request("a@example.com", world.subscription, last, renewals: [old, last], grace: graceEnd)) == .granted(expiresAt: Self.date(graceEnd)))

            // Apple lists the old period refunded (a month ago) and the subscription still in billing retry.
            old.cancellationDateMilliseconds = Self.ms(now.addingTimeInterval(-30 * Self.day))
            var evidence = Self.evidence(world, "a@example.com", [old, last])
            evidence.gracePeriodEnds[old.originalTransactionId] = graceEnd
            _ = try await world.grants.applyEvidence(evidence)
            let access = try await world.access("a@example.com", world.subscription)
            #expect(access.granted, "the grace period still runs")
            #expect(Self.close(access.expiresAt, Self.date(graceEnd)))
        }
    }

    @Test("a subscription refunded and bought again: a submission naming an earlier, granted period grants the new period")
    func resubscribedThroughOldPeriod() async throws {
        try await Self.withWorld { world in
            let now = Date()
            let periods = Self.subscription(now, endingInDays: -5, 25, 30)
            let (first, third) = (periods[0], periods[2])
            var second = periods[1]
            #expect(try await world.grants.grant(world.request("a@example.com", world.subscription, first, renewals: [first, second])) == .granted(expiresAt: Self.date(second.expiresDateMilliseconds)))
            second.cancellationDateMilliseconds = Self.ms(now.addingTimeInterval(-Self.day))
            #expect(try await world.grants.grant(world.request("a@example.com", world.subscription, second, renewals: [first, second])) == .refunded)
            #expect(try await world.access("a@example.com", world.subscription).granted == false)

            // Subscribed again; the middleware names the first period, which was granted long ago.
            _ = try await world.grants.applyEvidence(Self.evidence(world, "a@example.com", [first, second, third]))
            let end = Self.date(third.expiresDateMilliseconds)
            #expect(try await world.grants.grant(world.request("a@example.com", world.subscription, first, renewals: [first, second, third])) == .granted(expiresAt: end))
            let access = try await world.access("a@example.com", world.subscription)
            #expect(access.granted)
            #expect(Self.close(access.expiresAt, end))
            // Once granted, the same submission again is done: nothing changes.
            #expect(try await world.grants.grant(world.request("a@example.com", world.subscription, first, renewals: [first, second, third])) == .granted(expiresAt: end))
        }
    }

    @Test(
        "passes stack in the order they were bought, whatever the order and time they are granted in",
        arguments: [
            // Bought 10 and 5 days ago, the later one granted first: 10 days ago + 60 days.
            (-10.0, -5.0, true, 50.0),
            // Bought 40 days ago (ended 10 days ago) and 20 days ago, during the first; granted now, in order.
            (-40.0, -20.0, false, 20.0),
        ]
    )
    func passesStackInPurchaseOrder(firstBought: Double, secondBought: Double, laterFirst: Bool, endsIn: Double) async throws {
        try await Self.withWorld { world in
            let now = Date()
            let first = AppleTransaction(
                productId: "pass.30days", transactionId: Fixtures.transactionId(),
                purchaseDateMilliseconds: Self.ms(now.addingTimeInterval(firstBought * Self.day))
            )
            let second = AppleTransaction(
                productId: "pass.30days", transactionId: Fixtures.transactionId(),
                purchaseDateMilliseconds: Self.ms(now.addingTimeInterval(secondBought * Self.day))
            )
            let end = Self.date(first.purchaseDateMilliseconds).addingTimeInterval((endsIn - firstBought) * Self.day)
            var last: GrantOutcome?
            for pass in laterFirst ? [second, first] : [first, second] {
                last = try await world.grants.grant(world.request("a@example.com", world.pass, pass, verifiedAt: now))
            }
            guard case .granted(let granted)? = last else {
                Issue.record("the last pass was not granted: \(String(describing: last))")
                return
            }
            #expect(Self.close(granted, end))
            #expect(Self.close(try await world.access("a@example.com", world.pass).expiresAt, end))
        }
    }

    @Test("a pass of an offer that a subscription also grants stacks after the subscription's access")
    func passAfterSubscriptionOfTheSameOffer() async throws {
        try await Self.withWorld { world in
            let now = Date()
            let (tv, pass) = try await Self.secondApp(world, selling: .nonRenewing)
            // A yearly subscription bought 305 days ago: a pass bought now stacks after it.
            let id = Fixtures.transactionId()
            let period = Self.period(id, id, ends: now.addingTimeInterval(60 * Self.day), bought: now.addingTimeInterval(-305 * Self.day))
            _ = try await world.grants.grant(world.request("a@example.com", world.subscription, period, renewals: [period]))
            let bought = AppleTransaction(productId: "sub.pass30", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(now))
            let end = Self.date(period.expiresDateMilliseconds).addingTimeInterval(30 * Self.day)
            var request = world.request("a@example.com", pass, bought, verifiedAt: now)
            request.app = tv
            #expect(try await world.grants.grant(request) == .granted(expiresAt: end))
            #expect(Self.close(try await world.access("a@example.com", world.subscription).expiresAt, end))
        }
    }

    /// A pass bought during a subscription, granted on time (before a later renewal) or late (after it).
    @Test(
        "a pass bought during a subscription stays stacked after the subscription as it stood then, granted before or after a later renewal: a refund later recomputes the same access, not 30 days more",
        arguments: [false, true]
    )
    func passStackedOnceAfterSubscription(grantedLate: Bool) async throws {
        try await Self.withWorld { (world: World) async throws in
            let now = Date()
            let (tv, product) = try await Self.secondApp(world, selling: .nonRenewing)
            let period = Self.period(Fixtures.transactionId(), Fixtures.transactionId(), ends: now.addingTimeInterval(10 * Self.day))
            _ = try await world.grants.grant(world.request("a@example.com", world.subscription, period, renewals: [period]))
            func pass(_ daysAgo: Double) -> AppleTransaction {
                AppleTransaction(productId: product.productId, transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(now.addingTimeInterval(-daysAgo * Self.day)))
            }
            func grant(_ transaction: AppleTransaction) async throws -> GrantOutcome {
                var request = world.request("a@example.com", product, transaction, verifiedAt: now)
                request.app = tv
                return try await world.grants.grant(request)
            }
            // The subscription was renewed after the first pass's purchase, to 50 days from now: the pass's
            // days lie within it.
            let renewal = AppleTransaction(
                productId: "sub.monthly", transactionId: Fixtures.transactionId(), originalTransactionId: period.originalTransactionId,
                purchaseDateMilliseconds: Self.ms(now.addingTimeInterval(-Self.day)), expiresDateMilliseconds: Self.ms(now.addingTimeInterval(50 * Self.day))
            )
            let renewed = Self.date(renewal.expiresDateMilliseconds)
            // Bought two days ago, while the subscription ran for ten more days: after it, 40 days from now.
            let first = pass(2)
            if grantedLate {
                _ = try await world.grants.applyEvidence(Self.evidence(world, "a@example.com", [period, renewal]))
                #expect(try await grant(first) == .granted(expiresAt: renewed))
            } else {
                #expect(try await grant(first).isGranted)
                let stacked = Self.date(period.expiresDateMilliseconds).addingTimeInterval(30 * Self.day)
                #expect(Self.close(try await world.access("a@example.com", world.subscription).expiresAt, stacked))
                _ = try await world.grants.applyEvidence(Self.evidence(world, "a@example.com", [period, renewal]))
            }
            #expect(Self.close(try await world.access("a@example.com", world.subscription).expiresAt, renewed))
            // Another pass, bought now, is refunded: what is left is the renewed subscription, which covers the first pass.
            var second = pass(0)
            #expect(try await grant(second).isGranted)
            second.cancellationDateMilliseconds = Self.ms(now)
            #expect(try await grant(second) == .refunded)
            let access = try await world.access("a@example.com", world.subscription)
            #expect(access.granted)
            #expect(Self.close(access.expiresAt, renewed), "access until \(String(describing: access.expiresAt)), the renewal ends \(renewed)")
        }
    }

    @Test("a subscription submitted again, while the offer is the customer's for life (bought in another app), reports access with no end, as the access status does")
    func repeatUnderLifetimeAccess() async throws {
        try await Self.withWorld { world in
            let (tv, lifetime) = try await Self.secondApp(world, selling: .nonConsumable)
            let period = Self.subscription(Date(), endingInDays: 30)[0]
            #expect(try await world.grants.grant(world.request("a@example.com", world.subscription, period, renewals: [period])).isGranted)
            var forLife = world.request("a@example.com", lifetime, AppleTransaction(productId: lifetime.productId, transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(Date())))
            forLife.app = tv
            #expect(try await world.grants.grant(forLife) == .granted(expiresAt: nil))
            // Another job for the same subscription period (a resubmission after its status expired).
            #expect(try await world.grants.grant(world.request("a@example.com", world.subscription, period, renewals: [period])) == .granted(expiresAt: nil))
            #expect(try await world.access("a@example.com", world.subscription).expiresAt == nil)
        }
    }

    /// A second app of the publisher (tvOS) and its product for the subscription's offer: one offer is one
    /// product per app. A pass is of 30 days.
    static func secondApp(_ world: World, selling kind: ProductKind) async throws -> (App, Product) {
        let tv = try await world.catalog.createApp(publisherId: world.publisher.id, bundleId: "com.example.tv.appletv", sharedSecret: nil, allowSandbox: true)
        let product = try await world.catalog.createProduct(ProductDraft(
            publisherId: world.publisher.id, bundleId: tv.bundleId, productId: "tv.\(kind.rawValue)", offerId: world.subscription.offerId,
            kind: kind, title: kind.rawValue, description: nil, coins: nil, durationDays: kind == .nonRenewing ? 30 : nil, enabled: true
        ))
        return (tv, product)
    }

    @Test(
        "one offer sold in two apps: refunding what one app sold leaves what the other sold",
        arguments: [ProductKind.autoRenewable, .nonRenewing, .nonConsumable], ["subscription", "other"]
    )
    func offerSoldInTwoApps(_ kind: ProductKind, refunded: String) async throws {
        try await Self.withWorld { world in
            let now = Date()
            let (tv, product) = try await Self.secondApp(world, selling: kind)
            let original = Fixtures.transactionId()
            var subscription = Self.period(original, original, ends: now.addingTimeInterval(60 * Self.day), bought: now.addingTimeInterval(-305 * Self.day))
            _ = try await world.grants.grant(world.request("a@example.com", world.subscription, subscription, renewals: [subscription]))
            // Bought in the other app while the subscription runs: a subscription of its own ending in 30 days,
            // a 30-day pass (stacked after the subscription), or the offer for life.
            let id = Fixtures.transactionId()
            var other = AppleTransaction(
                productId: product.productId, transactionId: id, originalTransactionId: id, purchaseDateMilliseconds: Self.ms(now),
                expiresDateMilliseconds: kind == .autoRenewable ? Self.ms(now.addingTimeInterval(30 * Self.day)) : nil
            )
            func grant(_ transaction: AppleTransaction, _ product: Product, in app: App) async throws -> GrantOutcome {
                var request = world.request("a@example.com", product, transaction, renewals: product.kind == .autoRenewable ? [transaction] : [], verifiedAt: now)
                request.app = app
                return try await world.grants.grant(request)
            }
            #expect(try await grant(other, product, in: tv).isGranted)
            let both: Date? = switch kind {
            case .autoRenewable: Self.date(subscription.expiresDateMilliseconds)
            case .nonRenewing: Self.date(subscription.expiresDateMilliseconds).addingTimeInterval(30 * Self.day)
            default: nil
            }
            #expect(Self.close(try await world.access("a@example.com", world.subscription).expiresAt, both))

            let left: Date?
            if refunded == "subscription" {
                subscription.cancellationDateMilliseconds = Self.ms(now)
                #expect(try await grant(subscription, world.subscription, in: world.app) == .refunded)
                left = switch kind {
                case .autoRenewable: Self.date(other.expiresDateMilliseconds)
                case .nonRenewing: now.addingTimeInterval(30 * Self.day)  // the pass's days from its purchase
                default: nil
                }
            } else {
                other.cancellationDateMilliseconds = Self.ms(now)
                #expect(try await grant(other, product, in: tv) == .refunded)
                left = Self.date(subscription.expiresDateMilliseconds)
            }
            let access = try await world.access("a@example.com", world.subscription)
            #expect(access.granted, "what the other app sold is still paid for")
            #expect(Self.close(access.expiresAt, left))
        }
    }

    /// Two 30-day passes granted to a@example.com, bought a day apart (the second `now`), so they stack.
    static func twoStackedPasses(_ world: World, now: Date) async throws -> (first: AppleTransaction, second: AppleTransaction) {
        let first = AppleTransaction(productId: "pass.30days", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(now.addingTimeInterval(-Self.day)))
        let second = AppleTransaction(productId: "pass.30days", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(now))
        for pass in [first, second] { _ = try await world.grants.grant(world.request("a@example.com", world.pass, pass, verifiedAt: now)) }
        return (first, second)
    }

    @Test("refunding one of two stacked passes keeps the other's days as sold, though the product's days changed since")
    func refundAfterDurationChanged() async throws {
        try await Self.withWorld { world in
            let now = Date()
            let (first, stacked) = try await Self.twoStackedPasses(world, now: now)
            var second = stacked
            // The publisher sells a shorter pass under the same product from now on.
            _ = try await world.catalog.updateProduct(id: world.pass.id, ProductPatch(durationDays: 7))

            second.cancellationDateMilliseconds = Self.ms(now)
            #expect(try await world.grants.grant(world.request("a@example.com", world.pass, second, verifiedAt: now)) == .refunded)
            let access = try await world.access("a@example.com", world.pass)
            #expect(access.granted)
            #expect(Self.close(access.expiresAt, Self.date(first.purchaseDateMilliseconds).addingTimeInterval(30 * Self.day)), "the first pass's 30 days, as sold")
        }
    }

    @Test("a pass granted while the product's days change is granted and recorded with the days the worker sold it with, and keeps them")
    func passDaysChangedDuringGrant() async throws {
        try await Self.withWorld { world in
            let now = Date()
            // The worker's catalog still says 30 days; PostgreSQL already says 7.
            _ = try await world.catalog.updateProduct(id: world.pass.id, ProductPatch(durationDays: 7))
            let pass = AppleTransaction(productId: "pass.30days", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(now))
            let sold = Self.date(pass.purchaseDateMilliseconds).addingTimeInterval(30 * Self.day)
            guard case .granted(let end) = try await world.grants.grant(world.request("a@example.com", world.pass, pass, verifiedAt: now)) else {
                Issue.record("the pass was not granted")
                return
            }
            #expect(Self.close(end, sold))
            #expect(Self.close(try await world.access("a@example.com", world.pass).expiresAt, sold))
            let recorded = try #require(try await world.database.query(
                "SELECT duration_days FROM transactions WHERE transaction_id = $1", [pass.transactionId]
            ).first).decode(Int?.self, "duration_days")
            #expect(recorded == 30)
        }
    }

    @Test("refunding one of two stacked passes keeps the other's days", arguments: ["first", "second"])
    func refundOneStackedPass(_ refunded: String) async throws {
        try await Self.withWorld { world in
            let now = Date()
            var (first, second) = try await Self.twoStackedPasses(world, now: now)
            let firstEnd = Self.date(first.purchaseDateMilliseconds).addingTimeInterval(30 * Self.day)
            #expect(Self.close(try await world.access("a@example.com", world.pass).expiresAt, firstEnd.addingTimeInterval(30 * Self.day)))

            // What is left is the other pass alone, from its own purchase.
            let left: Date
            if refunded == "first" {
                first.cancellationDateMilliseconds = Self.ms(now)
                #expect(try await world.grants.grant(world.request("a@example.com", world.pass, first, verifiedAt: now)) == .refunded)
                left = Self.date(second.purchaseDateMilliseconds).addingTimeInterval(30 * Self.day)
            } else {
                second.cancellationDateMilliseconds = Self.ms(now)
                #expect(try await world.grants.grant(world.request("a@example.com", world.pass, second, verifiedAt: now)) == .refunded)
                left = firstEnd
            }
            var access = try await world.access("a@example.com", world.pass)
            #expect(access.granted)
            #expect(Self.close(access.expiresAt, left))
            // The same refund seen again takes nothing more.
            _ = try await world.grants.applyEvidence(Self.evidence(world, "a@example.com", [first, second]))
            #expect(try await world.grants.grant(world.request("a@example.com", world.pass, refunded == "first" ? first : second, verifiedAt: now)) == .refunded)
            #expect(Self.close(try await world.access("a@example.com", world.pass).expiresAt, left))

            // Refunding the other one too leaves nothing.
            if refunded == "first" { second.cancellationDateMilliseconds = Self.ms(now) } else { first.cancellationDateMilliseconds = Self.ms(now) }
            _ = try await world.grants.applyEvidence(Self.evidence(world, "a@example.com", [first, second]))
            access = try await world.access("a@example.com", world.pass)
            #expect(access.granted == false)
        }
    }

    @Test("a claim committed by the same customer's concurrent grant for another offer is not mistaken for another's")
    func claimRaceAcrossOffers() async throws {
        try await Self.withWorld(connections: 4) { world in
            let yearly = try await world.catalog.createProduct(ProductDraft(
                publisherId: world.publisher.id, bundleId: world.app.bundleId, productId: "sub.yearly", offerId: nil, kind: .autoRenewable,
                title: "Yearly", description: nil, coins: nil, durationDays: nil, enabled: true
            ))
            let original = Fixtures.transactionId()
            let period = AppleTransaction(
                productId: "sub.yearly", transactionId: original, originalTransactionId: original,
                purchaseDateMilliseconds: Self.ms(Date()), expiresDateMilliseconds: Self.ms(Date().addingTimeInterval(365 * Self.day))
            )
            try await world.database.withConnection { holder in
                // Another grant of the same customer holds the claim, uncommitted, under another offer's lock.
                try await holder.query("BEGIN")
                try await holder.query(
                    "INSERT INTO claims (publisher_id, claim_key, customer_email) VALUES ($1, $2, $3)",
                    [world.publisher.id, "original:\(original)", "a@example.com"]
                )
                let grant = Task { try await world.grants.grant(world.request("a@example.com", yearly, period, renewals: [period])) }
                let deadline = ContinuousClock.now + .seconds(30)
                while try await world.database.query(
                    "SELECT count(*) AS waiting FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO claims%'"
                ).first?.decode(Int.self, "waiting") == 0 {
                    try #require(ContinuousClock.now < deadline, "the grant never waited for the claim")
                    try await Task.sleep(for: .milliseconds(20))
                }
                try await holder.query("COMMIT")
                #expect(try await grant.value == .granted(expiresAt: Self.date(period.expiresDateMilliseconds)))
            }
            #expect(try await world.access("a@example.com", yearly).granted)
        }
    }

    static func date(_ milliseconds: Int64?) -> Date {
        Date(timeIntervalSince1970: Double(milliseconds ?? 0) / 1000)
    }

    @Test("20 concurrent grants of one consumable transaction credit exactly once")
    func concurrentGrants() async throws {
        try await Self.withWorld(connections: 8) { world in
            let transaction = AppleTransaction(productId: "coins.100", transactionId: Fixtures.transactionId(), purchaseDateMilliseconds: Self.ms(Date()))
            let outcomes = try await withThrowingTaskGroup(of: GrantOutcome.self) { group in
                for _ in 0..<20 {
                    group.addTask { try await world.grants.grant(world.request("a@example.com", world.coins, transaction)) }
                }
                var outcomes: [GrantOutcome] = []
                for try await outcome in group { outcomes.append(outcome) }
                return outcomes
            }
            #expect(outcomes.count == 20)
            #expect(outcomes.allSatisfy { $0 == .granted(expiresAt: nil) })
            #expect(try await world.balance("a@example.com") == 100)
            #expect(try await world.walletEntries("a@example.com").count == 1)
            #expect(try await world.ledger(transaction.transactionId) == ["fulfilled"])
        }
    }
}
