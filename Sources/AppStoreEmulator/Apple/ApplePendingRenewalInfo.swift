/// One entry of Apple's `pending_renewal_info` array, with Apple's literal field names.
struct ApplePendingRenewalInfo: Encodable, Sendable {
    var autoRenewProductId: String
    var productId: String
    var originalTransactionId: String
    /// `"1"` when the subscription will renew, `"0"` when the customer turned renewal off.
    var autoRenewStatus: String
    var expirationIntent: String?
    var isInBillingRetryPeriod: String?
    var gracePeriodExpiresDate: String?
    var gracePeriodExpiresDateMs: String?
    var gracePeriodExpiresDatePst: String?

    private enum CodingKeys: String, CodingKey {
        case autoRenewProductId = "auto_renew_product_id"
        case productId = "product_id"
        case originalTransactionId = "original_transaction_id"
        case autoRenewStatus = "auto_renew_status"
        case expirationIntent = "expiration_intent"
        case isInBillingRetryPeriod = "is_in_billing_retry_period"
        case gracePeriodExpiresDate = "grace_period_expires_date"
        case gracePeriodExpiresDateMs = "grace_period_expires_date_ms"
        case gracePeriodExpiresDatePst = "grace_period_expires_date_pst"
    }

    /// Apple's rendering of a scenario's renewal entry.
    init(_ entry: ScenarioPendingRenewal) {
        autoRenewProductId = entry.autoRenewProductId ?? entry.productId
        productId = entry.productId
        originalTransactionId = entry.originalTransactionId
        autoRenewStatus = entry.autoRenewStatus ? "1" : "0"
        expirationIntent = entry.expirationIntent
        isInBillingRetryPeriod = entry.isInBillingRetryPeriod.map { $0 ? "1" : "0" }
        if let graceMs = entry.gracePeriodExpiresDateMs {
            gracePeriodExpiresDate = AppleDateFormatter.gmt(milliseconds: graceMs)
            gracePeriodExpiresDateMs = String(graceMs)
            gracePeriodExpiresDatePst = AppleDateFormatter.pacificTime(milliseconds: graceMs)
        }
    }
}
