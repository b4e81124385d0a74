import Foundation

/// A verified Apple answer seen as evidence about every transaction it lists, not only the submitted one:
/// refunds revoke what they had granted, renewals extend subscriptions their owners hold.
public struct Evidence: Sendable {
    /// The publisher whose app the answer belongs to.
    public var publisherId: UUID
    /// The app (`receipt.bundle_id`).
    public var appId: UUID
    /// The app's products by Apple product id.
    public var products: [String: Product]
    /// Every transaction the answer lists.
    public var transactions: [AppleTransaction]
    /// Grace period ends by `original_transaction_id`.
    public var gracePeriodEnds: [String: Int64]
    /// `Production` or `Sandbox`.
    public var environment: String
    /// The job that brought the answer in.
    public var job: ReceiptJob
    /// When Apple answered.
    public var verifiedAt: Date

    /// Creates evidence from an answer.
    public init(
        publisherId: UUID, appId: UUID, products: [String: Product], answer: AppleAnswer, environment: String, job: ReceiptJob,
        verifiedAt: Date
    ) {
        self.publisherId = publisherId
        self.appId = appId
        self.products = products
        // One entry per transaction; a cancelled copy wins over a stale uncancelled one.
        var byId: [String: AppleTransaction] = [:]
        for transaction in answer.allTransactions where byId[transaction.transactionId]?.isCancelled != true {
            byId[transaction.transactionId] = transaction
        }
        // A stable order (by purchase, then id), so nothing downstream depends on a dictionary's order.
        self.transactions = byId.values.sorted {
            ($0.purchaseDateMilliseconds ?? 0, $0.transactionId) < ($1.purchaseDateMilliseconds ?? 0, $1.transactionId)
        }
        var grace: [String: Int64] = [:]
        for info in answer.pendingRenewalInfo {
            guard let original = info.originalTransactionId, let end = info.gracePeriodExpiresDateMilliseconds else { continue }
            grace[original] = max(grace[original] ?? end, end)
        }
        self.gracePeriodEnds = grace
        self.environment = environment
        self.job = job
        self.verifiedAt = verifiedAt
    }

    /// The periods of the subscription `original` that are access to `offerId`, and its grace period's
    /// end when the subscription's latest period is this offer's. One subscription (one original
    /// transaction) may hold periods of several products of its group, after an upgrade or a downgrade:
    /// each product's periods are access to its own offer, never another's.
    public func subscription(_ original: String, offerId: String) -> (periods: [AppleTransaction], graceEnd: Int64?) {
        let lineage = self.transactions.filter { $0.originalTransactionId == original }
        let periods = lineage.filter { self.products[$0.productId]?.offerId == offerId }
        let latest = lineage.max { ($0.expiresDateMilliseconds ?? 0, $0.transactionId) < ($1.expiresDateMilliseconds ?? 0, $1.transactionId) }
        let current = latest.flatMap { self.products[$0.productId]?.offerId } == offerId
        return (periods, current ? self.gracePeriodEnds[original] : nil)
    }
}
