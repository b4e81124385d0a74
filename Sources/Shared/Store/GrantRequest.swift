import Foundation

/// Everything needed to commit one verified purchase.
public struct GrantRequest: Sendable {
    /// The job being fulfilled.
    public var job: ReceiptJob
    /// The app Apple's answer belongs to.
    public var app: App
    /// The product the matched transaction bought.
    public var product: Product
    /// The transaction Apple listed that matches the submission.
    public var transaction: AppleTransaction
    /// Every transaction Apple listed with the same `original_transaction_id` (renewals).
    public var renewals: [AppleTransaction]
    /// `grace_period_expires_date_ms` for the subscription, when Apple gives one.
    public var gracePeriodEndMilliseconds: Int64?
    /// `Production` or `Sandbox`.
    public var environment: String
    /// When Apple's answer arrived.
    public var verifiedAt: Date

    /// Creates a request.
    public init(
        job: ReceiptJob, app: App, product: Product, transaction: AppleTransaction, renewals: [AppleTransaction],
        gracePeriodEndMilliseconds: Int64?, environment: String, verifiedAt: Date
    ) {
        self.job = job
        self.app = app
        self.product = product
        self.transaction = transaction
        self.renewals = renewals
        self.gracePeriodEndMilliseconds = gracePeriodEndMilliseconds
        self.environment = environment
        self.verifiedAt = verifiedAt
    }
}
