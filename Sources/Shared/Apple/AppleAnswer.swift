/// A verifyReceipt answer ("responseBody"), decoded leniently: fields Apple may add are ignored, and
/// numbers Apple sends as strings decode either way.
public struct AppleAnswer: Sendable, Equatable {
    /// `status`: 0 for a valid receipt, 21000-21199 for the documented errors.
    public var status: Int
    /// `environment`: `Production` or `Sandbox`.
    public var environment: String?
    /// `receipt`, present for status 0 (and 21006).
    public var receipt: AppleReceipt?
    /// `latest_receipt_info`: for a receipt that holds an auto-renewable subscription, Apple's current view of
    /// every transaction in it (renewals and other products included), which may show a refund `in_app`,
    /// signed on the device before it, does not.
    public var latestReceiptInfo: [AppleTransaction]
    /// `pending_renewal_info`.
    public var pendingRenewalInfo: [PendingRenewalInfo]
    /// `is-retryable` (or `is_retryable`; both spellings exist) for statuses 21100-21199; `nil` when absent.
    public var isRetryable: Bool?

    /// Creates an answer.
    public init(
        status: Int, environment: String? = nil, receipt: AppleReceipt? = nil, latestReceiptInfo: [AppleTransaction] = [],
        pendingRenewalInfo: [PendingRenewalInfo] = [], isRetryable: Bool? = nil
    ) {
        self.status = status
        self.environment = environment
        self.receipt = receipt
        self.latestReceiptInfo = latestReceiptInfo
        self.pendingRenewalInfo = pendingRenewalInfo
        self.isRetryable = isRetryable
    }

    /// Reads a verifyReceipt answer's object (``AppleVerdict/classify(body:)`` parses it). Unknown fields
    /// are ignored; numbers Apple sends as strings read either way. A `pending_renewal_info` entry that
    /// cannot be read is left out (it only tells of a grace period); a receipt or transaction that cannot
    /// be read fails the whole answer, since leaving one out could hide a refund.
    init(object: [String: JSONValue]) throws(Lenient.Malformed) {
        let environment: String? = if case .string(let text)? = object["environment"] { text } else { nil }
        self.init(
            status: try Self.status(object),
            environment: environment,
            receipt: try object.present("receipt").map { value throws(Lenient.Malformed) in try AppleReceipt(json: value) },
            latestReceiptInfo: try Lenient.array(object, "latest_receipt_info", AppleTransaction.init(json:)),
            pendingRenewalInfo: Lenient.readableElements(object, "pending_renewal_info", PendingRenewalInfo.init(json:)),
            isRetryable: Self.retryableFlag(object)
        )
    }

    /// `status`, the one field every answer has.
    static func status(_ object: [String: JSONValue]) throws(Lenient.Malformed) -> Int {
        Int(try Lenient.required(object, "status", Lenient.int))
    }

    /// `is-retryable` or `is_retryable`, `nil` when neither is there.
    static func retryableFlag(_ object: [String: JSONValue]) -> Bool? {
        object.present("is-retryable").flatMap(Lenient.bool) ?? object.present("is_retryable").flatMap(Lenient.bool)
    }

    /// Every transaction the answer lists, `in_app` and `latest_receipt_info` together.
    public var allTransactions: [AppleTransaction] {
        (self.receipt?.inApp ?? []) + self.latestReceiptInfo
    }
}
