/// One entry of Apple's `in_app` or `latest_receipt_info` arrays, with Apple's literal field names.
///
/// Apple sends every number here as a string and every date three times (GMT string, milliseconds,
/// Pacific string); optional fields are omitted when `nil`, as Apple omits them.
struct AppleInAppTransaction: Encodable, Sendable {
    var quantity: String
    var productId: String
    var transactionId: String
    var originalTransactionId: String
    var purchaseDate: String
    var purchaseDateMs: String
    var purchaseDatePst: String
    var originalPurchaseDate: String
    var originalPurchaseDateMs: String
    var originalPurchaseDatePst: String
    var expiresDate: String?
    var expiresDateMs: String?
    var expiresDatePst: String?
    var cancellationDate: String?
    var cancellationDateMs: String?
    var cancellationDatePst: String?
    var cancellationReason: String?
    var webOrderLineItemId: String?
    var isTrialPeriod: String
    var isInIntroOfferPeriod: String
    var inAppOwnershipType: String

    private enum CodingKeys: String, CodingKey {
        case quantity
        case productId = "product_id"
        case transactionId = "transaction_id"
        case originalTransactionId = "original_transaction_id"
        case purchaseDate = "purchase_date"
        case purchaseDateMs = "purchase_date_ms"
        case purchaseDatePst = "purchase_date_pst"
        case originalPurchaseDate = "original_purchase_date"
        case originalPurchaseDateMs = "original_purchase_date_ms"
        case originalPurchaseDatePst = "original_purchase_date_pst"
        case expiresDate = "expires_date"
        case expiresDateMs = "expires_date_ms"
        case expiresDatePst = "expires_date_pst"
        case cancellationDate = "cancellation_date"
        case cancellationDateMs = "cancellation_date_ms"
        case cancellationDatePst = "cancellation_date_pst"
        case cancellationReason = "cancellation_reason"
        case webOrderLineItemId = "web_order_line_item_id"
        case isTrialPeriod = "is_trial_period"
        case isInIntroOfferPeriod = "is_in_intro_offer_period"
        case inAppOwnershipType = "in_app_ownership_type"
    }

    /// Apple's rendering of a scenario entry; `nowMs` fills a missing purchase date.
    init(_ entry: ScenarioTransaction, nowMs: Int64) {
        let purchaseMs = entry.purchaseDateMs ?? nowMs
        let originalPurchaseMs = entry.originalPurchaseDateMs ?? purchaseMs
        quantity = String(entry.quantity ?? 1)
        productId = entry.productId
        transactionId = entry.transactionId
        originalTransactionId = entry.originalTransactionId ?? entry.transactionId
        purchaseDate = AppleDateFormatter.gmt(milliseconds: purchaseMs)
        purchaseDateMs = String(purchaseMs)
        purchaseDatePst = AppleDateFormatter.pacificTime(milliseconds: purchaseMs)
        originalPurchaseDate = AppleDateFormatter.gmt(milliseconds: originalPurchaseMs)
        originalPurchaseDateMs = String(originalPurchaseMs)
        originalPurchaseDatePst = AppleDateFormatter.pacificTime(milliseconds: originalPurchaseMs)
        if let expiresMs = entry.expiresDateMs {
            expiresDate = AppleDateFormatter.gmt(milliseconds: expiresMs)
            expiresDateMs = String(expiresMs)
            expiresDatePst = AppleDateFormatter.pacificTime(milliseconds: expiresMs)
            // Apple numbers subscription periods with a web order line item; other kinds have none.
            webOrderLineItemId = entry.webOrderLineItemId ?? entry.transactionId
        } else {
            webOrderLineItemId = entry.webOrderLineItemId
        }
        if let cancellationMs = entry.cancellationDateMs {
            cancellationDate = AppleDateFormatter.gmt(milliseconds: cancellationMs)
            cancellationDateMs = String(cancellationMs)
            cancellationDatePst = AppleDateFormatter.pacificTime(milliseconds: cancellationMs)
            cancellationReason = entry.cancellationReason ?? "0"
        }
        isTrialPeriod = (entry.isTrialPeriod ?? false) ? "true" : "false"
        isInIntroOfferPeriod = (entry.isInIntroOfferPeriod ?? false) ? "true" : "false"
        inAppOwnershipType = entry.inAppOwnershipType ?? "PURCHASED"
    }
}
