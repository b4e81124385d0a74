import Foundation
import Hummingbird
import HummingbirdTesting
import Shared
import Testing
import TestSupport

@testable import API

/// `GET /v1/receipts/{jobId}`, `GET /v1/access-status`, `GET /v1/customers/{email}/wallet`, and the
/// isolation of one publisher from another.
@Suite("Publisher read routes")
struct ReadRouteTests {
    /// Commits a verified purchase for `tenant`'s customer, as a worker would after Apple confirmed it.
    static func grant(_ api: APIClient, _ tenant: Tenant, email: String, offerId: String) async throws -> GrantOutcome {
        let publisherId = try #require(UUID(uuidString: tenant.publisherId))
        let app = try #require(try await api.services.catalog.apps(publisherId: publisherId).first)
        let product = try #require(try await api.services.catalog.products(publisherId: publisherId, offerId: offerId).first)
        let transactionId = ScenarioReceipt.transactionId()
        let now = WallClock.nowMilliseconds()
        let job = ReceiptJob(
            jobId: UUID().uuidString.lowercased(), publisherId: publisherId, customerEmail: email, offerId: offerId,
            transactionId: transactionId, receiptData: Payment.receipt(productId: product.productId, transactionId: transactionId),
            appType: .ios, ipAddress: nil, acceptedAtMilliseconds: now
        )
        let transaction = AppleTransaction(productId: product.productId, transactionId: transactionId, purchaseDateMilliseconds: Int64(now))
        let outcome = try await GrantStore(database: api.services.database).grant(GrantRequest(
            job: job, app: app, product: product, transaction: transaction, renewals: [transaction],
            gracePeriodEndMilliseconds: nil, environment: "Production", verifiedAt: Date()
        ))
        // A worker announces a grant on the access channel when it finishes the job; this grant goes behind
        // the queue's back, so it tells the API's access cache itself.
        api.services.accessCache.invalidate(api.services.queue.keys.pending(for: job))
        return outcome
    }

    static func query(_ email: String, _ offerId: String) -> String {
        let allowed = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~"))
        let encode = { (text: String) in text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text }
        return "/v1/access-status?customerEmail=\(encode(email))&offerId=\(encode(offerId))"
    }

    // MARK: Receipts

    @Test("GET /v1/receipts/{jobId} shows a queued job: status, attempts 0, customerEmail, offerId")
    func queuedJob() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            let jobId = try await api.submit(tenant, Payment.body(email: "Viewer@Example.com", offerId: Tenant.Offer.coins))
            let response = try await api.get(tenant, "/v1/receipts/\(jobId)")
            #expect(response.status == .ok)
            #expect(response.headers[.contentType]?.hasPrefix("application/json") == true)
            let job = try response.json()
            #expect(job["jobId"] as? String == jobId)
            #expect(job["status"] as? String == "queued")
            #expect(job["attempts"] as? Int == 0)
            #expect(job["customerEmail"] as? String == "viewer@example.com")
            #expect(job["offerId"] as? String == Tenant.Offer.coins)
            // Nothing is known yet about the outcome.
            for key in ["reason", "nextAttemptAt", "environment", "expiresAt"] {
                #expect(job[key] == nil || job[key] is NSNull, "\(key) should be absent while queued")
            }
            // The job answer carries no receipt data.
            #expect(!response.text.contains("receiptData"))
            // The id in upper case (as `UUID.uuidString` writes it) names the same job.
            let upper = try await api.get(tenant, "/v1/receipts/\(jobId.uppercased())")
            #expect(upper.status == .ok)
            #expect(try upper.json()["jobId"] as? String == jobId)
        }
    }

    @Test("after the job's Redis status expires, its outcome is still read from the ledger, by its own publisher only")
    func jobFromLedger() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            let other = try await api.provisionTenant()
            let publisherId = try #require(UUID(uuidString: tenant.publisherId))
            let app = try #require(try await api.services.catalog.apps(publisherId: publisherId).first)
            let product = try #require(try await api.services.catalog.products(publisherId: publisherId, offerId: Tenant.Offer.coins).first)
            let transactionId = ScenarioReceipt.transactionId()
            let jobId = UUID().uuidString.lowercased()
            let job = ReceiptJob(
                jobId: jobId, publisherId: publisherId, customerEmail: "ledger@example.com", offerId: Tenant.Offer.coins,
                transactionId: transactionId, receiptData: Payment.receipt(productId: product.productId, transactionId: transactionId),
                appType: .ios, ipAddress: nil, acceptedAtMilliseconds: WallClock.nowMilliseconds()
            )
            let transaction = AppleTransaction(productId: product.productId, transactionId: transactionId)
            _ = try await GrantStore(database: api.services.database).grant(GrantRequest(
                job: job, app: app, product: product, transaction: transaction, renewals: [], gracePeriodEndMilliseconds: nil,
                environment: "Production", verifiedAt: Date()
            ))
            // No Redis status was ever written for this job: only the ledger knows it.
            let response = try await api.get(tenant, "/v1/receipts/\(jobId)")
            #expect(response.status == .ok)
            let body = try response.json()
            #expect(body["status"] as? String == "granted")
            #expect(body["customerEmail"] as? String == "ledger@example.com")
            #expect(body["environment"] as? String == "Production")
            #expect(try await api.get(tenant, "/v1/receipts/\(jobId.uppercased())").status == .ok)
            expectError(try await api.get(other, "/v1/receipts/\(jobId)"), .notFound, code: "not_found")
        }
    }

    @Test("unknown, over-long or unauthenticated job reads are refused")
    func jobRefusals() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            let jobId = try await api.submit(tenant, Payment.body())
            expectError(try await api.get(tenant, "/v1/receipts/\(UUID().uuidString.lowercased())"), .notFound, code: "not_found")
            expectError(try await api.get(tenant, "/v1/receipts/" + String(repeating: "a", count: 65)), .notFound, code: "not_found")
            expectError(try await api.send(.get, "/v1/receipts/\(jobId)"), .unauthorized, code: "unauthorized")
            expectError(try await api.send(.get, "/v1/receipts/\(jobId)", headers: [.publisherToken: tenant.publisherToken]), .unauthorized, code: "unauthorized")
        }
    }

    // MARK: Access status

    @Test("access status without a grant or a job: not granted, nulls, not pending, no Retry-After")
    func accessStatusNothing() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            let response = try await api.get(tenant, Self.query("viewer@example.com", Tenant.Offer.pass))
            #expect(response.status == .ok)
            let json = try response.json()
            #expect(Set(json.keys) == ["offerId", "accessGranted", "expiresAt", "grantType", "pending"])
            #expect(json["offerId"] as? String == Tenant.Offer.pass)
            #expect(json["accessGranted"] as? Bool == false)
            #expect(json["expiresAt"] is NSNull)
            #expect(json["grantType"] is NSNull)
            #expect(json["pending"] as? Bool == false)
            #expect(response.headers[.retryAfter] == nil)
        }
    }

    @Test("access status while a job is queued: pending true with Retry-After: 5, for any letter case of the email")
    func accessStatusPending() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            _ = try await api.submit(tenant, Payment.body(email: "viewer+tv@example.com"))
            for email in ["viewer+tv@example.com", "Viewer+TV@Example.COM"] {
                let response = try await api.get(tenant, Self.query(email, Tenant.Offer.pass))
                #expect(response.status == .ok)
                let json = try response.json()
                #expect(json["accessGranted"] as? Bool == false)
                #expect(json["expiresAt"] is NSNull)
                #expect(json["grantType"] is NSNull)
                #expect(json["pending"] as? Bool == true)
                #expect(response.headers[.retryAfter] == "5")
            }
            // Pending is per customer and per offer.
            let otherOffer = try await api.get(tenant, Self.query("viewer+tv@example.com", Tenant.Offer.coins))
            #expect(try otherOffer.json()["pending"] as? Bool == false)
            #expect(otherOffer.headers[.retryAfter] == nil)
            let otherCustomer = try await api.get(tenant, Self.query("viewer@example.com", Tenant.Offer.pass))
            #expect(try otherCustomer.json()["pending"] as? Bool == false)
        }
    }

    @Test("access status after a grant: granted, expiresAt in unix seconds, grantType direct-purchase")
    func accessStatusGranted() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            let before = Int(Date().timeIntervalSince1970)
            guard case .granted = try await Self.grant(api, tenant, email: "viewer@example.com", offerId: Tenant.Offer.pass) else {
                Issue.record("the grant did not succeed")
                return
            }
            let pass = try await api.get(tenant, Self.query("Viewer@example.com", Tenant.Offer.pass)).json()
            #expect(pass["accessGranted"] as? Bool == true)
            #expect(pass["grantType"] as? String == "direct-purchase")
            #expect(pass["pending"] as? Bool == false)
            let expiresAt = try #require(pass["expiresAt"] as? Int)
            #expect(abs(expiresAt - (before + 30 * 86_400)) < 120)

            guard case .granted = try await Self.grant(api, tenant, email: "viewer@example.com", offerId: Tenant.Offer.lifetime) else {
                Issue.record("the grant did not succeed")
                return
            }
            let lifetime = try await api.get(tenant, Self.query("viewer@example.com", Tenant.Offer.lifetime)).json()
            #expect(lifetime["accessGranted"] as? Bool == true)
            #expect(lifetime["expiresAt"] is NSNull)
            #expect(lifetime["grantType"] as? String == "direct-purchase")
        }
    }

    @Test("access status refuses missing or bad query parameters", arguments: [
        ("/v1/access-status", HTTPResponse.Status.badRequest, "missing_field", "customerEmail"),
        ("/v1/access-status?offerId=S598742062_US", .badRequest, "missing_field", "customerEmail"),
        ("/v1/access-status?customerEmail=&offerId=S598742062_US", .badRequest, "missing_field", "customerEmail"),
        ("/v1/access-status?customerEmail=viewer%40example.com", .badRequest, "missing_field", "offerId"),
        ("/v1/access-status?customerEmail=viewer%40example.com&offerId=", .badRequest, "missing_field", "offerId"),
        ("/v1/access-status?customerEmail=not-an-email&offerId=S598742062_US", .unprocessableContent, "invalid_email", "customerEmail"),
        // 400 wins over 422: a missing field is reported even when another is unusable.
        ("/v1/access-status?customerEmail=not-an-email", .badRequest, "missing_field", "offerId"),
        ("/v1/access-status?customerEmail=viewer%40example.com&offerId=a%20b", .unprocessableContent, "invalid_offer_id", "offerId"),
        ("/v1/access-status?customerEmail=viewer%40example.com&offerId=NO_SUCH_OFFER", .unprocessableContent, "unknown_offer", "offerId"),
    ])
    func accessStatusRefusals(uri: String, status: HTTPResponse.Status, code: String, field: String) async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            expectError(try await api.get(tenant, uri), status, code: code, field: field)
        }
    }

    @Test("a disabled offer still answers its customers' access: it stops sales, not what was bought")
    func accessStatusDisabledOffer() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            guard case .granted = try await Self.grant(api, tenant, email: "viewer@example.com", offerId: Tenant.Offer.lifetime) else {
                Issue.record("the grant did not succeed")
                return
            }
            let productId = try #require(tenant.productIds[Tenant.Offer.lifetime])
            #expect(try await api.admin(.patch, "/admin/v1/products/\(productId)", json: ["enabled": false]).status == .ok)
            let response = try await api.get(tenant, Self.query("viewer@example.com", Tenant.Offer.lifetime))
            #expect(response.status == .ok)
            #expect(try response.json()["accessGranted"] as? Bool == true)
        }
    }

    // MARK: Wallet

    @Test("the wallet starts at 0 coins and shows credits; the email in the path is folded")
    func wallet() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            let empty = try await api.get(tenant, "/v1/customers/viewer%40example.com/wallet")
            #expect(empty.status == .ok)
            let json = try empty.json()
            #expect(Set(json.keys) == ["customerEmail", "balances"])
            #expect(json["customerEmail"] as? String == "viewer@example.com")
            #expect((json["balances"] as? [String: Any])?["coins"] as? Int == 0)

            guard case .granted = try await Self.grant(api, tenant, email: "viewer@example.com", offerId: Tenant.Offer.coins) else {
                Issue.record("the grant did not succeed")
                return
            }
            guard case .granted = try await Self.grant(api, tenant, email: "viewer@example.com", offerId: Tenant.Offer.coins) else {
                Issue.record("the grant did not succeed")
                return
            }
            for path in ["/v1/customers/viewer@example.com/wallet", "/v1/customers/Viewer%40Example.com/wallet"] {
                let credited = try await api.get(tenant, path)
                #expect(credited.status == .ok, "\(path): \(credited.text)")
                let wallet = try credited.json()
                #expect(wallet["customerEmail"] as? String == "viewer@example.com")
                #expect((wallet["balances"] as? [String: Any])?["coins"] as? Int == 200)
            }
            expectError(try await api.get(tenant, "/v1/customers/not-an-email/wallet"), .unprocessableContent, code: "invalid_email", field: "customerEmail")
            expectError(try await api.send(.get, "/v1/customers/viewer%40example.com/wallet"), .unauthorized, code: "unauthorized")
        }
    }

    // MARK: Tenant isolation

    @Test("publisher B cannot see publisher A's job: 404, the same body as an unknown id")
    func jobIsolation() async throws {
        try await APIHarness.withAPI { api in
            let a = try await api.provisionTenant(name: "A")
            let b = try await api.provisionTenant(name: "B")
            let jobId = try await api.submit(a, Payment.body())
            #expect(try await api.get(a, "/v1/receipts/\(jobId)").status == .ok)

            let foreign = try await api.get(b, "/v1/receipts/\(jobId)")
            let unknown = try await api.get(b, "/v1/receipts/\(UUID().uuidString.lowercased())")
            expectError(foreign, .notFound, code: "not_found")
            #expect(foreign.status == unknown.status)
            #expect(foreign.text == unknown.text)
            #expect(foreign.headers[.contentType] == unknown.headers[.contentType])
            #expect(!foreign.text.contains(jobId))
        }
    }

    @Test("publisher B's access status and wallet for A's customer show nothing of A's")
    func accessAndWalletIsolation() async throws {
        try await APIHarness.withAPI { api in
            let a = try await api.provisionTenant(name: "A")
            let b = try await api.provisionTenant(name: "B")
            let email = "shared.viewer@example.com"
            // A has a queued job, a granted pass and a coin credit for this customer; B has the same offer ids.
            _ = try await api.submit(a, Payment.body(email: email, offerId: Tenant.Offer.lifetime))
            guard case .granted = try await Self.grant(api, a, email: email, offerId: Tenant.Offer.pass),
                case .granted = try await Self.grant(api, a, email: email, offerId: Tenant.Offer.coins)
            else {
                Issue.record("the grants did not succeed")
                return
            }

            let aPass = try await api.get(a, Self.query(email, Tenant.Offer.pass)).json()
            #expect(aPass["accessGranted"] as? Bool == true)
            let aPending = try await api.get(a, Self.query(email, Tenant.Offer.lifetime))
            #expect(try aPending.json()["pending"] as? Bool == true)
            #expect(aPending.headers[.retryAfter] == "5")
            let aWallet = try await api.get(a, "/v1/customers/\(email)/wallet").json()
            #expect((aWallet["balances"] as? [String: Any])?["coins"] as? Int == 100)

            for offer in [Tenant.Offer.pass, Tenant.Offer.lifetime, Tenant.Offer.coins] {
                let response = try await api.get(b, Self.query(email, offer))
                #expect(response.status == .ok)
                let json = try response.json()
                #expect(json["accessGranted"] as? Bool == false, "\(offer)")
                #expect(json["expiresAt"] is NSNull, "\(offer)")
                #expect(json["grantType"] is NSNull, "\(offer)")
                #expect(json["pending"] as? Bool == false, "\(offer)")
                #expect(response.headers[.retryAfter] == nil, "\(offer)")
            }
            let bWallet = try await api.get(b, "/v1/customers/\(email)/wallet").json()
            #expect((bWallet["balances"] as? [String: Any])?["coins"] as? Int == 0)
        }
    }
}
