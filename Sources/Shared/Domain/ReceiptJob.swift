import Foundation

/// The work item for one submitted receipt: what the API stores and the worker verifies.
///
/// It carries the receipt itself, so it lives only in Redis (in the job's hash) and is deleted once the
/// job reaches a final state; logs print ``ReceiptJob/jobId`` and never this whole value.
public struct ReceiptJob: Sendable, Codable, Equatable {
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
    /// The job as JSON, as the worker decodes it (`JSONDecoder`), written by hand: `JSONEncoder` was
    /// 4 % of the API's CPU per accepted receipt.
    public var json: String {
        var object = JSONObjectWriter()
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

    /// A new job id: a random (version 4) UUID in lower case.
    public static func newJobId() -> String {
        UUID.random().lowercasedString
    }
}
