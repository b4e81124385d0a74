import Crypto
import Foundation

/// A publisher's two secrets, shown once at creation; only their hashes are stored.
public struct PublisherCredentials: Sendable, Equatable {
    /// The `X-Publisher-Token` value.
    public let publisherToken: String
    /// The HTTP Basic user name (not secret on its own).
    public let username: String
    /// The HTTP Basic password.
    public let password: String

    /// Generates fresh credentials from the system's secure random source.
    public static func generate() -> PublisherCredentials {
        PublisherCredentials(
            publisherToken: "pt_" + Self.randomText(bytes: 32),
            username: "pub_" + Hex.encode(Self.randomBytes(8)),
            password: Self.randomText(bytes: 24)
        )
    }

    /// Creates credentials from known values.
    public init(publisherToken: String, username: String, password: String) {
        self.publisherToken = publisherToken
        self.username = username
        self.password = password
    }

    /// The stored form of a secret.
    ///
    /// A plain SHA-256 suffices here (no slow KDF): both secrets are 192+ bits from a CSPRNG, never chosen
    /// by a person, so there is nothing for a dictionary attack to guess, and hashing must stay cheap on
    /// the request path.
    public static func hash(_ secret: String) -> [UInt8] {
        Array(SHA256.hash(data: Array(secret.utf8)))
    }

    /// What a customer token records of the credentials that obtained it (CustomerTokens' `cre` claim): the
    /// first 12 bytes of a SHA-256 over the stored token hash, as hex. Rotating the credentials changes it,
    /// so every token obtained with the old ones stops working; it reveals nothing of the token itself.
    public static func fingerprint(tokenHash: [UInt8]) -> String {
        Hex.encode(SHA256.hash(data: Array("tollgate customer token credentials\n".utf8) + tokenHash).prefix(12))
    }

    /// Compares two digests in time independent of where they differ.
    public static func constantTimeEquals(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        guard lhs.count == rhs.count else { return false }
        var difference: UInt8 = 0
        for index in lhs.indices { difference |= lhs[index] ^ rhs[index] }
        return difference == 0
    }

    private static func randomBytes(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }

    private static func randomText(bytes count: Int) -> String {
        Data(Self.randomBytes(count)).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
