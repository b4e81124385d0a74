import Foundation
import Hummingbird
import HummingbirdTesting
import Shared
import Testing
import TestSupport

@testable import API

/// `POST /apple/payment`: accepted once, deduplicated, refused without enqueuing anything.
@Suite("POST /apple/payment")
struct PaymentRouteTests {
    @Test("a valid submission answers 200 OK with a job id and enqueues exactly one job")
    func accepted() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            #expect(try await api.streamLength() == 0)
            let response = try await api.pay(tenant, Payment.body(appType: "tvos", ipAddress: "192.168.1.1"))
            #expect(response.status == .ok)
            #expect(response.headers[.contentType]?.hasPrefix("application/json") == true)
            let json = try response.json()
            #expect(Set(json.keys) == ["message", "jobId", "status"])
            #expect(json["message"] as? String == "OK")
            #expect(json["status"] as? String == "queued")
            let jobId = try #require(json["jobId"] as? String)
            #expect(!jobId.isEmpty)
            #expect(try await api.streamLength() == 1)
            // The job is durably in Redis: the API's own view of it says queued.
            let record = try #require(try await api.services.queue.record(jobId: jobId))
            #expect(record.status == .queued)
            #expect(record.publisherId.uuidString.lowercased() == tenant.publisherId)
        }
    }

    @Test("an ipAddress that is not an address does not refuse the receipt: accepted, and the address not kept")
    func ipAddressNotAnAddress() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            let response = try await api.pay(tenant, Payment.body(ipAddress: "unknown"))
            #expect(response.status == .ok)
            let jobId = try #require(try response.json()["jobId"] as? String)
            #expect(try await api.streamLength() == 1)
            let payload = try #require(try await api.inspector.send("HGET", "\(api.prefix):{q}:job:\(jobId)", "payload").string)
            #expect(ReceiptJob(json: payload)?.ipAddress == nil)
        }
    }

    @Test("the same receipt posted twice gives the same jobId and one job", arguments: [true, false])
    func idempotent(withTransactionId: Bool) async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            let transactionId = ScenarioReceipt.transactionId()
            let body = Payment.body(
                transactionId: withTransactionId ? transactionId : nil, receiptData: Payment.receipt(transactionId: transactionId)
            )
            let first = try await api.submit(tenant, body)
            let second = try await api.submit(tenant, body)
            #expect(first == second)
            #expect(try await api.streamLength() == 1)
            // A worker got further meanwhile: the answer is still the contract's (`submit` requires
            // status `queued`); the job's own status is read at GET /v1/receipts/{jobId}.
            try await api.inspector.send("HSET", "\(api.prefix):{q}:job:\(first)", "status", "granted")
            let third = try await api.submit(tenant, body)
            #expect(third == first)
            #expect(try await api.streamLength() == 1)
            #expect(try await api.admin(.get, "/admin/v1/queue").json()["queued"] as? Int == 1)

            // A different receipt for the same customer and offer is a new job.
            let other = try await api.submit(tenant, Payment.body(transactionId: withTransactionId ? ScenarioReceipt.transactionId() : nil))
            #expect(other != first)
            #expect(try await api.streamLength() == 2)
        }
    }

    @Test("a receipt wrapped in 76-character lines (MIME) is accepted as the same receipt unwrapped: one job, kept unwrapped", arguments: ["\n", "\r\n"])
    func wrappedReceipt(lineBreak: String) async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            let transactionId = ScenarioReceipt.transactionId()
            let receipt = Payment.receipt(transactionId: transactionId)
            let lines = stride(from: 0, to: receipt.count, by: 76).map { start in
                receipt.dropFirst(start).prefix(76)
            }
            #expect(lines.count > 1)
            let wrapped = lines.joined(separator: lineBreak) + lineBreak
            let first = try await api.submit(tenant, Payment.body(transactionId: transactionId, receiptData: wrapped))
            let second = try await api.submit(tenant, Payment.body(transactionId: transactionId, receiptData: receipt))
            #expect(first == second)
            #expect(try await api.streamLength() == 1)
            let payload = try #require(try await api.inspector.send("HGET", "\(api.prefix):{q}:job:\(first)", "payload").string)
            #expect(ReceiptJob(json: payload)?.receiptData == receipt)
        }
    }

    @Test("emails compare case-insensitively: Viewer@Example.com and viewer@example.com are one job")
    func emailCaseFolding() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            let transactionId = ScenarioReceipt.transactionId()
            let receipt = Payment.receipt(transactionId: transactionId)
            let upper = try await api.submit(tenant, Payment.body(email: "Viewer@Example.com", transactionId: transactionId, receiptData: receipt))
            let lower = try await api.submit(tenant, Payment.body(email: "viewer@example.com", transactionId: transactionId, receiptData: receipt))
            let shouting = try await api.submit(tenant, Payment.body(email: "VIEWER@EXAMPLE.COM", transactionId: transactionId, receiptData: receipt))
            #expect(upper == lower)
            #expect(shouting == lower)
            #expect(try await api.streamLength() == 1)
            let job = try await api.get(tenant, "/v1/receipts/\(lower)").json()
            #expect(job["customerEmail"] as? String == "viewer@example.com")
        }
    }

    @Test("a transactionId already queued for another customer is 409 already_claimed and enqueues nothing")
    func alreadyClaimed() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            let transactionId = ScenarioReceipt.transactionId()
            let receipt = Payment.receipt(transactionId: transactionId)
            _ = try await api.submit(tenant, Payment.body(email: "first@example.com", transactionId: transactionId, receiptData: receipt))
            let keys = try await api.keys()

            let refused = try await api.pay(tenant, Payment.body(email: "second@example.com", transactionId: transactionId, receiptData: receipt))
            expectError(refused, .conflict, code: "already_claimed", field: "receipt.transactionId")
            // Also for another offer, and with another receipt naming the same transaction.
            let otherOffer = try await api.pay(tenant, Payment.body(email: "second@example.com", offerId: Tenant.Offer.lifetime, transactionId: transactionId))
            expectError(otherOffer, .conflict, code: "already_claimed", field: "receipt.transactionId")
            #expect(try await api.streamLength() == 1)
            #expect(try await api.keys() == keys)

            // The first customer, with a different letter case, is still welcome.
            let same = try await api.pay(tenant, Payment.body(email: "First@Example.com", transactionId: transactionId, receiptData: receipt))
            #expect(same.status == .ok)
            #expect(try await api.streamLength() == 1)
        }
    }

    @Test("another publisher may submit the same transactionId for its own customer")
    func claimsArePerPublisher() async throws {
        try await APIHarness.withAPI { api in
            let a = try await api.provisionTenant(name: "A")
            let b = try await api.provisionTenant(name: "B")
            let transactionId = ScenarioReceipt.transactionId()
            let jobA = try await api.submit(a, Payment.body(email: "alice@example.com", transactionId: transactionId))
            let jobB = try await api.submit(b, Payment.body(email: "bob@example.com", transactionId: transactionId))
            #expect(jobA != jobB)
            #expect(try await api.streamLength() == 2)
        }
    }

    // MARK: Refusals

    /// Which credentials a refused request carries.
    enum Auth: Sendable {
        case valid, none, tokenOnly, basicOnly, wrongPassword, wrongToken, wrongUsername, bearerPassword, emptyToken
    }

    /// One request that must be refused, and how.
    struct Refusal: Sendable, CustomTestStringConvertible {
        let name: String
        var auth = Auth.valid
        var contentType: String? = "application/json"
        let body: String
        let status: HTTPResponse.Status
        let code: String
        var field: String?

        var testDescription: String { self.name }
    }

    static func text(_ object: [String: Any]) -> String {
        String(decoding: (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data(), as: UTF8.self)
    }

    static func valid(_ change: (inout [String: Any]) -> Void = { _ in }) -> String {
        var body = Payment.body(transactionId: "2000000000000001")
        change(&body)
        return Self.text(body)
    }

    static func receipt(_ change: @escaping (inout [String: Any]) -> Void) -> String {
        Self.valid { body in
            var receipt = body["receipt"] as? [String: Any] ?? [:]
            change(&receipt)
            body["receipt"] = receipt
        }
    }

    /// A syntactically valid body of exactly `size` bytes (padded with an ignored field).
    static func padded(to size: Int) -> String {
        let base = Self.valid { $0["padding"] = "" }
        let pad = String(repeating: "x", count: size - base.utf8.count)
        return Self.valid { $0["padding"] = pad }
    }

    static let refusals: [Refusal] = [
        Refusal(name: "no credentials", auth: .none, body: Self.valid(), status: .unauthorized, code: "unauthorized"),
        Refusal(name: "only X-Publisher-Token", auth: .tokenOnly, body: Self.valid(), status: .unauthorized, code: "unauthorized"),
        Refusal(name: "only Basic", auth: .basicOnly, body: Self.valid(), status: .unauthorized, code: "unauthorized"),
        Refusal(name: "wrong password", auth: .wrongPassword, body: Self.valid(), status: .unauthorized, code: "unauthorized"),
        Refusal(name: "wrong token", auth: .wrongToken, body: Self.valid(), status: .unauthorized, code: "unauthorized"),
        Refusal(name: "wrong username", auth: .wrongUsername, body: Self.valid(), status: .unauthorized, code: "unauthorized"),
        Refusal(name: "Bearer instead of Basic", auth: .bearerPassword, body: Self.valid(), status: .unauthorized, code: "unauthorized"),
        Refusal(name: "empty token", auth: .emptyToken, body: Self.valid(), status: .unauthorized, code: "unauthorized"),
        Refusal(name: "no credentials and a bad body", auth: .none, body: "{", status: .unauthorized, code: "unauthorized"),
        Refusal(name: "malformed JSON", body: #"{"customerEmail": "viewer@example.com", "offerId": "#, status: .badRequest, code: "malformed_json"),
        Refusal(name: "JSON array", body: "[]", status: .badRequest, code: "malformed_json"),
        Refusal(name: "empty body", body: "", status: .badRequest, code: "malformed_json"),
        Refusal(name: "missing customerEmail", body: Self.valid { $0["customerEmail"] = nil }, status: .badRequest, code: "missing_field", field: "customerEmail"),
        Refusal(name: "missing offerId", body: Self.valid { $0["offerId"] = nil }, status: .badRequest, code: "missing_field", field: "offerId"),
        Refusal(name: "missing receipt", body: Self.valid { $0["receipt"] = nil }, status: .badRequest, code: "missing_field", field: "receipt"),
        Refusal(name: "missing receiptData", body: Self.receipt { $0["receiptData"] = nil }, status: .badRequest, code: "missing_field", field: "receipt.receiptData"),
        Refusal(name: "ill-typed customerEmail", body: Self.valid { $0["customerEmail"] = 12 }, status: .badRequest, code: "invalid_type", field: "customerEmail"),
        Refusal(name: "ill-typed receipt", body: Self.valid { $0["receipt"] = "QUJD" }, status: .badRequest, code: "invalid_type", field: "receipt"),
        Refusal(name: "ill-typed transactionId", body: Self.receipt { $0["transactionId"] = 2000000000000001 }, status: .badRequest, code: "invalid_type", field: "receipt.transactionId"),
        Refusal(name: "ill-typed appType", body: Self.valid { $0["appType"] = true }, status: .badRequest, code: "invalid_type", field: "appType"),
        Refusal(name: "unknown offer", body: Self.valid { $0["offerId"] = "NO_SUCH_OFFER" }, status: .unprocessableContent, code: "unknown_offer", field: "offerId"),
        Refusal(name: "receiptData not base64", body: Self.receipt { $0["receiptData"] = "this is not base64!" }, status: .unprocessableContent, code: "invalid_receipt_data", field: "receipt.receiptData"),
        Refusal(name: "receiptData with spaces", body: Self.receipt { $0["receiptData"] = "QUJD QUJD" }, status: .unprocessableContent, code: "invalid_receipt_data", field: "receipt.receiptData"),
        Refusal(name: "transactionId with a space", body: Self.receipt { $0["transactionId"] = "tx 1" }, status: .unprocessableContent, code: "invalid_transaction_id", field: "receipt.transactionId"),
        Refusal(name: "appType android", body: Self.valid { $0["appType"] = "android" }, status: .unprocessableContent, code: "invalid_app_type", field: "appType"),
        Refusal(name: "bad email", body: Self.valid { $0["customerEmail"] = "viewer.example.com" }, status: .unprocessableContent, code: "invalid_email", field: "customerEmail"),
        Refusal(name: "ipAddress with an embedded NUL", body: Self.valid { $0["ipAddress"] = "192.168.1.1\u{0}<b>" }, status: .unprocessableContent, code: "invalid_character", field: "ipAddress"),
        Refusal(name: "text/plain", contentType: "text/plain", body: Self.valid(), status: .unsupportedMediaType, code: "unsupported_media_type"),
        Refusal(name: "no Content-Type", contentType: nil, body: Self.valid(), status: .unsupportedMediaType, code: "unsupported_media_type"),
        Refusal(name: "form content type", contentType: "application/x-www-form-urlencoded", body: Self.valid(), status: .unsupportedMediaType, code: "unsupported_media_type"),
        Refusal(name: "application/jsonp", contentType: "application/jsonp", body: Self.valid(), status: .unsupportedMediaType, code: "unsupported_media_type"),
        Refusal(name: "a 2 MiB body", body: Self.padded(to: 2 << 20), status: .contentTooLarge, code: "body_too_large"),
        Refusal(name: "1 MiB + 1 byte", body: Self.padded(to: APILimits.maxBodyBytes + 1), status: .contentTooLarge, code: "body_too_large"),
    ]

    @Test("a refused submission has its status and JSON error, and enqueues nothing", arguments: PaymentRouteTests.refusals)
    func refused(_ refusal: Refusal) async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            let other = try await api.provisionTenant(name: "Other")
            // One accepted job first, so "nothing enqueued" compares against a live stream.
            _ = try await api.submit(tenant, Payment.body(email: "earlier@example.com"))
            let keys = try await api.keys()
            #expect(try await api.streamLength() == 1)

            var headers: HTTPFields = [:]
            let basic = { (username: String, password: String) in Tenant.basic(username, password) }
            switch refusal.auth {
            case .valid: headers = tenant.credentialHeaders
            case .none: break
            case .tokenOnly: headers[.publisherToken] = tenant.publisherToken
            case .basicOnly: headers[.authorization] = basic(tenant.username, tenant.password)
            case .wrongPassword: headers = [.publisherToken: tenant.publisherToken, .authorization: basic(tenant.username, other.password)]
            case .wrongToken: headers = [.publisherToken: other.publisherToken, .authorization: basic(tenant.username, tenant.password)]
            case .wrongUsername: headers = [.publisherToken: tenant.publisherToken, .authorization: basic(other.username, tenant.password)]
            case .bearerPassword: headers = [.publisherToken: tenant.publisherToken, .authorization: "Bearer \(tenant.password)"]
            case .emptyToken: headers = [.publisherToken: "", .authorization: basic(tenant.username, tenant.password)]
            }
            if let contentType = refusal.contentType { headers[.contentType] = contentType }

            let response = try await api.send(.post, "/apple/payment", headers: headers, body: refusal.body)
            expectError(response, refusal.status, code: refusal.code, field: refusal.field)
            if refusal.status == .unauthorized {
                // Every credential failure is the same answer: a caller cannot tell which one was wrong.
                let baseline = try await api.send(.post, "/apple/payment", body: Self.valid())
                #expect(baseline.status == .unauthorized)
                #expect(response.text == baseline.text)
            }
            #expect(try await api.streamLength() == 1)
            #expect(try await api.keys() == keys)
        }
    }

    @Test("a body of exactly 1 MiB is accepted")
    func exactlyOneMebibyte() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            let body = Self.padded(to: APILimits.maxBodyBytes)
            #expect(body.utf8.count == 1 << 20)
            let response = try await api.send(.post, "/apple/payment", headers: tenant.headers, body: body)
            #expect(response.status == .ok, "\(response.text)")
            #expect(try await api.streamLength() == 1)
        }
    }

    @Test("a disabled publisher's credentials are refused")
    func disabledPublisher() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            #expect(try await api.admin(.patch, "/admin/v1/publishers/\(tenant.publisherId)", json: ["enabled": false]).status == .ok)
            expectError(try await api.pay(tenant, Payment.body()), .unauthorized, code: "unauthorized")
            #expect(try await api.streamLength() == 0)
        }
    }
}
