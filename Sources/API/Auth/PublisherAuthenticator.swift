import Foundation
import Shared

/// Checks publisher credentials and customer tokens, caching publisher look-ups for a few seconds: a request
/// costs no database round trip for auth, and a disabled publisher or rotated credentials stop working on
/// every API process within ``cacheLifetime`` seconds, and so do the customer tokens obtained with them.
///
/// A token that names no publisher is remembered as such too: middleware still sending a token rotated
/// away costs one look-up per lifetime, not one per request. (Tokens are random secrets: none names a
/// publisher before it is issued.)
///
/// While PostgreSQL is away, what was looked up in the last ``staleLifetime`` seconds still answers, so
/// receipts keep being accepted into Redis (the workers wait for PostgreSQL); admin changes cannot be
/// made meanwhile anyway.
struct PublisherAuthenticator: Sendable {
    static let cacheLifetime = 5.0
    static let staleLifetime = 600.0

    /// A look-up by token, found or not.
    private struct TokenLookup: Sendable {
        let record: PublisherAuthRecord?
    }

    let catalog: CatalogStore
    /// `nil` when `TOLLGATE_TOKEN_SECRET` is unset: customer tokens are refused.
    let customerTokens: CustomerTokens?
    private let byToken: ExpiringCache<[UInt8], TokenLookup>
    private let byId: ExpiringCache<UUID, PublisherAuthRecord>

    init(catalog: CatalogStore, customerTokens: CustomerTokens?, cacheLifetime: Double = Self.cacheLifetime) {
        self.catalog = catalog
        self.customerTokens = customerTokens
        self.byToken = ExpiringCache(lifetime: cacheLifetime, staleFor: Self.staleLifetime)
        self.byId = ExpiringCache(lifetime: cacheLifetime, staleFor: Self.staleLifetime)
    }

    /// The enabled publisher holding both credentials, or `nil`.
    func authenticate(token: String, username: String, password: String) async throws -> Publisher? {
        guard let record = try await self.record(token: token) else { return nil }
        let userMatches = PublisherCredentials.constantTimeEquals(Array(username.utf8), Array(record.username.utf8))
        let passwordMatches = PublisherCredentials.constantTimeEquals(PublisherCredentials.hash(password), record.passwordHash)
        return userMatches && passwordMatches ? record.publisher : nil
    }

    /// The enabled publisher whose `X-Publisher-Token` this is (the Basic half is not checked).
    func publisher(token: String) async throws -> Publisher? {
        try await self.record(token: token)?.publisher
    }

    /// The customer a valid token names, with its publisher, which must exist and be enabled and still
    /// hold the credentials that obtained the token.
    func authenticate(customerToken: String) async throws -> (Publisher, CustomerTokens.Identity)? {
        guard let identity = await self.customerTokens?.verify(customerToken),
            let record = try await self.byId.value(for: identity.publisherId, load: { try await self.catalog.publisherAuth(id: identity.publisherId) }),
            record.publisher.enabled, identity.credentials == record.credentialsFingerprint
        else { return nil }
        return (record.publisher, identity)
    }

    /// Forgets every cached publisher, after an admin change in this process, so it applies here at once
    /// (other processes follow within ``cacheLifetime``).
    func forgetCachedPublishers() {
        self.byToken.removeAll()
        self.byId.removeAll()
    }

    private func record(token: String) async throws -> PublisherAuthRecord? {
        let tokenHash = PublisherCredentials.hash(token)
        let lookup = try await self.byToken.value(for: tokenHash) { TokenLookup(record: try await self.catalog.publisherAuth(tokenHash: tokenHash)) }
        guard let record = lookup?.record, record.publisher.enabled else { return nil }
        return record
    }
}
