import Foundation

/// The work item for one submitted receipt: what the API stores and the worker verifies.
///
/// It carries the receipt itself, so it lives only in Redis (in the job's hash) and is deleted once the
/// job reaches a final state; logs print ``ReceiptJob/jobId`` and never this whole value.
public struct ReceiptJob: Sendable, Equatable {
    /// The job's id, as returned to the publisher.
    public var jobId: String
    /// The publisher that submitted it.
    public var publisherId: UUID
    /// The customer's email, lower-cased (emails compare case-insensitively).
    public var customerEmail: String
    /// The offer the publisher says was bought.
    public var offerId: String
    /// The transaction the publisher says was bought; trusted only once found in Apple's answer.
    public var transactionId: String?
    /// The base64 receipt, sent to Apple as is.
    public var receiptData: String
    /// The platform.
    public var appType: AppType
    /// The buyer's IP address, when given.
    public var ipAddress: String?
    /// When the API accepted it, in Unix milliseconds.
    public var acceptedAtMilliseconds: Int

    /// Creates a job.
    public init(
        jobId: String, publisherId: UUID, customerEmail: String, offerId: String, transactionId: String?,
        receiptData: String, appType: AppType, ipAddress: String?, acceptedAtMilliseconds: Int
    ) {
        self.jobId = jobId
        self.publisherId = publisherId
        self.customerEmail = customerEmail
        self.offerId = offerId
        self.transactionId = transactionId
        self.receiptData = receiptData
        self.appType = appType
        self.ipAddress = ipAddress
        self.acceptedAtMilliseconds = acceptedAtMilliseconds
    }
}

extension ReceiptJob {
    /// The payload's version (`"v"`), raised when a field changes what a job means: a worker reading a higher one
    /// knows it cannot do that job right, and dead-letters it as unreadable (requeued once the workers are
    /// upgraded) instead of ignoring what it does not know. A payload without one is version 1.
    public static let payloadVersion = 1

    /// The job as JSON, as ``init(json:)`` reads it, written by hand: `JSONEncoder` was 4 % of the API's
    /// CPU per accepted receipt.
    public var json: String {
        var object = JSONObjectWriter()
        object.add("v", Self.payloadVersion)
        object.add("acceptedAtMilliseconds", self.acceptedAtMilliseconds)
        object.add("appType", self.appType.rawValue)
        object.add("customerEmail", self.customerEmail)
        object.add("ipAddress", self.ipAddress)
        object.add("jobId", self.jobId)
        object.add("offerId", self.offerId)
        object.add("publisherId", self.publisherId.lowercasedString)
        object.add("receiptData", self.receiptData)
        object.add("transactionId", self.transactionId)
        return object.json
    }

    /// Reads what ``json`` writes (`JSONDecoder` was 1.3 % of a draining worker's CPU); `nil` when `json`
    /// is not a job, or one of a later ``payloadVersion``.
    public init?(json: String) {
        var json = json
        guard let object = json.withUTF8({ JSONValue.object(UnsafeRawBufferPointer($0), maxDepth: 1, maxValues: 64) }) else { return nil }
        if let version = object.present("v") {
            guard case .number(let literal) = version, let number = Int(literal), (1...Self.payloadVersion).contains(number) else { return nil }
        }
        guard
            case .string(let jobId)? = object["jobId"],
            case .string(let publisher)? = object["publisherId"], let publisherId = UUID(uuidString: publisher),
            case .string(let customerEmail)? = object["customerEmail"],
            case .string(let offerId)? = object["offerId"],
            case .string(let receiptData)? = object["receiptData"],
            case .string(let platform)? = object["appType"], let appType = AppType(rawValue: platform),
            case .number(let accepted)? = object["acceptedAtMilliseconds"], let acceptedAt = Int(accepted)
        else { return nil }
        // The optional fields: absent or null is nil, anything but a string is not a job.
        var optional: [String: String] = [:]
        for key in ["transactionId", "ipAddress"] {
            guard let value = object.present(key) else { continue }
            guard case .string(let text) = value else { return nil }
            optional[key] = text
        }
        self.init(
            jobId: jobId, publisherId: publisherId, customerEmail: customerEmail, offerId: offerId,
            transactionId: optional["transactionId"], receiptData: receiptData, appType: appType, ipAddress: optional["ipAddress"],
            acceptedAtMilliseconds: acceptedAt
        )
    }

    /// A new job id: a random (version 4) UUID in lower case.
    public static func newJobId() -> String {
        UUID.random().lowercasedString
    }
}
