import Crypto

/// A Lua script that runs atomically in Redis, called by its SHA-1 (`EVALSHA`).
public struct RedisScript: Sendable, Hashable {
    /// A short name for logs and errors.
    public let name: String
    /// The Lua source.
    public let source: String
    /// The SHA-1 of the source, as Redis computes it.
    public let sha: String

    /// Creates a script from its source.
    public init(name: String, source: String) {
        self.name = name
        self.source = source
        self.sha = Hex.encode(Insecure.SHA1.hash(data: Array(source.utf8)))
    }
}
