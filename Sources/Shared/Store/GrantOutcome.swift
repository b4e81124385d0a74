import Foundation

/// What committing a verified purchase did.
public enum GrantOutcome: Sendable, Equatable {
    /// Access (or coins) committed, now or by an earlier delivery of the same transaction; `expiresAt` is
    /// the entitlement's end (`nil`: no end, or a consumable).
    case granted(expiresAt: Date?)
    /// The purchase belongs to another customer of the publisher.
    case alreadyClaimed
    /// Apple refunded or revoked it; any access or credit it gave is withdrawn.
    case refunded
    /// A subscription whose every period has ended.
    case expired(expiresAt: Date?)
}
