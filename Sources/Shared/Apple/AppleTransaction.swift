import Foundation

/// One entry of `receipt.in_app` or `latest_receipt_info`, as Apple documents it
/// ("responseBody.Latest_receipt_info"). Millisecond values arrive as strings; numbers are accepted too.
public struct AppleTransaction: Sendable, Equatable {
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

    /// Reads one transaction of `in_app` or `latest_receipt_info`: `product_id` and `transaction_id`
    /// must be there, and every field read must have a readable kind.
    init(json value: JSONValue) throws(Lenient.Malformed) {
        let object = try Lenient.object(value)
        let transactionId = try Lenient.required(object, "transaction_id", Lenient.string)
        let purchase = try Lenient.field(object, "purchase_date_ms", Lenient.milliseconds)
        var cancellation = try Lenient.field(object, "cancellation_date_ms", Lenient.milliseconds)
        if cancellation == nil, object.present("cancellation_date") != nil {
            // A cancellation_date without the _ms twin still means refunded; its exact time is unknown,
            // so the revocation takes effect from the purchase.
            cancellation = purchase ?? 0
        }
        self.init(
            productId: try Lenient.required(object, "product_id", Lenient.string), transactionId: transactionId,
            originalTransactionId: try Lenient.field(object, "original_transaction_id", Lenient.string),
            purchaseDateMilliseconds: purchase, expiresDateMilliseconds: try Lenient.field(object, "expires_date_ms", Lenient.milliseconds),
            cancellationDateMilliseconds: cancellation, quantity: try Self.quantity(object)
        )
    }

    /// Apple's `quantity`: 1 when absent. A purchase is at most 10 (SKPayment's limit); anything outside
    /// 0...1000 is not a quantity, and a grant must not multiply a product's coins by it.
    static func quantity(_ object: [String: JSONValue]) throws(Lenient.Malformed) -> Int {
        guard let quantity = try Lenient.field(object, "quantity", Lenient.int) else { return 1 }
        guard (0...1000).contains(quantity) else { throw Lenient.Malformed() }
        return Int(quantity)
    }

    /// Whether Apple refunded or revoked it.
    public var isCancelled: Bool { self.cancellationDateMilliseconds != nil }

    /// The latest of a subscription's `periods` not refunded, when it (or the subscription's grace period)
    /// has not ended by `now`: what a submission naming a refunded period grants instead.
    public static func latestPaid(_ periods: [AppleTransaction], graceEnd: Int64?, at now: Date) -> AppleTransaction? {
        let paid = periods.filter { !$0.isCancelled }
        guard let latest = paid.max(by: { ($0.expiresDateMilliseconds ?? 0) < ($1.expiresDateMilliseconds ?? 0) }) else { return nil }
        let end = max(latest.expiresDateMilliseconds ?? 0, graceEnd ?? 0)
        return Double(end) / 1000 > now.timeIntervalSince1970 ? latest : nil
    }
}
