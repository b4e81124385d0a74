/// Why a job was rejected, failed, or is being retried (CONTRACT.md).
public enum JobReason: String, Sendable, Codable, CaseIterable {
    // Rejections (final).
    case invalidReceipt = "invalid_receipt"
    case bundleMismatch = "bundle_mismatch"
    case offerMismatch = "offer_mismatch"
    case transactionNotFound = "transaction_not_found"
    case refunded
    case expired
    case sandboxNotAllowed = "sandbox_not_allowed"
    case alreadyClaimed = "already_claimed"
    // Failures (final, dead-lettered) and the reasons shown while retrying.
    case appleUnavailable = "apple_unavailable"
    case sharedSecretMismatch = "shared_secret_mismatch"
    case `internal`
}
