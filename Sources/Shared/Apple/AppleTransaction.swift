/// One entry of `receipt.in_app` or `latest_receipt_info`, as Apple documents it
/// ("responseBody.Latest_receipt_info"). Millisecond values arrive as strings; numbers are accepted too.
public struct AppleTransaction: Sendable, Equatable, Decodable {
    /// `product_id`.
    public var productId: String
    /// `transaction_id`.
    public var transactionId: String
    /// `original_transaction_id` (the transaction itself when Apple omits it).
    public var originalTransactionId: String
    /// `purchase_date_ms`.
    public var purchaseDateMilliseconds: Int64?
    /// `expires_date_ms`, for subscriptions.
    public var expiresDateMilliseconds: Int64?
    /// `cancellation_date_ms`: present when Apple refunded or revoked the transaction.
    public var cancellationDateMilliseconds: Int64?
    /// `quantity`.
    public var quantity: Int

    enum CodingKeys: String, CodingKey {
        case productId = "product_id"
        case transactionId = "transaction_id"
        case originalTransactionId = "original_transaction_id"
        case purchaseDateMilliseconds = "purchase_date_ms"
        case expiresDateMilliseconds = "expires_date_ms"
        case cancellationDateMilliseconds = "cancellation_date_ms"
        case cancellationDate = "cancellation_date"
        case quantity
    }

    /// Creates a transaction (tests, and the classification of answers).
    public init(
        productId: String, transactionId: String, originalTransactionId: String? = nil, purchaseDateMilliseconds: Int64? = nil,
        expiresDateMilliseconds: Int64? = nil, cancellationDateMilliseconds: Int64? = nil, quantity: Int = 1
    ) {
        self.productId = productId
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId ?? transactionId
        self.purchaseDateMilliseconds = purchaseDateMilliseconds
        self.expiresDateMilliseconds = expiresDateMilliseconds
        self.cancellationDateMilliseconds = cancellationDateMilliseconds
        self.quantity = quantity
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.productId = try container.decode(LenientString.self, forKey: .productId).value
        self.transactionId = try container.decode(LenientString.self, forKey: .transactionId).value
        self.originalTransactionId =
            try container.decodeIfPresent(LenientString.self, forKey: .originalTransactionId)?.value ?? self.transactionId
        self.purchaseDateMilliseconds = try container.decodeIfPresent(LenientInt.self, forKey: .purchaseDateMilliseconds)?.value
        self.expiresDateMilliseconds = try container.decodeIfPresent(LenientInt.self, forKey: .expiresDateMilliseconds)?.value
        var cancellation = try container.decodeIfPresent(LenientInt.self, forKey: .cancellationDateMilliseconds)?.value
        if cancellation == nil, container.contains(.cancellationDate) {
            // A cancellation_date without the _ms twin still means refunded; its exact time is unknown,
            // so the revocation takes effect from the purchase.
            cancellation = self.purchaseDateMilliseconds ?? 0
        }
        self.cancellationDateMilliseconds = cancellation
        self.quantity = Int(try container.decodeIfPresent(LenientInt.self, forKey: .quantity)?.value ?? 1)
    }

    /// Whether Apple refunded or revoked it.
    public var isCancelled: Bool { self.cancellationDateMilliseconds != nil }
}
