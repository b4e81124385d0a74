import Foundation

/// What authenticating a publisher needs: the publisher, the stored hashes of its credentials.
public struct PublisherAuthRecord: Sendable, Equatable {
    /// The publisher.
    public var publisher: Publisher
    /// Its Basic user name.
    public var username: String
    /// SHA-256 of its Basic password.
    public var passwordHash: [UInt8]
    /// SHA-256 of its `X-Publisher-Token`.
    public var tokenHash: [UInt8]
    /// When it was last enabled, disabled or given new credentials: customer tokens issued before then are void.
    public var changedAt: Date

    /// Creates a record.
    public init(publisher: Publisher, username: String, passwordHash: [UInt8], tokenHash: [UInt8], changedAt: Date) {
        self.publisher = publisher
        self.username = username
        self.passwordHash = passwordHash
        self.tokenHash = tokenHash
        self.changedAt = changedAt
    }

    /// ``PublisherCredentials/fingerprint(tokenHash:)`` of its current credentials.
    public var credentialsFingerprint: String {
        PublisherCredentials.fingerprint(tokenHash: self.tokenHash)
    }
}
