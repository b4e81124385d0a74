/// One entry of `pending_renewal_info` ("responseBody.Pending_renewal_info").
public struct PendingRenewalInfo: Sendable, Equatable {
    /// `original_transaction_id` of the subscription.
    public var originalTransactionId: String?
    /// `product_id`.
    public var productId: String?
    /// `grace_period_expires_date_ms`: access continues until then while billing is retried.
    public var gracePeriodExpiresDateMilliseconds: Int64?

    /// Creates an entry.
    public init(originalTransactionId: String?, productId: String?, gracePeriodExpiresDateMilliseconds: Int64?) {
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.gracePeriodExpiresDateMilliseconds = gracePeriodExpiresDateMilliseconds
    }

    /// Reads one entry of `pending_renewal_info`; every field read must have a readable kind.
    init(json value: JSONValue) throws(Lenient.Malformed) {
        let object = try Lenient.object(value)
        self.init(
            originalTransactionId: try Lenient.field(object, "original_transaction_id", Lenient.string),
            productId: try Lenient.field(object, "product_id", Lenient.string),
            gracePeriodExpiresDateMilliseconds: try Lenient.field(object, "grace_period_expires_date_ms", Lenient.milliseconds)
        )
    }
}
