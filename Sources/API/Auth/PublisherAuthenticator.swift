import Foundation
import Shared

/// Checks publisher credentials and customer tokens against ``PublisherDirectory``, every publisher's
/// credentials in memory: a disabled publisher or rotated credentials stop working on every API process
/// as soon as the change's announcement reaches it, and within ``PublisherDirectory/lifetime`` seconds
/// without one; so do the customer tokens obtained with them.
struct PublisherAuthenticator: Sendable {
    let directory: PublisherDirectory
    /// `nil` when `TOLLGATE_TOKEN_SECRET` is unset: customer tokens are refused.
    let customerTokens: CustomerTokens?

    /// The enabled publisher holding both credentials, or `nil`.
    func authenticate(token: String, username: String, password: String) async throws -> Publisher? {
        let user = Array(username.utf8)
        let passwordHash = PublisherCredentials.hash(password)
        return try await self.directory.record(tokenHash: PublisherCredentials.hash(token)) { record in
            let userMatches = PublisherCredentials.constantTimeEquals(user, Array(record.username.utf8))
            let passwordMatches = PublisherCredentials.constantTimeEquals(passwordHash, record.passwordHash)
            return record.publisher.enabled && userMatches && passwordMatches
        }?.publisher
    }

    /// The enabled publisher whose `X-Publisher-Token` this is (the Basic half is not checked).
    func publisher(token: String) async throws -> Publisher? {
        try await self.directory.record(tokenHash: PublisherCredentials.hash(token)) { $0.publisher.enabled }?.publisher
    }

    /// The customer a valid token names, with its publisher, which must exist and be enabled and still
    /// hold the credentials that obtained the token, and not have been disabled since it was issued: a
    /// publisher disabled and enabled again does not bring back the tokens of before. (A token's `iat` is in
    /// whole seconds: one issued in the second of the change counts as after it.)
    func authenticate(customerToken: String) async throws -> (Publisher, CustomerTokens.Identity)? {
        guard let identity = await self.customerTokens?.verify(customerToken),
            let record = try await self.directory.record(id: identity.publisherId, accepts: {
                $0.publisher.enabled && $0.credentialsFingerprint == identity.credentials
                    && identity.issuedAt.timeIntervalSince1970 >= $0.changedAt.timeIntervalSince1970.rounded(.down)
            })
        else { return nil }
        return (record.publisher, identity)
    }

    /// Forgets every publisher, after an admin change in this process, so it applies here at once (other
    /// processes follow when its announcement reaches them, ``PublisherDirectory/revoke(_:)``).
    func forgetCachedPublishers() {
        self.directory.invalidate()
    }
}
