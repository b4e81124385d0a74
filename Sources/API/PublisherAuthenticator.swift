import Shared

/// Checks publisher credentials against the stored hashes, caching lookups for a few seconds.
struct PublisherAuthenticator: Sendable {
    let catalog: CatalogStore
    let cache = ExpiringCache<[UInt8], PublisherAuthRecord>(lifetime: 5)

    /// The publisher holding both credentials, or `nil`.
    func authenticate(token: String, username: String, password: String) async throws -> Publisher? {
        let tokenHash = PublisherCredentials.hash(token)
        guard let record = try await self.cache.value(for: tokenHash, load: { try await self.catalog.publisherAuth(tokenHash: tokenHash) }),
            record.publisher.enabled
        else { return nil }
        let userMatches = PublisherCredentials.constantTimeEquals(Array(username.utf8), Array(record.username.utf8))
        let passwordMatches = PublisherCredentials.constantTimeEquals(PublisherCredentials.hash(password), record.passwordHash)
        return userMatches && passwordMatches ? record.publisher : nil
    }
}
