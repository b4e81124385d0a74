/// One entry of a scenario's `pendingRenewalInfo` list: the renewal state of one subscription.
struct ScenarioPendingRenewal: Decodable, Equatable, Sendable {
    var productId: String
    var originalTransactionId: String
    /// The product the subscription renews to; defaults to `productId`.
    var autoRenewProductId: String?
    /// Defaults to `true` (the subscription will renew).
    var autoRenewStatus: Bool
    /// End of the billing grace period, in Unix milliseconds.
    var gracePeriodExpiresDateMs: Int64?
    /// Apple's `expiration_intent` code (`"1"`…`"5"`), when the subscription has expired.
    var expirationIntent: String?
    /// Whether Apple is still trying to bill the renewal.
    var isInBillingRetryPeriod: Bool?

    private enum CodingKeys: String, CodingKey {
        case productId, originalTransactionId, autoRenewProductId, autoRenewStatus
        case gracePeriodExpiresDateMs, expirationIntent, isInBillingRetryPeriod
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        guard let productId = try container.decodeLenientStringIfPresent(forKey: .productId),
            let originalTransactionId = try container.decodeLenientStringIfPresent(forKey: .originalTransactionId)
        else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "productId and originalTransactionId are required"))
        }
        self.productId = productId
        self.originalTransactionId = originalTransactionId
        autoRenewProductId = try container.decodeLenientStringIfPresent(forKey: .autoRenewProductId)
        autoRenewStatus = try container.decodeLenientBoolIfPresent(forKey: .autoRenewStatus) ?? true
        gracePeriodExpiresDateMs = try container.decodeLenientInt64IfPresent(forKey: .gracePeriodExpiresDateMs)
        expirationIntent = try container.decodeLenientStringIfPresent(forKey: .expirationIntent)
        isInBillingRetryPeriod = try container.decodeLenientBoolIfPresent(forKey: .isInBillingRetryPeriod)
    }
}
