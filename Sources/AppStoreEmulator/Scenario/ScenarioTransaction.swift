/// One purchase in a scenario's `inApp` or `latestReceiptInfo` list.
///
/// Only `productId` and `transactionId` are required. Dates are Unix milliseconds, given as numbers or
/// strings.
struct ScenarioTransaction: Decodable, Equatable, Sendable {
    var productId: String
    var transactionId: String
    /// Defaults to `transactionId`, as for a first purchase.
    var originalTransactionId: String?
    /// Defaults to the time of the request.
    var purchaseDateMs: Int64?
    /// Defaults to the purchase date.
    var originalPurchaseDateMs: Int64?
    /// Present for subscriptions; its presence is what makes an entry a subscription for the default `latest_receipt_info`.
    var expiresDateMs: Int64?
    /// Present when Apple refunded or revoked the purchase.
    var cancellationDateMs: Int64?
    /// `"0"` (other) or `"1"` (app issue); defaults to `"0"` and is sent only with a cancellation date.
    var cancellationReason: String?
    var quantity: Int?
    var isTrialPeriod: Bool?
    var isInIntroOfferPeriod: Bool?
    /// Sent for subscriptions; defaults to the transaction id.
    var webOrderLineItemId: String?
    /// `PURCHASED` (default) or `FAMILY_SHARED`.
    var inAppOwnershipType: String?

    private enum CodingKeys: String, CodingKey {
        case productId, transactionId, originalTransactionId, purchaseDateMs, originalPurchaseDateMs
        case expiresDateMs, cancellationDateMs, cancellationReason, quantity, isTrialPeriod
        case isInIntroOfferPeriod, webOrderLineItemId, inAppOwnershipType
    }

    /// Builds an entry in code, as tests do.
    init(
        productId: String,
        transactionId: String,
        originalTransactionId: String? = nil,
        purchaseDateMs: Int64? = nil,
        expiresDateMs: Int64? = nil,
        cancellationDateMs: Int64? = nil
    ) {
        self.productId = productId
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.purchaseDateMs = purchaseDateMs
        self.expiresDateMs = expiresDateMs
        self.cancellationDateMs = cancellationDateMs
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        guard let productId = try container.decodeLenientStringIfPresent(forKey: .productId),
            let transactionId = try container.decodeLenientStringIfPresent(forKey: .transactionId)
        else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "productId and transactionId are required"))
        }
        self.productId = productId
        self.transactionId = transactionId
        originalTransactionId = try container.decodeLenientStringIfPresent(forKey: .originalTransactionId)
        purchaseDateMs = try container.decodeLenientInt64IfPresent(forKey: .purchaseDateMs)
        originalPurchaseDateMs = try container.decodeLenientInt64IfPresent(forKey: .originalPurchaseDateMs)
        expiresDateMs = try container.decodeLenientInt64IfPresent(forKey: .expiresDateMs)
        cancellationDateMs = try container.decodeLenientInt64IfPresent(forKey: .cancellationDateMs)
        cancellationReason = try container.decodeLenientStringIfPresent(forKey: .cancellationReason)
        quantity = try container.decodeLenientIntIfPresent(forKey: .quantity)
        isTrialPeriod = try container.decodeLenientBoolIfPresent(forKey: .isTrialPeriod)
        isInIntroOfferPeriod = try container.decodeLenientBoolIfPresent(forKey: .isInIntroOfferPeriod)
        webOrderLineItemId = try container.decodeLenientStringIfPresent(forKey: .webOrderLineItemId)
        inAppOwnershipType = try container.decodeIfPresent(String.self, forKey: .inAppOwnershipType)
    }
}
