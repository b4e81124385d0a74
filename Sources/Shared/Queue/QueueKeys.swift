import Crypto
import Foundation

/// The Redis key layout of one deployment (`TOLLGATE_QUEUE_PREFIX`).
///
/// Every key carries the hash tag `{q}`, so all keys one script touches live in one Redis Cluster slot
/// and the scripts run unchanged on a cluster.
public struct QueueKeys: Sendable, Equatable {
    /// The deployment's prefix.
    public let prefix: String
    /// The stream of jobs waiting for (or held by) workers.
    public let stream: String
    /// The workers' consumer group on ``stream``.
    public let group = "workers"
    /// Delayed retries: job ids scored by due time (Unix ms).
    public let retry: String
    /// Dead letters: one entry per failed job.
    public let dead: String
    /// Jobs that should have a stream entry (queued, processing, promoted), scored by when last seen.
    public let inflight: String
    /// Prefix of the per-job status hashes.
    public let jobPrefix: String
    /// The pub/sub channel on which every change to a customer's access status is announced: the
    /// payload is the change's ``pending(publisherId:customerEmail:offerId:)`` key, or `*` for changes
    /// that may touch any customer (refunds, renewals found in a receipt). A publisher's credentials taken
    /// away (disabled, rotated) are announced there too, as ``revocation(of:)``.
    public let accessChannel: String
    private let revocationPrefix: String

    /// Creates the layout for a prefix.
    public init(prefix: String) {
        self.prefix = prefix
        self.stream = "\(prefix):{q}:jobs"
        self.retry = "\(prefix):{q}:retry"
        self.dead = "\(prefix):{q}:dead"
        self.inflight = "\(prefix):{q}:inflight"
        self.jobPrefix = "\(prefix):{q}:job:"
        self.accessChannel = "\(prefix):{q}:access-changed"
        self.revocationPrefix = "\(prefix):{q}:publisher-revoked:"
    }

    /// The access channel's message that a publisher's credentials were taken away.
    public func revocation(of publisherId: UUID) -> String { self.revocationPrefix + publisherId.lowercasedString }

    /// The publisher an access channel message says lost its credentials, when it says so.
    public func revokedPublisher(_ message: String) -> UUID? {
        guard message.hasPrefix(self.revocationPrefix) else { return nil }
        return UUID(uuidString: String(message.dropFirst(self.revocationPrefix.count)))
    }

    /// The status hash of a job.
    public func job(_ jobId: String) -> String { self.jobPrefix + jobId }

    /// How many receipts Apple's `environment` verified for the workers lately: a hash from the number of a
    /// stretch of time (Unix ms ÷ ``ReceiptQueue/verificationBucketMilliseconds``) to a count.
    public func appleVerifications(_ environment: VerifyReceiptClient.Environment) -> String {
        "\(self.prefix):{q}:apple:verifications:\(environment.rawValue)"
    }

    /// The jobs whose receipts Apple's `environment` answered 21002 lately, scored by when (Unix ms).
    public func appleMalformed(_ environment: VerifyReceiptClient.Environment) -> String {
        "\(self.prefix):{q}:apple:malformed:\(environment.rawValue)"
    }

    /// The key that makes a submission idempotent: publisher, transaction (or receipt digest), customer, offer.
    public func dedup(for job: ReceiptJob) -> String {
        let subject = job.transactionId.map { "tx:\($0)" } ?? "rd:\(ReceiptDigest.hex(of: job.receiptData))"
        let material = "\(job.publisherId.lowercasedString)\n\(subject)\n\(job.customerEmail)\n\(job.offerId)"
        return "\(self.prefix):{q}:dedup:\(Hex.encode(SHA256.hash(data: Array(material.utf8))))"
    }

    /// The key naming the customer a publisher's transaction id was first submitted for.
    public func claim(publisherId: UUID, transactionId: String) -> String {
        "\(self.prefix):{q}:claim:\(publisherId.lowercasedString):\(transactionId)"
    }

    /// The set of unfinished jobs for one customer and offer (access status' `pending`).
    public func pending(publisherId: UUID, customerEmail: String, offerId: String) -> String {
        let material = "\(publisherId.lowercasedString)\n\(customerEmail)\n\(offerId)"
        return "\(self.prefix):{q}:pending:\(Hex.encode(SHA256.hash(data: Array(material.utf8))))"
    }

    /// ``pending(publisherId:customerEmail:offerId:)`` for a job.
    public func pending(for job: ReceiptJob) -> String {
        self.pending(publisherId: job.publisherId, customerEmail: job.customerEmail, offerId: job.offerId)
    }
}

/// The SHA-256 of a receipt: what is stored and compared instead of the receipt itself.
public enum ReceiptDigest {
    /// Lower-case hex SHA-256 of the receipt's base64 text.
    public static func hex(of receiptData: String) -> String {
        Hex.encode(SHA256.hash(data: Array(receiptData.utf8)))
    }
}
