import AsyncHTTPClient
import Foundation
import Shared
import Testing
import TestSupport
@testable import Worker

/// Helpers for the Apple-rules suites (issue #3): submitting around the API's deduplication, working
/// jobs concurrently, and reading back what the worker committed (ledger, claims, entitlements, wallet).
extension WorkerHarness {
    static let buyer = "buyer@example.com"
    static let other = "other@example.com"

    /// The fast policy of the rules suites: attempts are cheap, the limit is `maxAttempts`.
    static func fastRetry(maxAttempts: Int = 7) -> RetryPolicy {
        RetryPolicy(baseMilliseconds: 5, maxDelayMilliseconds: 20, maxAttempts: maxAttempts, maxAgeSeconds: 3600)
    }

    /// Enqueues a job straight into the queue as a new job, even when the API would have deduplicated it
    /// (same customer, offer and transaction) or refused it (`already_claimed` in Redis): the worker, not
    /// the API, has to decide. Returns the new job id.
    func inject(email: String = WorkerHarness.buyer, offerId: String, transactionId: String?, receipt: String) async throws -> String {
        let job = ReceiptJob(
            jobId: UUID().uuidString.lowercased(), publisherId: self.publisher.id, customerEmail: email, offerId: offerId,
            transactionId: transactionId, receiptData: receipt, appType: .ios, ipAddress: nil, acceptedAtMilliseconds: WallClock.nowMilliseconds()
        )
        var keys = [self.queue.keys.dedup(for: job)]
        if let transactionId { keys.append(self.queue.keys.claim(publisherId: self.publisher.id, transactionId: transactionId)) }
        try await self.redis.send(["DEL"] + keys)
        guard case .created(let id) = try await self.queue.enqueue(job, keyTTLSeconds: 3600) else { throw ManagedProcess.Failure("not created") }
        return id
    }

    /// Like ``work()``, but processes every delivery it read at the same time, as a worker with spare
    /// concurrency (or several workers) would.
    @discardableResult
    func workConcurrently(using processor: JobProcessor? = nil) async throws -> Int {
        let processor = processor ?? self.processor
        let deliveries = try await self.queue.readNew(consumer: "test", count: 100, blockMilliseconds: 100, blockingClient: self.redis)
        await withTaskGroup(of: Void.self) { group in
            for delivery in deliveries { group.addTask { await processor.process(delivery) } }
        }
        return deliveries.count
    }

    /// Works (concurrently, promoting due retries) until every job is final; returns the records in order.
    func workAllUntilFinal(_ jobIds: [String], using processor: JobProcessor? = nil, timeout: Duration = .seconds(30)) async throws -> [JobRecord] {
        try await Poll.until(timeout: timeout, interval: .milliseconds(20), "\(jobIds.count) jobs final") {
            try await self.queue.promoteDue(now: WallClock.nowMilliseconds())
            try await self.workConcurrently(using: processor)
            var records: [JobRecord] = []
            for id in jobIds {
                guard let record = try await self.queue.record(jobId: id), record.status.isFinal else { return nil }
                records.append(record)
            }
            return records
        }
    }

    /// The job's record now (it must exist).
    func record(_ jobId: String) async throws -> JobRecord {
        try #require(try await self.queue.record(jobId: jobId))
    }

    /// A harness of the rules suites: the fast retry policy, and the app `bundle` selling `products`.
    static func rules(_ bundle: String, selling products: RulesProduct..., body: (WorkerHarness) async throws -> Void) async throws {
        try await Self.with(retry: Self.fastRetry()) { harness in
            try await harness.app(bundle, selling: products)
            try await body(harness)
        }
    }

    /// Registers the app `bundle` and the `products` it sells.
    func app(_ bundle: String, allowSandbox: Bool = true, selling products: [RulesProduct]) async throws {
        try await self.app(bundle, allowSandbox: allowSandbox)
        for product in products { try await self.product(bundle, product) }
    }

    /// Registers `product` for the app `bundle`.
    func product(_ bundle: String, _ product: RulesProduct) async throws {
        try await self.product(bundle, productId: product.productId, offerId: product.offerId, kind: product.kind, coins: product.coins, days: product.days)
    }

    /// An app `bundle` selling the 100-coin consumable `coins100` (offer `COINS100`), and a receipt that buys
    /// it once: the starting point of most rule tests.
    func coinsPurchase(bundle: String, environment: String = "Production") async throws -> (transaction: String, receipt: String) {
        try await self.app(bundle, selling: [.coins100])
        let transaction = ScenarioReceipt.transactionId()
        let receipt = ScenarioReceipt.make(
            bundleId: bundle, purchases: [.init(productId: "coins100", transactionId: transaction)], environment: environment
        )
        return (transaction, receipt)
    }

    // MARK: Emulator

    struct EmulatorStats: Decodable, Equatable {
        var production: Int
        var sandbox: Int
        var failuresInjected: Int
    }

    /// `GET /emulator/stats`: how many verifyReceipt calls each route received.
    func emulatorStats() async throws -> EmulatorStats {
        try await self.emulatorStats(as: EmulatorStats.self)
    }

    /// `GET /emulator/stats`, decoded as the fields a test looks at.
    func emulatorStats<Stats: Decodable>(as _: Stats.Type) async throws -> Stats {
        let response = try await self.http.execute(HTTPClientRequest(url: "\(self.emulatorBase)/emulator/stats"), timeout: .seconds(10))
        let body = try await response.body.collect(upTo: 1 << 20)
        return try JSONDecoder().decode(Stats.self, from: Data(body.readableBytesView))
    }

    /// What the worker's requests carried, from `GET /emulator/stats`.
    struct RequestCounts: Decodable, Equatable {
        var withPassword: Int
        var excludeOldTransactions: Int
    }

    func emulatorRequestCounts() async throws -> RequestCounts {
        try await self.emulatorStats(as: RequestCounts.self)
    }

    // MARK: What the worker committed

    /// One ledger row (`transactions`).
    struct LedgerRow {
        var transactionId: String
        var originalTransactionId: String
        var customerEmail: String
        var offerId: String
        var state: String
        var environment: String
        var receiptDigest: String?
        var jobId: String?
        var receivedAt: Date
        var verifiedAt: Date?
        var fulfilledAt: Date?
        var invalidatedAt: Date?
        var cancellationDate: Date?
        var lastError: String?
    }

    /// Every ledger row, in insertion order.
    func ledger() async throws -> [LedgerRow] {
        try await self.database.query(
            """
            SELECT transaction_id, original_transaction_id, customer_email, offer_id, state, environment, receipt_digest, job_id,
                   received_at, verified_at, fulfilled_at, invalidated_at, cancellation_date, last_error
            FROM transactions ORDER BY id
            """
        ).rows.map { row in
            LedgerRow(
                transactionId: try row.decode(String.self, "transaction_id"),
                originalTransactionId: try row.decode(String.self, "original_transaction_id"),
                customerEmail: try row.decode(String.self, "customer_email"), offerId: try row.decode(String.self, "offer_id"),
                state: try row.decode(String.self, "state"), environment: try row.decode(String.self, "environment"),
                receiptDigest: try row.decode(String?.self, "receipt_digest"), jobId: try row.decode(String?.self, "job_id"),
                receivedAt: try row.decode(Date.self, "received_at"), verifiedAt: try row.decode(Date?.self, "verified_at"),
                fulfilledAt: try row.decode(Date?.self, "fulfilled_at"), invalidatedAt: try row.decode(Date?.self, "invalidated_at"),
                cancellationDate: try row.decode(Date?.self, "cancellation_date"), lastError: try row.decode(String?.self, "last_error")
            )
        }
    }

    /// The ledger row of one Apple transaction, if any.
    func ledgerRow(_ transactionId: String) async throws -> LedgerRow? {
        try await self.ledger().first { $0.transactionId == transactionId }
    }

    /// One entitlement row.
    struct EntitlementRow {
        var customerEmail: String
        var offerId: String
        var expiresAt: Date?
        var revokedAt: Date?
    }

    /// Every entitlement row.
    func entitlements() async throws -> [EntitlementRow] {
        try await self.database.query("SELECT customer_email, offer_id, expires_at, revoked_at FROM entitlements ORDER BY id").rows.map { row in
            EntitlementRow(
                customerEmail: try row.decode(String.self, "customer_email"), offerId: try row.decode(String.self, "offer_id"),
                expiresAt: try row.decode(Date?.self, "expires_at"), revokedAt: try row.decode(Date?.self, "revoked_at")
            )
        }
    }

    /// One wallet entry, with the Apple transaction it belongs to.
    struct WalletEntry: Equatable {
        var customerEmail: String
        var transactionId: String
        var kind: String
        var coins: Int
    }

    /// Every wallet entry, oldest first.
    func walletEntries() async throws -> [WalletEntry] {
        try await self.database.query(
            """
            SELECT w.customer_email, t.transaction_id, w.kind, w.coins
            FROM wallet_entries w JOIN transactions t ON t.id = w.transaction_ref ORDER BY w.id
            """
        ).rows.map { row in
            WalletEntry(
                customerEmail: try row.decode(String.self, "customer_email"), transactionId: try row.decode(String.self, "transaction_id"),
                kind: try row.decode(String.self, "kind"), coins: try row.decode(Int.self, "coins")
            )
        }
    }

    /// `AccessStore.access`: whether the customer holds the offer now, and until when.
    func access(_ offerId: String, email: String = WorkerHarness.buyer) async throws -> (granted: Bool, expiresAt: Date?) {
        try await AccessStore(database: self.database).access(publisherId: self.publisher.id, customerEmail: email, offerId: offerId)
    }

    /// `AccessStore.coinBalance`.
    func balance(_ email: String = WorkerHarness.buyer) async throws -> Int {
        try await AccessStore(database: self.database).coinBalance(publisherId: self.publisher.id, customerEmail: email)
    }

    /// Row count of a table (a fixed name from the tests, never input).
    func count(_ table: String) async throws -> Int {
        try await self.database.query("SELECT count(*)::bigint AS n FROM \(table)").first?.decode(Int.self, "n") ?? -1
    }

    /// SHA-256 hex of a text, computed by PostgreSQL: independent of the worker's own digest code.
    func sha256Hex(_ text: String) async throws -> String {
        try #require(try await self.database.query("SELECT encode(sha256(convert_to($1, 'UTF8')), 'hex') AS d", [text]).first?.decode(String.self, "d"))
    }

    /// Asserts that nothing was granted to anyone: no ledger row, claim, entitlement or wallet entry.
    func expectNothingGranted(sourceLocation: SourceLocation = #_sourceLocation) async throws {
        #expect(try await self.count("transactions") == 0, "ledger rows", sourceLocation: sourceLocation)
        #expect(try await self.count("claims") == 0, "claims", sourceLocation: sourceLocation)
        #expect(try await self.count("entitlements") == 0, "entitlements", sourceLocation: sourceLocation)
        #expect(try await self.count("wallet_entries") == 0, "wallet entries", sourceLocation: sourceLocation)
    }
}

/// Time helpers for scenarios.
enum Millis {
    static let day: Int64 = 86_400_000

    /// Now, in Unix milliseconds.
    static var now: Int64 { Int64(WallClock.nowMilliseconds()) }

    /// A date's Unix milliseconds, rounded (the database keeps microseconds).
    static func of(_ date: Date?) -> Int64? {
        date.map { Int64(($0.timeIntervalSince1970 * 1000).rounded()) }
    }
}

/// A scenario `inApp` entry with every field the rules tests need; `numbers` writes the millisecond
/// values as JSON numbers instead of strings (the emulator accepts both).
struct ScenarioEntry {
    var productId: String
    var transactionId: String
    var originalTransactionId: String?
    var purchaseDateMs: Int64?
    var expiresDateMs: Int64?
    var cancellationDateMs: Int64?
    var quantity: Int?

    init(
        _ productId: String, _ transactionId: String, original: String? = nil, purchase: Int64? = nil, expires: Int64? = nil,
        cancelled: Int64? = nil, quantity: Int? = nil
    ) {
        self.productId = productId
        self.transactionId = transactionId
        self.originalTransactionId = original
        self.purchaseDateMs = purchase
        self.expiresDateMs = expires
        self.cancellationDateMs = cancelled
        self.quantity = quantity
    }

    func json(numbers: Bool) -> [String: Any] {
        func ms(_ value: Int64) -> Any { numbers ? NSNumber(value: value) : String(value) }
        var object: [String: Any] = ["productId": self.productId, "transactionId": self.transactionId]
        if let originalTransactionId { object["originalTransactionId"] = originalTransactionId }
        if let purchaseDateMs { object["purchaseDateMs"] = ms(purchaseDateMs) }
        if let expiresDateMs { object["expiresDateMs"] = ms(expiresDateMs) }
        if let cancellationDateMs { object["cancellationDateMs"] = ms(cancellationDateMs) }
        if let quantity { object["quantity"] = quantity }
        return object
    }
}

extension ScenarioReceipt {
    /// A scenario receipt from ``ScenarioEntry`` values, with optional grace periods (`original → end`) and any
    /// other scenario field in `extra`.
    static func make(
        bundleId: String, entries: [ScenarioEntry], environment: String = "Production", numbers: Bool = false,
        grace: [(original: String, productId: String, endMs: Int64)] = [], extra: [String: Any] = [:]
    ) -> String {
        var fields = extra
        fields["inApp"] = entries.map { $0.json(numbers: numbers) }
        if !grace.isEmpty {
            fields["pendingRenewalInfo"] = grace.map { item -> [String: Any] in
                [
                    "productId": item.productId, "originalTransactionId": item.original,
                    "gracePeriodExpiresDateMs": numbers ? NSNumber(value: item.endMs) : String(item.endMs) as Any,
                ]
            }
        }
        return ScenarioReceipt.make(bundleId: bundleId, purchases: [], environment: environment, extra: fields)
    }
}

/// Subscription periods for scenarios.
enum Subscription {
    /// `count` consecutive 30-day periods of one subscription (the first one is `original` itself), the
    /// last ending at `lastEnd`, listed out of order as Apple may: the newest in the middle, so neither
    /// the first nor the last element is the latest period.
    static func periods(_ productId: String, original: String, count: Int, lastEnd: Int64) -> [ScenarioEntry] {
        var entries = (0..<count).map { index -> ScenarioEntry in
            let end = lastEnd - Int64(count - 1 - index) * 30 * Millis.day
            let id = index == 0 ? original : ScenarioReceipt.transactionId()
            return ScenarioEntry(productId, id, original: original, purchase: end - 30 * Millis.day, expires: end)
        }
        let newest = entries.removeLast()
        entries.insert(newest, at: entries.count / 2)
        return entries
    }
}

/// A product the rules suites sell, under its usual ids: the Apple product id in lower case, the offer's in
/// upper case.
struct RulesProduct: Sendable {
    let productId: String
    let offerId: String
    let kind: ProductKind
    var coins: Int? = nil
    var days: Int? = nil

    static let coins50 = RulesProduct(productId: "coins50", offerId: "COINS50", kind: .consumable, coins: 50)
    static let coins100 = RulesProduct(productId: "coins100", offerId: "COINS100", kind: .consumable, coins: 100)
    static let premium = RulesProduct(productId: "premium", offerId: "PREMIUM", kind: .nonConsumable)
    static let monthly = RulesProduct(productId: "monthly", offerId: "MONTHLY", kind: .autoRenewable)
    static let yearly = RulesProduct(productId: "yearly", offerId: "YEARLY", kind: .autoRenewable)
    static let pass30 = RulesProduct(productId: "pass30", offerId: "PASS30", kind: .nonRenewing, days: 30)
}
