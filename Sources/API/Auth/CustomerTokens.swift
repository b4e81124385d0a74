import Foundation
import JWTKit
import Shared

/// Customer tokens: short-lived JWTs (HS256, signed with `TOLLGATE_TOKEN_SECRET`) that a publisher obtains
/// for one of its customers and hands to an app, so the app can read that customer's access and nothing else.
///
/// A token names its publisher (`aud`) and its customer (`sub`), and expires (`exp`). It also records the
/// publisher credentials that obtained it (`cre`, ``PublisherCredentials/fingerprint(tokenHash:)``): the
/// authenticator refuses it once those credentials are rotated. Anything else — another signature, a header
/// naming another algorithm, a missing or past `exp`, a foreign issuer, no `cre` — is refused.
struct CustomerTokens: Sendable {
    /// What a valid token says.
    struct Identity: Sendable, Equatable {
        let publisherId: UUID
        let customerEmail: String
        /// The fingerprint of the publisher credentials that obtained the token.
        let credentials: String
        /// When it was issued (whole seconds).
        let issuedAt: Date
    }

    /// The signed claims.
    struct Payload: JWTPayload, Equatable {
        var iss: IssuerClaim
        var aud: AudienceClaim
        var sub: SubjectClaim
        var iat: IssuedAtClaim
        var exp: ExpirationClaim
        var cre: String

        func verify(using algorithm: some JWTAlgorithm) async throws {
            try self.exp.verifyNotExpired()
            guard self.iss.value == CustomerTokens.issuer else { throw JWTError.claimVerificationFailure(failedClaim: self.iss, reason: "issuer") }
        }
    }

    static let issuer = "tollgate"

    private let keys: JWTKeyCollection
    /// How long a token is valid.
    let lifetimeSeconds: Int

    init(secret: String, lifetimeSeconds: Int) async {
        self.keys = JWTKeyCollection()
        await self.keys.add(hmac: Self.key(secret), digestAlgorithm: .sha256)
        self.lifetimeSeconds = lifetimeSeconds
    }

    /// The signing key. JWTKit traps (an `assert`, in debug builds) on an HMAC key shorter than the hash's
    /// 32 bytes, where Tollgate promises only a warning. HMAC pads any key shorter than its 64-byte block with
    /// zeros, so a short secret padded to 32 bytes signs exactly as the secret itself.
    static func key(_ secret: String) -> HMACKey {
        let bytes = Array(secret.utf8)
        return HMACKey(from: bytes.count >= 32 ? bytes : bytes + [UInt8](repeating: 0, count: 32 - bytes.count))
    }

    /// A token for one customer of one publisher, obtained with the credentials whose fingerprint is
    /// `credentials`, and when it expires.
    func issue(publisherId: UUID, customerEmail: String, credentials: String, now: Date = Date()) async throws -> (token: String, expiresAt: Date) {
        // Whole seconds: JWT dates are NumericDate, and the answer's `expiresAt` must equal the token's.
        let issued = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        let expires = issued.addingTimeInterval(Double(self.lifetimeSeconds))
        let payload = Payload(
            iss: IssuerClaim(value: Self.issuer), aud: AudienceClaim(value: [publisherId.lowercasedString]),
            sub: SubjectClaim(value: customerEmail), iat: IssuedAtClaim(value: issued), exp: ExpirationClaim(value: expires),
            cre: credentials
        )
        return (try await self.keys.sign(payload), expires)
    }

    /// The identity a token proves, or `nil` for any token that is not valid now.
    func verify(_ token: String) async -> Identity? {
        // Tokens are a few hundred bytes; refuse to parse anything absurd.
        guard token.utf8.count <= 2048, Self.namesOurAlgorithm(token),
            let payload = try? await self.keys.verify(token, as: Payload.self),
            payload.aud.value.count == 1, let publisherId = UUID(uuidString: payload.aud.value[0]),
            !payload.sub.value.isEmpty, !payload.cre.isEmpty
        else { return nil }
        return Identity(publisherId: publisherId, customerEmail: payload.sub.value, credentials: payload.cre, issuedAt: payload.iat.value)
    }

    /// Whether the token's header names HS256, the one algorithm tokens are signed with. JWTKit checks the
    /// signature with its only key whatever `alg` says, so a header naming another algorithm (`none`,
    /// `HS512`) would pass on an HS256 signature; RFC 8725 §3.1 asks for the algorithm to be checked.
    static func namesOurAlgorithm(_ token: String) -> Bool {
        guard let dot = token.utf8.firstIndex(of: UInt8(ascii: ".")) else { return false }
        var base64 = String(token[..<dot]).replacing("-", with: "+").replacing("_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.utf8.count % 4) % 4)
        guard let header = Data(base64Encoded: base64),
            let fields = header.withUnsafeBytes({ JSONValue.object($0, maxDepth: 2, maxValues: 64) })
        else { return false }
        return fields["alg"] == .string("HS256")
    }
}
