/// A verifyReceipt answer ("responseBody"), decoded leniently: fields Apple may add are ignored, and
/// numbers Apple sends as strings decode either way.
public struct AppleAnswer: Sendable, Equatable, Decodable {
    /// `status`: 0 for a valid receipt, 21000-21199 for the documented errors.
    public var status: Int
    /// `environment`: `Production` or `Sandbox`.
    public var environment: String?
    /// `receipt`, present for status 0 (and 21006).
    public var receipt: AppleReceipt?
    /// `latest_receipt_info`: every transaction of the receipt's subscriptions, renewals included.
    public var latestReceiptInfo: [AppleTransaction]
    /// `pending_renewal_info`.
    public var pendingRenewalInfo: [PendingRenewalInfo]
    /// `is-retryable` (or `is_retryable`; both spellings exist) for statuses 21100-21199.
    public var isRetryable: Bool

    enum CodingKeys: String, CodingKey {
        case status, environment, receipt
        case latestReceiptInfo = "latest_receipt_info"
        case pendingRenewalInfo = "pending_renewal_info"
        case isRetryableDash = "is-retryable"
        case isRetryableUnderscore = "is_retryable"
    }

    /// Creates an answer.
    public init(
        status: Int, environment: String? = nil, receipt: AppleReceipt? = nil, latestReceiptInfo: [AppleTransaction] = [],
        pendingRenewalInfo: [PendingRenewalInfo] = [], isRetryable: Bool = false
    ) {
        self.status = status
        self.environment = environment
        self.receipt = receipt
        self.latestReceiptInfo = latestReceiptInfo
        self.pendingRenewalInfo = pendingRenewalInfo
        self.isRetryable = isRetryable
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.status = Int(try container.decode(LenientInt.self, forKey: .status).value)
        self.environment = try? container.decodeIfPresent(String.self, forKey: .environment)
        self.receipt = try container.decodeIfPresent(AppleReceipt.self, forKey: .receipt)
        self.latestReceiptInfo = try container.decodeIfPresent([AppleTransaction].self, forKey: .latestReceiptInfo) ?? []
        self.pendingRenewalInfo = try container.decodeIfPresent([PendingRenewalInfo].self, forKey: .pendingRenewalInfo) ?? []
        let dash = (try? container.decodeIfPresent(LenientBool.self, forKey: .isRetryableDash))??.value
        let underscore = (try? container.decodeIfPresent(LenientBool.self, forKey: .isRetryableUnderscore))??.value
        self.isRetryable = dash ?? underscore ?? false
    }

    /// Every transaction the answer lists, `in_app` and `latest_receipt_info` together.
    public var allTransactions: [AppleTransaction] {
        (self.receipt?.inApp ?? []) + self.latestReceiptInfo
    }
}
