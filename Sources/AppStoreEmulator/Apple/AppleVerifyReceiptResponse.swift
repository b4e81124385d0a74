/// Apple's verifyReceipt answer, with Apple's literal field names.
///
/// Written by hand (not synthesised) because the retry flag has two spellings in the wild and a scenario
/// chooses which one a client must cope with.
struct AppleVerifyReceiptResponse: Encodable, Sendable {
    var status: Int
    var environment: AppleEnvironment?
    /// Apple's retry flag, sent only for statuses 21100–21199 (or when a scenario forces it).
    var isRetryable: Bool?
    /// Which spelling of the retry flag to write.
    var retryableKey: RetryableKey = .hyphen
    var receipt: AppleReceipt?
    var latestReceiptInfo: [AppleInAppTransaction]?
    /// The receipt data echoed back, sent with `latest_receipt_info`.
    var latestReceipt: String?
    var pendingRenewalInfo: [ApplePendingRenewalInfo]?

    private enum CodingKeys: String, CodingKey {
        case status
        case environment
        case isRetryableHyphen = "is-retryable"
        case isRetryableUnderscore = "is_retryable"
        case receipt
        case latestReceiptInfo = "latest_receipt_info"
        case latestReceipt = "latest_receipt"
        case pendingRenewalInfo = "pending_renewal_info"
    }

    /// An answer that carries nothing but the status, as Apple sends for 21000, 21002, 21007 and the like.
    static func status(_ status: Int) -> AppleVerifyReceiptResponse {
        AppleVerifyReceiptResponse(status: status)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(status, forKey: .status)
        try container.encodeIfPresent(environment, forKey: .environment)
        if let isRetryable {
            let key: CodingKeys = retryableKey == .hyphen ? .isRetryableHyphen : .isRetryableUnderscore
            try container.encode(isRetryable, forKey: key)
        }
        try container.encodeIfPresent(receipt, forKey: .receipt)
        try container.encodeIfPresent(latestReceiptInfo, forKey: .latestReceiptInfo)
        try container.encodeIfPresent(latestReceipt, forKey: .latestReceipt)
        try container.encodeIfPresent(pendingRenewalInfo, forKey: .pendingRenewalInfo)
    }
}
