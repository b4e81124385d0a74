import Foundation
import Hummingbird
import HummingbirdTesting
import Prometheus
import Shared
import Testing
import TestSupport

@testable import API

/// One publisher created through the admin API, with its app and products: the credentials are real.
struct Tenant: Sendable {
    let publisherId: String
    let name: String
    let publisherToken: String
    let username: String
    let password: String
    let bundleId: String
    /// Product UUIDs (as the admin API returned them) by offer id.
    let productIds: [String: String]

    /// The offers every tenant gets.
    enum Offer {
        /// `non_renewing`, 30 days; the offer id of CONTRACT.md's example.
        static let pass = "S598742062_US"
        /// `consumable`, 100 coins; its offer id defaults to its product id.
        static let coins = "coins.100"
        /// `non_consumable`.
        static let lifetime = "PREMIUM_LIFETIME"
    }

    /// `X-Publisher-Token` and `Authorization: Basic`, plus `Content-Type: application/json`.
    var headers: HTTPFields {
        var fields = self.credentialHeaders
        fields[.contentType] = "application/json"
        return fields
    }

    /// Only the two credentials.
    var credentialHeaders: HTTPFields {
        [.publisherToken: self.publisherToken, .authorization: Self.basic(self.username, self.password)]
    }

    /// An `Authorization: Basic` value.
    static func basic(_ username: String, _ password: String) -> String {
        "Basic " + Data("\(username):\(password)".utf8).base64EncodedString()
    }
}

/// A client for one running API plus direct access to its Redis keys, for the tests' own checks.
struct APIClient: Sendable {
    let client: any TestClientProtocol
    let services: APIServices
    let registry: PrometheusCollectorRegistry
    let prefix: String
    /// A Redis client of the test's own (not the API's), to look at keys.
    let inspector: RedisClient
    let adminToken: String?

    // MARK: Requests

    /// Sends a request; `json` is serialised (and `Content-Type: application/json` set unless `headers` has one).
    @discardableResult
    func send(
        _ method: HTTPRequest.Method, _ uri: String, headers: HTTPFields = [:], json: Any? = nil, body: String? = nil
    ) async throws -> TestResponse {
        var headers = headers
        var buffer: ByteBuffer?
        if let json {
            buffer = ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: json, options: [.sortedKeys]))
            if headers[.contentType] == nil { headers[.contentType] = "application/json" }
        } else if let body {
            buffer = ByteBuffer(string: body)
        }
        return try await self.client.execute(uri: uri, method: method, headers: headers, body: buffer) { $0 }
    }

    /// A request to `/admin/v1…` with the configured admin bearer token.
    @discardableResult
    func admin(_ method: HTTPRequest.Method, _ uri: String, json: Any? = nil) async throws -> TestResponse {
        var headers: HTTPFields = [:]
        if let adminToken { headers[.authorization] = "Bearer \(adminToken)" }
        return try await self.send(method, uri, headers: headers, json: json)
    }

    /// `POST /apple/payment` as `tenant`.
    @discardableResult
    func pay(_ tenant: Tenant, _ body: [String: Any]) async throws -> TestResponse {
        try await self.send(.post, "/apple/payment", headers: tenant.headers, json: body)
    }

    /// `GET` a publisher route as `tenant`.
    func get(_ tenant: Tenant, _ uri: String) async throws -> TestResponse {
        try await self.send(.get, uri, headers: tenant.credentialHeaders)
    }

    /// Submits and requires a 200, returning the job id.
    func submit(_ tenant: Tenant, _ body: [String: Any], sourceLocation: SourceLocation = #_sourceLocation) async throws -> String {
        let response = try await self.pay(tenant, body)
        try #require(response.status == .ok, "submission answered \(response.status): \(String(buffer: response.body))", sourceLocation: sourceLocation)
        let json = try response.json()
        #expect(json["message"] as? String == "OK", sourceLocation: sourceLocation)
        #expect(json["status"] as? String == "queued", sourceLocation: sourceLocation)
        return try #require(json["jobId"] as? String, sourceLocation: sourceLocation)
    }

    // MARK: Provisioning through the admin API

    /// Creates a publisher, its app and three products through `/admin/v1`, requiring each step to succeed.
    func provisionTenant(name: String = "Publisher \(UUID().uuidString.prefix(8))", bundleId: String = "com.example.tollgate") async throws -> Tenant {
        let created = try await self.admin(.post, "/admin/v1/publishers", json: ["name": name])
        try #require(created.status == .created, "publisher: \(created.status) \(String(buffer: created.body))")
        let publisher = try created.json()
        let publisherId = try #require(publisher["id"] as? String)
        let token = try #require(publisher["publisherToken"] as? String)
        let basic = try #require(publisher["basicAuth"] as? [String: Any])
        let username = try #require(basic["username"] as? String)
        let password = try #require(basic["password"] as? String)

        let app = try await self.admin(.post, "/admin/v1/publishers/\(publisherId)/apps", json: [
            "bundleId": bundleId, "sharedSecret": "shared-secret-\(UUID().uuidString)",
        ])
        try #require(app.status == .created, "app: \(app.status) \(String(buffer: app.body))")

        var productIds: [String: String] = [:]
        let products: [[String: Any]] = [
            ["productId": "pass.30days", "offerId": Tenant.Offer.pass, "kind": "non_renewing", "title": "30-day pass", "durationDays": 30],
            ["productId": Tenant.Offer.coins, "kind": "consumable", "title": "100 coins", "coins": 100],
            ["productId": "premium.lifetime", "offerId": Tenant.Offer.lifetime, "kind": "non_consumable", "title": "Premium forever"],
        ]
        for var product in products {
            product["publisherId"] = publisherId
            product["bundleId"] = bundleId
            let response = try await self.admin(.post, "/admin/v1/products", json: product)
            try #require(response.status == .created, "product: \(response.status) \(String(buffer: response.body))")
            let json = try response.json()
            productIds[try #require(json["offerId"] as? String)] = try #require(json["id"] as? String)
        }
        return Tenant(
            publisherId: publisherId, name: name, publisherToken: token, username: username, password: password,
            bundleId: bundleId, productIds: productIds
        )
    }

    // MARK: Redis

    /// `XLEN` of this deployment's job stream: how many jobs were enqueued and not yet consumed.
    func streamLength() async throws -> Int {
        try #require(try await self.inspector.send("XLEN", "\(self.prefix):{q}:jobs").int)
    }

    /// Every Redis key of this deployment, sorted, but the rate-limit buckets, which expire on their own
    /// a few seconds after a publisher's last request.
    func keys() async throws -> [String] {
        (try await self.inspector.send("KEYS", "\(self.prefix):*").array ?? []).compactMap(\.string).filter { !$0.contains(":{rate}:") }.sorted()
    }
}

// MARK: Bodies

enum Payment {
    /// A receipt in the emulator's scenario form (base64 of JSON), as a real client would send.
    static func receipt(bundleId: String = "com.example.tollgate", productId: String = "pass.30days", transactionId: String) -> String {
        ScenarioReceipt.make(bundleId: bundleId, purchases: [.init(productId: productId, transactionId: transactionId)])
    }

    /// A `POST /apple/payment` body.
    static func body(
        email: String = "viewer@example.com", offerId: String = Tenant.Offer.pass, transactionId: String? = ScenarioReceipt.transactionId(),
        receiptData: String? = nil, appType: String? = nil, ipAddress: String? = nil
    ) -> [String: Any] {
        var receipt: [String: Any] = ["receiptData": receiptData ?? Self.receipt(transactionId: transactionId ?? ScenarioReceipt.transactionId())]
        if let transactionId { receipt["transactionId"] = transactionId }
        var body: [String: Any] = ["customerEmail": email, "offerId": offerId, "receipt": receipt]
        body["appType"] = appType
        body["ipAddress"] = ipAddress
        return body
    }
}

// MARK: Responses

extension TestResponse {
    /// The body as a JSON object.
    func json() throws -> [String: Any] {
        let value = try JSONSerialization.jsonObject(with: Data(self.body.readableBytesView), options: [.fragmentsAllowed])
        guard let object = value as? [String: Any] else { throw HarnessError("not a JSON object: \(String(buffer: self.body))") }
        return object
    }

    /// The body as text.
    var text: String { String(buffer: self.body) }
}

/// Checks CONTRACT.md's error shape: the status, a JSON body `{"message","code","field"?}`.
func expectError(
    _ response: TestResponse, _ status: HTTPResponse.Status, code: String, field: String? = nil,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    #expect(response.status == status, "body: \(response.text)", sourceLocation: sourceLocation)
    #expect(response.headers[.contentType]?.hasPrefix("application/json") == true, sourceLocation: sourceLocation)
    guard let json = try? response.json() else {
        Issue.record("error body is not a JSON object: \(response.text)", sourceLocation: sourceLocation)
        return
    }
    #expect((json["message"] as? String)?.isEmpty == false, "message: \(response.text)", sourceLocation: sourceLocation)
    #expect(json["code"] as? String == code, "body: \(response.text)", sourceLocation: sourceLocation)
    #expect(json["field"] as? String == field, "body: \(response.text)", sourceLocation: sourceLocation)
    if status == .unauthorized {
        // RFC 9110: every 401 names a scheme the route takes.
        #expect(response.headers[.wwwAuthenticate]?.contains(#"realm="tollgate"#) == true, sourceLocation: sourceLocation)
    }
}
