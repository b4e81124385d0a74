import Foundation

/// A publisher: a tenant whose apps, products, jobs and customers are invisible to every other.
public struct Publisher: Sendable, Equatable, Codable {
    /// Its id.
    public var id: UUID
    /// Its display name.
    public var name: String
    /// Whether its credentials are accepted.
    public var enabled: Bool

    /// Creates a publisher.
    public init(id: UUID, name: String, enabled: Bool = true) {
        self.id = id
        self.name = name
        self.enabled = enabled
    }
}
