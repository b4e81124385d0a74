/// A verifyReceipt answer ("responseBody"), decoded leniently: fields Apple may add are ignored, and
/// numbers Apple sends as strings decode either way.
public struct AppleAnswer: Sendable, Equatable {
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

    /// Reads a verifyReceipt answer, or `nil` when it is not one: not a JSON object, no status, or a
    /// receipt, transaction or renewal that lacks what it must have or holds a field of the wrong kind.
    /// Unknown fields are ignored.
    public init?(json bytes: UnsafeRawBufferPointer) {
        // Apple's answers nest four deep (answer, receipt, in_app, transaction); the limit bounds a hostile one.
        guard let object = JSONValue.object(bytes, maxDepth: 32) else { return nil }
        do {
            try self.init(object: object)
        } catch {
            return nil
        }
    }

    private init(object: [String: JSONValue]) throws(Lenient.Malformed) {
        let environment: String? = if case .string(let text)? = object["environment"] { text } else { nil }
        self.init(
            status: Int(try Lenient.required(object, "status", Lenient.int)),
            environment: environment,
            receipt: try object.present("receipt").map { value throws(Lenient.Malformed) in try AppleReceipt(json: value) },
            latestReceiptInfo: try Lenient.array(object, "latest_receipt_info", AppleTransaction.init(json:)),
            pendingRenewalInfo: try Lenient.array(object, "pending_renewal_info", PendingRenewalInfo.init(json:)),
            isRetryable: object.present("is-retryable").flatMap(Lenient.bool) ?? object.present("is_retryable").flatMap(Lenient.bool)
                ?? false
        )
    }

    /// Every transaction the answer lists, `in_app` and `latest_receipt_info` together.
    public var allTransactions: [AppleTransaction] {
        (self.receipt?.inApp ?? []) + self.latestReceiptInfo
    }
}
