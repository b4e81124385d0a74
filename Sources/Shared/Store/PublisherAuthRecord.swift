/// What authenticating a publisher needs: the publisher and the stored hash of its Basic password.
public struct PublisherAuthRecord: Sendable, Equatable {
    /// The publisher.
    public var publisher: Publisher
    /// Its Basic user name.
    public var username: String
    /// SHA-256 of its Basic password.
    public var passwordHash: [UInt8]

    /// Creates a record.
    public init(publisher: Publisher, username: String, passwordHash: [UInt8]) {
        self.publisher = publisher
        self.username = username
        self.passwordHash = passwordHash
    }
}
