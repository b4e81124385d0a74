import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Shared
import Testing
import TestSupport

@testable import API

/// `POST /v1/customer-tokens`, `GET /v1/access-status` with `Authorization: Bearer`, and the Cleeng-style
/// `POST /api/3.0/json` `getAccessStatus`.
@Suite("Customer tokens")
struct CustomerTokenTests {
    static let secret = "customer-token-secret-0123456789abcdef-0123"

    static var options: APIHarness.Options {
        var options = APIHarness.Options()
        options.extra = ["TOLLGATE_TOKEN_SECRET": Self.secret]
        return options
    }

    /// Requires a token for `email` and returns it with its `expiresAt`.
    static func token(_ api: APIClient, _ tenant: Tenant, email: String) async throws -> (String, Int) {
        let response = try await api.send(.post, "/v1/customer-tokens", headers: tenant.headers, json: ["customerEmail": email])
        try #require(response.status == .ok, "customer token: \(response.status) \(response.text)")
        let json = try response.json()
        #expect(Set(json.keys) == ["customerToken", "expiresAt"])
        return (try #require(json["customerToken"] as? String), try #require(json["expiresAt"] as? Int))
    }

    /// The `cre` claim of a token obtained with `tenant`'s current credentials.
    static func credentials(_ tenant: Tenant) -> String {
        PublisherCredentials.fingerprint(tokenHash: PublisherCredentials.hash(tenant.publisherToken))
    }

    static func bearerAccess(_ api: APIClient, _ token: String, offerId: String = Tenant.Offer.pass, query: String = "") async throws -> TestResponse {
        try await api.send(.get, "/v1/access-status?offerId=\(offerId)\(query)", headers: [.authorization: "Bearer \(token)"])
    }

    static func rpc(_ api: APIClient, _ token: String, offerId: String = Tenant.Offer.pass) async throws -> TestResponse {
        try await api.send(.post, "/api/3.0/json", json: ["method": "getAccessStatus", "params": ["customerToken": token, "offerId": offerId]])
    }

    @Test("a token is issued for 15 minutes; the app's access status and JSON-RPC answer what the publisher sees, for the token's customer only")
    func sameAnswer() async throws {
        try await APIHarness.withAPI(Self.options) { api in
            let tenant = try await api.provisionTenant()
            let asked = Int(Date().timeIntervalSince1970)
            let (token, expiresAt) = try await Self.token(api, tenant, email: "Viewer@Example.com")
            let answered = Int(Date().timeIntervalSince1970)
            #expect((asked + 899...answered + 901).contains(expiresAt), "15 minutes from when it was issued, between \(asked) and \(answered)")

            // Before any grant: not granted, nulls.
            let before = try await Self.bearerAccess(api, token)
            #expect(before.status == .ok)
            #expect(try before.json()["accessGranted"] as? Bool == false)
            let rpcBefore = try await Self.rpc(api, token)
            #expect(rpcBefore.status == .ok)
            let resultBefore = try #require(try rpcBefore.json()["result"] as? [String: Any])
            #expect(Set(resultBefore.keys) == ["accessGranted", "expiresAt"])
            #expect(resultBefore["accessGranted"] as? Bool == false)
            #expect(resultBefore["expiresAt"] is NSNull)

            guard case .granted = try await ReadRouteTests.grant(api, tenant, email: "viewer@example.com", offerId: Tenant.Offer.pass) else {
                Issue.record("the grant did not succeed")
                return
            }
            let publisher = try await api.get(tenant, ReadRouteTests.query("viewer@example.com", Tenant.Offer.pass)).json()
            let app = try await Self.bearerAccess(api, token).json()
            #expect(app["accessGranted"] as? Bool == true)
            #expect(app["expiresAt"] as? Int == publisher["expiresAt"] as? Int)
            #expect(app["grantType"] as? String == "direct-purchase")
            #expect(app["pending"] as? Bool == false)
            let result = try #require(try await Self.rpc(api, token).json()["result"] as? [String: Any])
            #expect(result["accessGranted"] as? Bool == true)
            #expect(result["expiresAt"] as? Int == publisher["expiresAt"] as? Int)

            // The token speaks for its customer only: a customerEmail in the query changes nothing.
            let other = try await Self.bearerAccess(api, token, query: "&customerEmail=other%40example.com").json()
            #expect(other["accessGranted"] as? Bool == true)
            let (otherToken, _) = try await Self.token(api, tenant, email: "other@example.com")
            #expect(try await Self.bearerAccess(api, otherToken).json()["accessGranted"] as? Bool == false)

            // An offer the publisher does not have is refused on both routes, as for a submission.
            expectError(try await Self.bearerAccess(api, token, offerId: "NO_SUCH_OFFER"), .unprocessableContent, code: "unknown_offer", field: "offerId")
            expectError(try await Self.rpc(api, token, offerId: "NO_SUCH_OFFER"), .unprocessableContent, code: "unknown_offer", field: "params.offerId")
            expectError(try await Self.rpc(api, token, offerId: "a b"), .unprocessableContent, code: "invalid_offer_id", field: "params.offerId")
            let noOffer = try await api.send(.post, "/api/3.0/json", json: ["method": "getAccessStatus", "params": ["customerToken": token]])
            expectError(noOffer, .badRequest, code: "missing_field", field: "params.offerId")
        }
    }

    @Test("a pending job shows through a token too, with Retry-After: 5, on the access status and on JSON-RPC")
    func pending() async throws {
        try await APIHarness.withAPI(Self.options) { api in
            let tenant = try await api.provisionTenant()
            let (token, _) = try await Self.token(api, tenant, email: "viewer@example.com")
            #expect(try await Self.rpc(api, token).headers[.retryAfter] == nil, "nothing pending yet")
            _ = try await api.submit(tenant, Payment.body(email: "viewer@example.com"))
            let response = try await Self.bearerAccess(api, token)
            #expect(try response.json()["pending"] as? Bool == true)
            #expect(response.headers[.retryAfter] == "5")
            let rpc = try await Self.rpc(api, token)
            #expect(rpc.status == .ok)
            #expect(rpc.headers[.retryAfter] == "5", "JSON-RPC has no pending field: the header is all an app sees")
        }
    }

    @Test("expired, tampered, wrong-secret, wrong-algorithm, unknown-publisher, other-credentials, unbound and disabled-publisher tokens answer 401 on both routes")
    func refusedTokens() async throws {
        try await APIHarness.withAPI(Self.options) { api in
            let tenant = try await api.provisionTenant()
            let publisherId = try #require(UUID(uuidString: tenant.publisherId))
            let email = "viewer@example.com"
            let ours = await CustomerTokens(secret: Self.secret, lifetimeSeconds: 900)
            let credentials = Self.credentials(tenant)
            let (good, _) = try await ours.issue(publisherId: publisherId, customerEmail: email, credentials: credentials)
            #expect(try await Self.bearerAccess(api, good).status == .ok)

            let expired = try await ours.issue(publisherId: publisherId, customerEmail: email, credentials: credentials, now: Date().addingTimeInterval(-901)).token
            let foreignSecret = try await CustomerTokens(secret: String(Self.secret.reversed()), lifetimeSeconds: 900)
                .issue(publisherId: publisherId, customerEmail: email, credentials: credentials).token
            let unknownPublisher = try await ours.issue(publisherId: UUID(), customerEmail: email, credentials: credentials).token
            let otherCredentials = try await ours.issue(
                publisherId: publisherId, customerEmail: email, credentials: PublisherCredentials.fingerprint(tokenHash: PublisherCredentials.hash("pt_other"))
            ).token
            let parts = good.split(separator: ".").map(String.init)
            // Another customer in the claims, the signature left as it was.
            let claimBytes = try #require(Self.base64URLDecode(parts[1]))
            let claims = try #require(try JSONSerialization.jsonObject(with: claimBytes) as? [String: Any])
            var forged = claims
            forged["sub"] = "attacker@example.com"
            let tampered = [parts[0], Self.base64URLEncode(try JSONSerialization.data(withJSONObject: forged)), parts[2]].joined(separator: ".")
            let unsigned = [Self.base64URLEncode(Data(#"{"alg":"none","typ":"JWT"}"#.utf8)), parts[1], ""].joined(separator: ".")
            let truncated = String(good.dropLast(3))
            // Signed with the right secret but without `cre`, as tokens were before they recorded their credentials.
            var unboundClaims = claims
            unboundClaims["cre"] = nil
            let unboundSigned = [parts[0], Self.base64URLEncode(try JSONSerialization.data(withJSONObject: unboundClaims))].joined(separator: ".")
            let unbound = Self.signed(unboundSigned)
            // Signed with the right secret (HMAC-SHA256), under a header naming another algorithm.
            let otherAlgorithms = [#"{"alg":"HS512","typ":"JWT"}"#, #"{"alg":"none","typ":"JWT"}"#, #"{"typ":"JWT"}"#].map {
                Self.signed([Self.base64URLEncode(Data($0.utf8)), parts[1]].joined(separator: "."))
            }

            for (name, token) in [
                ("expired", expired), ("foreign secret", foreignSecret), ("unknown publisher", unknownPublisher),
                ("tampered", tampered), ("alg none", unsigned), ("truncated", truncated), ("garbage", "not-a-token"),
                ("huge", String(repeating: "a", count: 10_000)), ("other credentials", otherCredentials), ("no credentials claim", unbound),
                ("header HS512", otherAlgorithms[0]), ("header none, signed", otherAlgorithms[1]), ("header without alg", otherAlgorithms[2]),
            ] {
                let access = try await Self.bearerAccess(api, token)
                expectError(access, .unauthorized, code: "unauthorized")
                #expect(access.headers[.wwwAuthenticate] == #"Bearer realm="tollgate""#)
                let rpc = try await Self.rpc(api, token)
                #expect(rpc.status == .unauthorized, "\(name): \(rpc.text)")
                expectError(rpc, .unauthorized, code: "unauthorized")
            }

            // A disabled publisher's tokens stop working (at once in the process that disabled it).
            #expect(try await api.admin(.patch, "/admin/v1/publishers/\(tenant.publisherId)", json: ["enabled": false]).status == .ok)
            expectError(try await Self.bearerAccess(api, good), .unauthorized, code: "unauthorized")
            expectError(try await Self.rpc(api, good), .unauthorized, code: "unauthorized")
        }
    }

    @Test("a publisher disabled and enabled again does not bring back the tokens issued before; enabling one already enabled voids none")
    func reEnabled() async throws {
        try await APIHarness.withAPI(Self.options) { api in
            let tenant = try await api.provisionTenant()
            let path = "/admin/v1/publishers/\(tenant.publisherId)"
            let (kept, _) = try await Self.token(api, tenant, email: "viewer@example.com")
            #expect(try await api.admin(.patch, path, json: ["enabled": true]).status == .ok)
            #expect(try await Self.bearerAccess(api, kept).status == .ok, "enabling an enabled publisher changed nothing")

            // A token's iat is in whole seconds: the disable must come in a later second than the token.
            let issued = Date().timeIntervalSince1970.rounded(.down)
            _ = try await Poll.until(timeout: .seconds(5), interval: .milliseconds(10), "the next second") {
                Date().timeIntervalSince1970.rounded(.down) > issued ? true : nil
            }
            #expect(try await api.admin(.patch, path, json: ["enabled": false]).status == .ok)
            expectError(try await Self.bearerAccess(api, kept), .unauthorized, code: "unauthorized")
            #expect(try await api.admin(.patch, path, json: ["enabled": true]).status == .ok)
            expectError(try await Self.bearerAccess(api, kept), .unauthorized, code: "unauthorized")
            expectError(try await Self.rpc(api, kept), .unauthorized, code: "unauthorized")

            let (fresh, _) = try await Self.token(api, tenant, email: "viewer@example.com")
            #expect(try await Self.bearerAccess(api, fresh).status == .ok)
        }
    }

    @Test("rotating a publisher's credentials refuses the tokens obtained with the old ones, here at once and within seconds in another API process")
    func rotation() async throws {
        try await APIHarness.withAPI(Self.options) { api in
            let old = try await api.provisionTenant()
            var options = Self.options
            options.databaseURL = api.services.configuration.databaseURL
            try await APIHarness.withAPI(options) { second in
                let (before, _) = try await Self.token(api, old, email: "viewer@example.com")
                #expect(try await Self.bearerAccess(second, before).status == .ok)

                let rotated = try await api.admin(.post, "/admin/v1/publishers/\(old.publisherId)/credentials")
                try #require(rotated.status == .created)
                let json = try rotated.json()
                let basic = try #require(json["basicAuth"] as? [String: Any])
                let new = Tenant(
                    publisherId: old.publisherId, name: old.name, publisherToken: try #require(json["publisherToken"] as? String),
                    username: try #require(basic["username"] as? String), password: try #require(basic["password"] as? String),
                    bundleId: old.bundleId, productIds: old.productIds
                )
                expectError(try await Self.bearerAccess(api, before), .unauthorized, code: "unauthorized")
                expectError(try await Self.rpc(api, before), .unauthorized, code: "unauthorized")
                // The other process still holds the publisher from before the rotation for up to 5 s.
                _ = try await Poll.until(timeout: .seconds(30), "the second process refuses the token obtained before the rotation") {
                    try await Self.bearerAccess(second, before).status == .unauthorized ? true : nil
                }
                expectError(try await Self.rpc(second, before), .unauthorized, code: "unauthorized")

                let (after, _) = try await Self.token(api, new, email: "viewer@example.com")
                #expect(try await Self.bearerAccess(api, after).status == .ok)
                #expect(try await Self.bearerAccess(second, after).status == .ok)
                #expect(try await Self.rpc(second, after).status == .ok)
            }
        }
    }

    @Test("a token sent with another publisher's X-Publisher-Token is refused; with its own it is accepted")
    func wrongPublisher() async throws {
        try await APIHarness.withAPI(Self.options) { api in
            let a = try await api.provisionTenant()
            let b = try await api.provisionTenant()
            let (token, _) = try await Self.token(api, a, email: "viewer@example.com")
            let mixed = try await api.send(.get, "/v1/access-status?offerId=\(Tenant.Offer.pass)", headers: [
                .authorization: "Bearer \(token)", .publisherToken: b.publisherToken,
            ])
            expectError(mixed, .unauthorized, code: "unauthorized")
            let own = try await api.send(.get, "/v1/access-status?offerId=\(Tenant.Offer.pass)", headers: [
                .authorization: "Bearer \(token)", .publisherToken: a.publisherToken,
            ])
            #expect(own.status == .ok)
        }
    }

    @Test("a customer token opens the access status only: not payments, jobs, wallets or token issuing")
    func tokenScope() async throws {
        try await APIHarness.withAPI(Self.options) { api in
            let tenant = try await api.provisionTenant()
            let (token, _) = try await Self.token(api, tenant, email: "viewer@example.com")
            let bearer: HTTPFields = [.authorization: "Bearer \(token)", .contentType: "application/json"]
            let before = try await api.streamLength()
            let payment = try await api.send(.post, "/apple/payment", headers: bearer, json: Payment.body())
            expectError(payment, .unauthorized, code: "unauthorized")
            #expect(payment.headers[.wwwAuthenticate] == #"Basic realm="tollgate""#, "a publisher route names the publisher's scheme")
            expectError(try await api.send(.get, "/v1/customers/viewer%40example.com/wallet", headers: bearer), .unauthorized, code: "unauthorized")
            expectError(try await api.send(.get, "/v1/receipts/\(UUID())", headers: bearer), .unauthorized, code: "unauthorized")
            expectError(
                try await api.send(.post, "/v1/customer-tokens", headers: bearer, json: ["customerEmail": "x@example.com"]),
                .unauthorized, code: "unauthorized"
            )
            #expect(try await api.streamLength() == before)
        }
    }

    @Test("without TOLLGATE_TOKEN_SECRET no token is issued (404) and bearer tokens are refused")
    func disabled() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            let response = try await api.send(.post, "/v1/customer-tokens", headers: tenant.headers, json: ["customerEmail": "viewer@example.com"])
            expectError(response, .notFound, code: "customer_tokens_disabled")
            let token = try await CustomerTokens(secret: Self.secret, lifetimeSeconds: 900)
                .issue(publisherId: try #require(UUID(uuidString: tenant.publisherId)), customerEmail: "viewer@example.com", credentials: Self.credentials(tenant)).token
            expectError(try await Self.bearerAccess(api, token), .unauthorized, code: "unauthorized")
            expectError(try await Self.rpc(api, token), .unauthorized, code: "unauthorized")
        }
    }

    @Test("token requests and JSON-RPC calls are checked field by field", arguments: [
        ("/v1/customer-tokens", #"{}"#, HTTPResponse.Status.badRequest, "missing_field", String?("customerEmail")),
        ("/v1/customer-tokens", #"{"customerEmail": 5}"#, .badRequest, "invalid_type", "customerEmail"),
        ("/v1/customer-tokens", #"{"customerEmail": "nope"}"#, .unprocessableContent, "invalid_email", "customerEmail"),
        ("/api/3.0/json", #"{"params": {}}"#, .badRequest, "missing_field", "method"),
        ("/api/3.0/json", #"{"method": "getCustomer", "params": {}}"#, .unprocessableContent, "unknown_method", "method"),
        ("/api/3.0/json", #"{"method": "getAccessStatus"}"#, .badRequest, "missing_field", "params"),
        ("/api/3.0/json", #"{"method": "getAccessStatus", "params": []}"#, .badRequest, "invalid_type", "params"),
        ("/api/3.0/json", #"{"method": "getAccessStatus", "params": {"offerId": "x"}}"#, .badRequest, "missing_field", "params.customerToken"),
        // The token is the credential: a wrong one answers 401 before the rest of the call is looked at.
        ("/api/3.0/json", #"{"method": "getAccessStatus", "params": {"customerToken": "t"}}"#, .unauthorized, "unauthorized", nil),
        ("/api/3.0/json", #"{"method": "getAccessStatus", "params": {"customerToken": "t", "offerId": "a b"}}"#, .unauthorized, "unauthorized", nil),
    ])
    func refusals(path: String, body: String, status: HTTPResponse.Status, code: String, field: String?) async throws {
        try await APIHarness.withAPI(Self.options) { api in
            let tenant = try await api.provisionTenant()
            let response = try await api.send(.post, path, headers: tenant.headers, body: body)
            expectError(response, status, code: code, field: field)
        }
    }

    @Test("JSON-RPC refuses a body that is not JSON (415) or too large (413)")
    func rpcTransport() async throws {
        try await APIHarness.withAPI(Self.options) { api in
            expectError(try await api.send(.post, "/api/3.0/json", headers: [.contentType: "text/plain"], body: "{}"), .unsupportedMediaType, code: "unsupported_media_type")
            let huge = try await api.send(.post, "/api/3.0/json", headers: [.contentType: "application/json"], body: String(repeating: " ", count: (1 << 20) + 1))
            expectError(huge, .contentTooLarge, code: "body_too_large")
        }
    }

    /// `signingInput` (header and claims, encoded) signed with HMAC-SHA256 under `secret`, as a token.
    static func signed(_ signingInput: String, secret: String = Self.secret) -> String {
        let signature = HMAC<SHA256>.authenticationCode(for: Data(signingInput.utf8), using: SymmetricKey(data: Data(secret.utf8)))
        return signingInput + "." + Self.base64URLEncode(Data(signature))
    }

    static func base64URLEncode(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func base64URLDecode(_ text: String) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }

    @Test("a secret shorter than 32 bytes signs (HMAC-SHA256 with the secret itself) instead of trapping", arguments: ["short", String(repeating: "s", count: 31)])
    func shortSecret(secret: String) async throws {
        let tokens = await CustomerTokens(secret: secret, lifetimeSeconds: 900)
        let publisherId = UUID()
        let (token, _) = try await tokens.issue(publisherId: publisherId, customerEmail: "viewer@example.com", credentials: "c")
        let identity = await tokens.verify(token)
        #expect(identity?.publisherId == publisherId)
        #expect(identity?.customerEmail == "viewer@example.com")
        // The signature is HMAC-SHA256 of header.payload under the secret as given, as any JWT library checks it.
        let parts = token.split(separator: ".")
        try #require(parts.count == 3)
        #expect(token == Self.signed("\(parts[0]).\(parts[1])", secret: secret))
    }
}
