/// One entry of `pending_renewal_info` ("responseBody.Pending_renewal_info").
public struct PendingRenewalInfo: Sendable, Equatable, Decodable {
    /// `original_transaction_id` of the subscription.
    public var originalTransactionId: String?
    /// `product_id`.
    public var productId: String?
    /// `grace_period_expires_date_ms`: access continues until then while billing is retried.
    public var gracePeriodExpiresDateMilliseconds: Int64?

    enum CodingKeys: String, CodingKey {
        case originalTransactionId = "original_transaction_id"
        case productId = "product_id"
        case gracePeriodExpiresDateMilliseconds = "grace_period_expires_date_ms"
    }

    /// Creates an entry.
    public init(originalTransactionId: String?, productId: String?, gracePeriodExpiresDateMilliseconds: Int64?) {
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.gracePeriodExpiresDateMilliseconds = gracePeriodExpiresDateMilliseconds
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.originalTransactionId = try container.decodeIfPresent(LenientString.self, forKey: .originalTransactionId)?.value
        self.productId = try container.decodeIfPresent(LenientString.self, forKey: .productId)?.value
        self.gracePeriodExpiresDateMilliseconds =
            try container.decodeIfPresent(LenientInt.self, forKey: .gracePeriodExpiresDateMilliseconds)?.value
    }
}
