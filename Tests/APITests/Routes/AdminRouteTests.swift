import Foundation
import Hummingbird
import HummingbirdTesting
import Shared
import Testing
import TestSupport

@testable import API

/// `/admin/v1`: authentication, publishers, apps, products, the queue and dead letters.
@Suite("Admin routes")
struct AdminRouteTests {
    // MARK: Authentication

    static let adminRoutes: [(HTTPRequest.Method, String)] = [
        (.post, "/admin/v1/publishers"), (.post, "/admin/v1/publishers/\(UUID())/apps"), (.patch, "/admin/v1/publishers/\(UUID())/apps/com.example.app"),
        (.post, "/admin/v1/products"),
        (.get, "/admin/v1/products?publisherId=\(UUID())"), (.patch, "/admin/v1/products/\(UUID())"), (.get, "/admin/v1/queue"),
        (.get, "/admin/v1/dead-letters"), (.post, "/admin/v1/dead-letters/some-job/requeue"),
    ]

    @Test("without TOLLGATE_ADMIN_TOKEN every admin route answers 404, whatever the bearer")
    func adminDisabled() async throws {
        try await APIHarness.withAPI(.init(adminToken: nil)) { api in
            for (method, uri) in Self.adminRoutes {
                for headers: HTTPFields in [[:], [.authorization: "Bearer \(APIHarness.adminToken)"], [.authorization: "Bearer "]] {
                    let response = try await api.send(method, uri, headers: headers, json: ["name": "x"])
                    expectError(response, .notFound, code: "not_found")
                }
            }
            // Nor under another method: a 405 would tell that they exist.
            for (method, uri) in [(HTTPRequest.Method.delete, "/admin/v1/queue"), (.get, "/admin/v1/publishers")] {
                let response = try await api.send(method, uri)
                expectError(response, .notFound, code: "not_found")
                #expect(response.headers[.allow] == nil)
            }
            // Nothing was created by any of those calls.
            let count = try await api.services.database.query("SELECT count(*) AS n FROM publishers").first?.decode(Int.self, "n")
            #expect(count == 0)
        }
    }

    @Test("admin routes refuse a missing, wrong or non-bearer credential with 401")
    func adminUnauthorized() async throws {
        try await APIHarness.withAPI { api in
            let wrong: [HTTPFields] = [
                [:],
                [.authorization: "Bearer wrong-token-0123456789abcdef"],
                [.authorization: "Bearer \(APIHarness.adminToken)x"],
                [.authorization: "Bearer \(APIHarness.adminToken.dropLast())"],
                [.authorization: "Basic " + Data("admin:\(APIHarness.adminToken)".utf8).base64EncodedString()],
                [.authorization: APIHarness.adminToken],
            ]
            for (method, uri) in Self.adminRoutes {
                for headers in wrong {
                    let response = try await api.send(method, uri, headers: headers, json: ["name": "x"])
                    expectError(response, .unauthorized, code: "unauthorized")
                    #expect(response.headers[.wwwAuthenticate] == #"Bearer realm="tollgate-admin""#)
                }
            }
            let count = try await api.services.database.query("SELECT count(*) AS n FROM publishers").first?.decode(Int.self, "n")
            #expect(count == 0)
        }
    }

    // MARK: Publishers

    @Test("creating a publisher returns its id, name and both credentials once; secrets are stored only as hashes")
    func createPublisher() async throws {
        try await APIHarness.withAPI { api in
            let response = try await api.admin(.post, "/admin/v1/publishers", json: ["name": "Acme Streaming"])
            #expect(response.status == .created)
            #expect(response.headers[.contentType]?.hasPrefix("application/json") == true)
            let json = try response.json()
            #expect(Set(json.keys) == ["id", "name", "publisherToken", "basicAuth"])
            let id = try #require(json["id"] as? String)
            #expect(UUID(uuidString: id) != nil)
            #expect(json["name"] as? String == "Acme Streaming")
            let token = try #require(json["publisherToken"] as? String)
            let basic = try #require(json["basicAuth"] as? [String: Any])
            #expect(Set(basic.keys) == ["username", "password"])
            let username = try #require(basic["username"] as? String)
            let password = try #require(basic["password"] as? String)
            #expect(token.count >= 32)
            #expect(password.count >= 24)
            #expect(!username.isEmpty)

            // The row exists, and no column holds either secret in plain text (as text, or as bytes).
            let rows = try await api.services.database.query(
                "SELECT kv.key, kv.value FROM publishers p, jsonb_each_text(to_jsonb(p)) AS kv(key, value) WHERE p.id = $1::uuid", [id]
            ).rows
            #expect(rows.count >= 5)
            for row in rows {
                let column = try row.decode(String.self, "key")
                let value = try row.decode(String?.self, "value") ?? ""
                for secret in [token, password] {
                    let hex = "\\x" + Hex.encode(Array(secret.utf8))
                    #expect(!value.contains(secret), "column \(column) holds a secret in plain text")
                    #expect(!value.lowercased().contains(hex.lowercased()), "column \(column) holds a secret's bytes")
                }
            }
            // A second publisher gets different credentials.
            let other = try await api.admin(.post, "/admin/v1/publishers", json: ["name": "Acme Streaming"]).json()
            #expect(other["id"] as? String != id)
            #expect(other["publisherToken"] as? String != token)
            #expect((other["basicAuth"] as? [String: Any])?["password"] as? String != password)
        }
    }

    @Test("publisher creation validates its body and writes nothing when it refuses")
    func createPublisherInvalid() async throws {
        try await APIHarness.withAPI { api in
            let bearer: HTTPFields = [.authorization: "Bearer \(APIHarness.adminToken)"]
            expectError(try await api.admin(.post, "/admin/v1/publishers", json: [String: Any]()), .badRequest, code: "missing_field", field: "name")
            expectError(try await api.admin(.post, "/admin/v1/publishers", json: ["name": ""]), .badRequest, code: "missing_field", field: "name")
            expectError(try await api.admin(.post, "/admin/v1/publishers", json: ["name": 7]), .badRequest, code: "invalid_type", field: "name")
            expectError(
                try await api.admin(.post, "/admin/v1/publishers", json: ["name": String(repeating: "n", count: 201)]),
                .unprocessableContent, code: "invalid_name", field: "name"
            )
            // 150 letters with a combining accent each: 150 characters to Swift, 300 code points to PostgreSQL.
            expectError(
                try await api.admin(.post, "/admin/v1/publishers", json: ["name": String(repeating: "e\u{301}", count: 150)]),
                .unprocessableContent, code: "invalid_name", field: "name"
            )
            // PostgreSQL text cannot hold NUL: refused rather than stored cut short.
            expectError(try await api.admin(.post, "/admin/v1/publishers", json: ["name": "a\u{0}b"]), .unprocessableContent, code: "invalid_character", field: "name")
            var json = bearer
            json[.contentType] = "application/json"
            expectError(try await api.send(.post, "/admin/v1/publishers", headers: json, body: "{name"), .badRequest, code: "malformed_json")
            var text = bearer
            text[.contentType] = "text/plain"
            expectError(try await api.send(.post, "/admin/v1/publishers", headers: text, body: #"{"name":"x"}"#), .unsupportedMediaType, code: "unsupported_media_type")
            let count = try await api.services.database.query("SELECT count(*) AS n FROM publishers").first?.decode(Int.self, "n")
            #expect(count == 0)
        }
    }

    // MARK: Apps

    @Test("creating an app answers 201 without echoing the shared secret; duplicates 409; unknown publisher 404")
    func createApp() async throws {
        try await APIHarness.withAPI { api in
            let publisher = try await api.admin(.post, "/admin/v1/publishers", json: ["name": "P"]).json()
            let publisherId = try #require(publisher["id"] as? String)
            let secret = "shared-secret-\(UUID().uuidString)"

            let created = try await api.admin(.post, "/admin/v1/publishers/\(publisherId)/apps", json: ["bundleId": "com.example.app", "sharedSecret": secret])
            #expect(created.status == .created)
            let app = try created.json()
            #expect(UUID(uuidString: try #require(app["id"] as? String)) != nil)
            #expect(app["publisherId"] as? String == publisherId)
            #expect(app["bundleId"] as? String == "com.example.app")
            #expect(app["allowSandbox"] as? Bool == true)
            #expect(app["sharedSecret"] == nil)
            #expect(!created.text.contains(secret))

            let noSandbox = try await api.admin(.post, "/admin/v1/publishers/\(publisherId)/apps", json: ["bundleId": "com.example.tv", "allowSandbox": false])
            #expect(noSandbox.status == .created)
            #expect(try noSandbox.json()["allowSandbox"] as? Bool == false)

            let duplicate = try await api.admin(.post, "/admin/v1/publishers/\(publisherId)/apps", json: ["bundleId": "com.example.app"])
            expectError(duplicate, .conflict, code: "conflict", field: "bundleId")

            expectError(try await api.admin(.post, "/admin/v1/publishers/\(UUID())/apps", json: ["bundleId": "com.example.app"]), .notFound, code: "not_found")
            expectError(try await api.admin(.post, "/admin/v1/publishers/not-a-uuid/apps", json: ["bundleId": "com.example.app"]), .notFound, code: "not_found")
            expectError(try await api.admin(.post, "/admin/v1/publishers/\(publisherId)/apps", json: [String: Any]()), .badRequest, code: "missing_field", field: "bundleId")
            expectError(
                try await api.admin(.post, "/admin/v1/publishers/\(publisherId)/apps", json: ["bundleId": "com.example.x", "allowSandbox": 1]),
                .badRequest, code: "invalid_type", field: "allowSandbox"
            )
            expectError(
                try await api.admin(.post, "/admin/v1/publishers/\(publisherId)/apps", json: ["bundleId": "com example"]),
                .unprocessableContent, code: "invalid_bundleId", field: "bundleId"
            )
            // Every field is read before any is judged: an ill-typed one is 400 whatever else is wrong.
            expectError(
                try await api.admin(.post, "/admin/v1/publishers/\(publisherId)/apps", json: ["bundleId": "com example", "allowSandbox": "yes"]),
                .badRequest, code: "invalid_type", field: "allowSandbox"
            )
            // Every worker keeps the secret and sends it with every verification: a megabyte of one is refused.
            expectError(
                try await api.admin(.post, "/admin/v1/publishers/\(publisherId)/apps", json: ["bundleId": "com.example.big", "sharedSecret": String(repeating: "a", count: 257)]),
                .unprocessableContent, code: "invalid_sharedSecret", field: "sharedSecret"
            )

            let apps = try await api.services.database.query("SELECT count(*) AS n FROM apps").first?.decode(Int.self, "n")
            #expect(apps == 2)
            // The shared secret is kept for the worker (Apple needs it), and only for the app it was given to.
            let stored = try await api.services.database.query("SELECT shared_secret FROM apps WHERE bundle_id = 'com.example.app'").first
            #expect(try stored?.decode(String?.self, "shared_secret") == secret)
        }
    }

    @Test("PATCH of an app changes its shared secret or sandbox setting, in any case of its bundle id; it validates and writes nothing when it refuses")
    func updateApp() async throws {
        try await APIHarness.withAPI { api in
            let publisher = try await api.admin(.post, "/admin/v1/publishers", json: ["name": "P"]).json()
            let publisherId = try #require(publisher["id"] as? String)
            let created = try await api.admin(.post, "/admin/v1/publishers/\(publisherId)/apps", json: ["bundleId": "com.Example.app", "sharedSecret": "wrong"])
            try #require(created.status == .created)
            func stored() async throws -> (secret: String?, sandbox: Bool) {
                let row = try #require(try await api.services.database.query("SELECT shared_secret, allow_sandbox FROM apps WHERE bundle_id = 'com.Example.app'").first)
                return (try row.decode(String?.self, "shared_secret"), try row.decode(Bool.self, "allow_sandbox"))
            }
            let path = "/admin/v1/publishers/\(publisherId)/apps/com.example.APP"

            let secret = "right-\(UUID().uuidString)"
            let updated = try await api.admin(.patch, path, json: ["sharedSecret": secret])
            #expect(updated.status == .ok)
            let app = try updated.json()
            #expect(app["id"] as? String == (try created.json()["id"] as? String))
            #expect(app["bundleId"] as? String == "com.Example.app")
            #expect(app["allowSandbox"] as? Bool == true)
            #expect(!updated.text.contains(secret))
            #expect(try await stored() == (secret, true))

            #expect(try await api.admin(.patch, path, json: ["allowSandbox": false]).status == .ok)
            #expect(try await stored() == (secret, false), "a field left out stays as it is")
            #expect(try await api.admin(.patch, path, json: ["sharedSecret": NSNull()]).status == .ok)
            #expect(try await stored() == (nil, false))
            #expect(try await api.admin(.patch, path, json: ["sharedSecret": secret, "allowSandbox": true]).status == .ok)
            #expect(try await api.admin(.patch, path, json: ["sharedSecret": ""]).status == .ok)
            #expect(try await stored() == (nil, true))

            expectError(try await api.admin(.patch, "/admin/v1/publishers/\(publisherId)/apps/com.example.other", json: ["allowSandbox": false]), .notFound, code: "not_found")
            expectError(try await api.admin(.patch, "/admin/v1/publishers/\(UUID())/apps/com.example.app", json: ["allowSandbox": false]), .notFound, code: "not_found")
            expectError(try await api.admin(.patch, path, json: ["sharedSecret": 5, "allowSandbox": false]), .badRequest, code: "invalid_type", field: "sharedSecret")
            expectError(try await api.admin(.patch, path, json: ["sharedSecret": "a b", "allowSandbox": "no"]), .badRequest, code: "invalid_type", field: "allowSandbox")
            expectError(try await api.admin(.patch, path, json: ["sharedSecret": "a b", "allowSandbox": false]), .unprocessableContent, code: "invalid_sharedSecret", field: "sharedSecret")
            expectError(try await api.admin(.patch, path, json: ["sharedSecret": secret, "allowsandbox": false]), .badRequest, code: "unknown_field", field: "allowsandbox")
            #expect(try await stored() == (nil, true), "nothing written by a refused PATCH")
        }
    }

    // MARK: Products

    static func product(_ publisherId: String, _ fields: [String: Any]) -> [String: Any] {
        var body: [String: Any] = ["publisherId": publisherId, "bundleId": "com.example.app", "title": "A product"]
        for (key, value) in fields { body[key] = value }
        return body
    }

    /// A publisher with one app `com.example.app`; returns the publisher id.
    static func publisherWithApp(_ api: APIClient, name: String = "P") async throws -> String {
        let publisher = try await api.admin(.post, "/admin/v1/publishers", json: ["name": name]).json()
        let publisherId = try #require(publisher["id"] as? String)
        let app = try await api.admin(.post, "/admin/v1/publishers/\(publisherId)/apps", json: ["bundleId": "com.example.app"])
        try #require(app.status == .created)
        return publisherId
    }

    @Test("a product is answered with every field named as in the request, offerId filled in")
    func createProduct() async throws {
        try await APIHarness.withAPI { api in
            let publisherId = try await Self.publisherWithApp(api)
            let request: [String: Any] = [
                "publisherId": publisherId, "bundleId": "com.example.app", "productId": "coins.500", "offerId": "COINS_500",
                "kind": "consumable", "title": "500 coins", "description": "A bag of coins", "coins": 500, "enabled": true,
            ]
            let response = try await api.admin(.post, "/admin/v1/products", json: request)
            #expect(response.status == .created)
            let product = try response.json()
            for key in ["publisherId", "bundleId", "productId", "offerId", "kind", "title", "description"] {
                #expect(product[key] as? String == request[key] as? String, "field \(key)")
            }
            #expect(product["coins"] as? Int == 500)
            #expect(product["enabled"] as? Bool == true)
            #expect(UUID(uuidString: try #require(product["id"] as? String)) != nil)

            // offerId defaults to productId; enabled defaults to true; durationDays kept for non_renewing.
            let defaulted = try await api.admin(.post, "/admin/v1/products", json: Self.product(publisherId, [
                "productId": "pass.7days", "kind": "non_renewing", "durationDays": 7,
            ]))
            #expect(defaulted.status == .created)
            let pass = try defaulted.json()
            #expect(pass["productId"] as? String == "pass.7days")
            #expect(pass["offerId"] as? String == "pass.7days")
            #expect(pass["kind"] as? String == "non_renewing")
            #expect(pass["durationDays"] as? Int == 7)
            #expect(pass["enabled"] as? Bool == true)

            for kind in ["non_consumable", "auto_renewable"] {
                let response = try await api.admin(.post, "/admin/v1/products", json: Self.product(publisherId, ["productId": "p.\(kind)", "kind": kind]))
                #expect(response.status == .created, "\(kind): \(response.text)")
                #expect(try response.json()["kind"] as? String == kind)
            }
            let disabled = try await api.admin(.post, "/admin/v1/products", json: Self.product(publisherId, [
                "productId": "p.off", "kind": "non_consumable", "enabled": false,
            ]))
            #expect(try disabled.json()["enabled"] as? Bool == false)
        }
    }

    @Test("a product of an app not registered yet creates the app; registering it then answers 201 with that app, a second time 409")
    func productBeforeApp() async throws {
        try await APIHarness.withAPI { api in
            let publisher = try await api.admin(.post, "/admin/v1/publishers", json: ["name": "P"]).json()
            let publisherId = try #require(publisher["id"] as? String)
            let product = try await api.admin(.post, "/admin/v1/products", json: Self.product(publisherId, ["productId": "coins_100", "kind": "consumable", "coins": 100]))
            #expect(product.status == .created, "\(product.text)")
            #expect(try product.json()["offerId"] as? String == "coins_100")

            let app = try await api.admin(.post, "/admin/v1/publishers/\(publisherId)/apps", json: ["bundleId": "com.example.app", "sharedSecret": "later-secret", "allowSandbox": false])
            #expect(app.status == .created, "\(app.text)")
            #expect(try app.json()["allowSandbox"] as? Bool == false)
            let stored = try #require(try await api.services.database.query(
                "SELECT a.id::text AS id, a.shared_secret, a.allow_sandbox FROM apps a JOIN products p ON p.app_id = a.id WHERE p.product_id = 'coins_100'"
            ).first)
            #expect(try stored.decode(String.self, "id") == (try app.json()["id"] as? String))
            #expect(try stored.decode(String?.self, "shared_secret") == "later-secret")
            #expect(try stored.decode(Bool.self, "allow_sandbox") == false)
            expectError(
                try await api.admin(.post, "/admin/v1/publishers/\(publisherId)/apps", json: ["bundleId": "com.example.app"]), .conflict, code: "conflict", field: "bundleId"
            )
        }
    }

    @Test("product validation: kind, coins, durationDays, identifiers and publisher")
    func createProductInvalid() async throws {
        try await APIHarness.withAPI { api in
            let publisherId = try await Self.publisherWithApp(api)
            let cases: [([String: Any], HTTPResponse.Status, String, String?)] = [
                (["productId": "x", "kind": "subscription"], .unprocessableContent, "invalid_kind", "kind"),
                (["productId": "x", "kind": "Consumable", "coins": 5], .unprocessableContent, "invalid_kind", "kind"),
                (["productId": "x"], .badRequest, "missing_field", "kind"),
                (["productId": "x", "kind": 1], .badRequest, "invalid_type", "kind"),
                (["productId": "x", "kind": "consumable"], .badRequest, "missing_field", "coins"),
                (["productId": "x", "kind": "consumable", "coins": "100"], .badRequest, "invalid_type", "coins"),
                (["productId": "x", "kind": "consumable", "coins": true], .badRequest, "invalid_type", "coins"),
                (["productId": "x", "kind": "consumable", "coins": 1.5], .badRequest, "invalid_type", "coins"),
                (["productId": "x", "kind": "consumable", "coins": 0], .unprocessableContent, "invalid_coins", "coins"),
                (["productId": "x", "kind": "consumable", "coins": -5], .unprocessableContent, "invalid_coins", "coins"),
                (["productId": "x", "kind": "non_renewing"], .badRequest, "missing_field", "durationDays"),
                (["productId": "x", "kind": "non_renewing", "durationDays": 0], .unprocessableContent, "invalid_duration", "durationDays"),
                (["productId": "x", "kind": "non_consumable", "enabled": "yes"], .badRequest, "invalid_type", "enabled"),
                (["kind": "non_consumable"], .badRequest, "missing_field", "productId"),
                (["productId": "has space", "kind": "non_consumable"], .unprocessableContent, "invalid_productId", "productId"),
                (["productId": "x", "offerId": "has space", "kind": "non_consumable"], .unprocessableContent, "invalid_offer_id", "offerId"),
                // offerId defaults to productId, which may be longer than an offer id can be.
                (["productId": String(repeating: "p", count: 129), "kind": "non_consumable"], .unprocessableContent, "invalid_offer_id", "offerId"),
                (["productId": "x", "kind": "non_consumable", "publisherId": UUID().uuidString], .unprocessableContent, "unknown_publisher", "publisherId"),
                (["productId": "x", "kind": "non_consumable", "title": ""], .badRequest, "missing_field", "title"),
                // Kept in every API's and worker's offer cache: bounded.
                (["productId": "x", "kind": "non_consumable", "title": String(repeating: "t", count: 201)], .unprocessableContent, "invalid_title", "title"),
                (["productId": "x", "kind": "non_consumable", "description": String(repeating: "d", count: 2001)], .unprocessableContent, "invalid_description", "description"),
                // A field missing or ill-typed is 400, whatever else is wrong with the values.
                (["productId": "has space"], .badRequest, "missing_field", "kind"),
                (["productId": "x", "kind": "subscription", "title": ""], .badRequest, "missing_field", "title"),
                (["productId": "x", "kind": "non_consumable", "publisherId": "not-a-publisher", "enabled": "yes"], .badRequest, "invalid_type", "enabled"),
                (["productId": "x", "offerId": "has space", "kind": "non_consumable", "description": 5], .badRequest, "invalid_type", "description"),
            ]
            for (fields, status, code, field) in cases {
                let response = try await api.admin(.post, "/admin/v1/products", json: Self.product(publisherId, fields))
                expectError(response, status, code: code, field: field)
            }
            let count = try await api.services.database.query("SELECT count(*) AS n FROM products").first?.decode(Int.self, "n")
            #expect(count == 0)
        }
    }

    @Test("a second product with the same productId or offerId in one app is 409")
    func createProductDuplicate() async throws {
        try await APIHarness.withAPI { api in
            let publisherId = try await Self.publisherWithApp(api)
            let first = try await api.admin(.post, "/admin/v1/products", json: Self.product(publisherId, ["productId": "p1", "offerId": "O1", "kind": "non_consumable"]))
            #expect(first.status == .created)
            expectError(
                try await api.admin(.post, "/admin/v1/products", json: Self.product(publisherId, ["productId": "p1", "offerId": "O2", "kind": "non_consumable"])),
                .conflict, code: "conflict", field: "productId"
            )
            expectError(
                try await api.admin(.post, "/admin/v1/products", json: Self.product(publisherId, ["productId": "p2", "offerId": "O1", "kind": "non_consumable"])),
                .conflict, code: "conflict", field: "offerId"
            )
            // The same ids in another publisher's app are fine.
            let other = try await Self.publisherWithApp(api, name: "Q")
            let elsewhere = try await api.admin(.post, "/admin/v1/products", json: Self.product(other, ["productId": "p1", "offerId": "O1", "kind": "non_consumable"]))
            #expect(elsewhere.status == .created)
        }
    }

    @Test("products are listed per publisher; unknown or missing publisherId is refused")
    func listProducts() async throws {
        try await APIHarness.withAPI { api in
            let a = try await api.provisionTenant(name: "A")
            let b = try await api.provisionTenant(name: "B")
            let response = try await api.admin(.get, "/admin/v1/products?publisherId=\(a.publisherId)")
            #expect(response.status == .ok)
            let products = try #require(try response.json()["products"] as? [[String: Any]])
            #expect(products.count == 3)
            #expect(Set(products.compactMap { $0["id"] as? String }) == Set(a.productIds.values))
            #expect(products.allSatisfy { $0["publisherId"] as? String == a.publisherId })
            #expect(Set(products.compactMap { $0["offerId"] as? String }) == [Tenant.Offer.pass, Tenant.Offer.coins, Tenant.Offer.lifetime])
            let coins = try #require(products.first { $0["offerId"] as? String == Tenant.Offer.coins })
            #expect(coins["kind"] as? String == "consumable")
            #expect(coins["coins"] as? Int == 100)
            #expect(coins["productId"] as? String == Tenant.Offer.coins)

            let other = try #require(try await api.admin(.get, "/admin/v1/products?publisherId=\(b.publisherId)").json()["products"] as? [[String: Any]])
            #expect(Set(other.compactMap { $0["id"] as? String }) == Set(b.productIds.values))
            #expect(Set(other.compactMap { $0["id"] as? String }).isDisjoint(with: Set(a.productIds.values)))

            expectError(try await api.admin(.get, "/admin/v1/products"), .badRequest, code: "missing_field", field: "publisherId")
            expectError(try await api.admin(.get, "/admin/v1/products?publisherId="), .badRequest, code: "missing_field", field: "publisherId")
            expectError(try await api.admin(.get, "/admin/v1/products?publisherId=\(UUID())"), .notFound, code: "not_found")
            expectError(try await api.admin(.get, "/admin/v1/products?publisherId=nope"), .notFound, code: "not_found")
        }
    }

    @Test("a publisher's products page with limit and after, in creation order, each once; a cursor that is not one of its products is refused")
    func pageProducts() async throws {
        try await APIHarness.withAPI { api in
            let a = try await api.provisionTenant(name: "A")
            let b = try await api.provisionTenant(name: "B")
            // Created at the same moment, as products of one transaction would be: the id breaks the tie.
            try await api.services.database.query(
                "UPDATE products SET created_at = (SELECT min(created_at) FROM products WHERE publisher_id = $1) WHERE publisher_id = $1",
                [UUID(uuidString: a.publisherId)]
            )
            let all = try #require(try await api.admin(.get, "/admin/v1/products?publisherId=\(a.publisherId)").json())
            let ids = try #require(all["products"] as? [[String: Any]]).compactMap { $0["id"] as? String }
            #expect(ids.count == 3)
            #expect(all["next"] == nil, "no limit: every product, and no next")

            var paged: [String] = []
            var after: String?
            var pages = 0
            repeat {
                let page = try #require(try await api.admin(
                    .get, "/admin/v1/products?publisherId=\(a.publisherId)&limit=2" + (after.map { "&after=\($0)" } ?? "")
                ).json())
                let products = try #require(page["products"] as? [[String: Any]])
                #expect(products.count <= 2)
                paged += products.compactMap { $0["id"] as? String }
                after = page["next"] as? String
                pages += 1
            } while after != nil && pages < 10
            #expect(pages == 2)
            #expect(paged == ids, "the same products in the same order, each once")
            let last = try #require(try await api.admin(.get, "/admin/v1/products?publisherId=\(a.publisherId)&limit=1&after=\(ids[2])").json())
            #expect((last["products"] as? [Any])?.isEmpty == true)
            #expect(last["next"] == nil)
            // Exactly `limit` left: no next. All of them in one page: no next. A limit of 0 is clamped to 1.
            for (query, count, next) in [("limit=1&after=\(ids[1])", 1, false), ("limit=3", 3, false), ("limit=0", 1, true)] {
                let page = try #require(try await api.admin(.get, "/admin/v1/products?publisherId=\(a.publisherId)&\(query)").json())
                #expect((page["products"] as? [Any])?.count == count, "\(query)")
                #expect((page["next"] != nil) == next, "\(query)")
            }

            let foreign = try #require(b.productIds.values.first)
            for cursor in ["nope", UUID().uuidString, foreign] {
                expectError(
                    try await api.admin(.get, "/admin/v1/products?publisherId=\(a.publisherId)&after=\(cursor)"), .badRequest, code: "invalid_type", field: "after"
                )
            }
            expectError(try await api.admin(.get, "/admin/v1/products?publisherId=\(a.publisherId)&limit=all"), .badRequest, code: "invalid_type", field: "limit")
        }
    }

    @Test("PATCH enabled=false disables the offer: the next submission is 422 and nothing is enqueued; one accepted before keeps its job")
    func disableProduct() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            // A first submission caches the offer as enabled.
            let first = Payment.body()
            let firstJob = try await api.submit(tenant, first)
            #expect(try await api.streamLength() == 1)

            let productId = try #require(tenant.productIds[Tenant.Offer.pass])
            let patched = try await api.admin(.patch, "/admin/v1/products/\(productId)", json: ["enabled": false])
            #expect(patched.status == .ok)
            let product = try patched.json()
            #expect(product["enabled"] as? Bool == false)
            #expect(product["id"] as? String == productId)
            #expect(product["offerId"] as? String == Tenant.Offer.pass)
            #expect(product["durationDays"] as? Int == 30)

            let keysBefore = try await api.keys()
            let refused = try await api.pay(tenant, Payment.body(email: "someone.else@example.com"))
            expectError(refused, .unprocessableContent, code: "offer_disabled", field: "offerId")
            #expect(try await api.streamLength() == 1)
            #expect(try await api.keys() == keysBefore)
            // The receipt accepted before is not refused when sent again (a retry after a lost answer): same job.
            #expect(try await api.submit(tenant, first) == firstJob)
            #expect(try await api.keys() == keysBefore)

            // Other offers of the publisher still work; enabling again restores the offer.
            _ = try await api.submit(tenant, Payment.body(offerId: Tenant.Offer.lifetime))
            let enabled = try await api.admin(.patch, "/admin/v1/products/\(productId)", json: ["enabled": true, "title": "Renamed"])
            #expect(try enabled.json()["enabled"] as? Bool == true)
            #expect(try enabled.json()["title"] as? String == "Renamed")
            _ = try await api.submit(tenant, Payment.body(email: "someone.else@example.com"))
            #expect(try await api.streamLength() == 3)
        }
    }

    @Test("a product created under an offer another app sells is taken by the next submission, not after the offer cache expires")
    func productJoinsCachedOffer() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            let productId = try #require(tenant.productIds[Tenant.Offer.pass])
            #expect(try await api.admin(.patch, "/admin/v1/products/\(productId)", json: ["enabled": false]).status == .ok)
            // The refusal caches the offer with its one (disabled) product.
            expectError(try await api.pay(tenant, Payment.body()), .unprocessableContent, code: "offer_disabled", field: "offerId")

            let tvos = try await api.admin(.post, "/admin/v1/products", json: Self.product(tenant.publisherId, [
                "bundleId": "com.example.tvos", "productId": "tv.pass.30days", "offerId": Tenant.Offer.pass, "kind": "non_renewing", "durationDays": 30,
            ]))
            #expect(tvos.status == .created, "\(tvos.text)")
            _ = try await api.submit(tenant, Payment.body(appType: "tvos"))
        }
    }

    @Test("an empty description is none (left out of the product); PATCH with null or an empty description clears it, without one keeps it")
    func descriptionCleared() async throws {
        try await APIHarness.withAPI { api in
            let publisherId = try await Self.publisherWithApp(api)
            let empty = try await api.admin(.post, "/admin/v1/products", json: Self.product(publisherId, [
                "productId": "p.empty", "kind": "non_consumable", "description": "",
            ]))
            #expect(empty.status == .created)
            #expect(try empty.json()["description"] == nil, "\(empty.text)")
            let created = try await api.admin(.post, "/admin/v1/products", json: Self.product(publisherId, [
                "productId": "p.described", "kind": "non_consumable", "description": "first",
            ]))
            let id = try #require(try created.json()["id"] as? String)
            let description: (TestResponse) throws -> Any? = { try $0.json()["description"] }
            #expect(try description(try await api.admin(.patch, "/admin/v1/products/\(id)", json: ["enabled": true])) as? String == "first")
            #expect(try description(try await api.admin(.patch, "/admin/v1/products/\(id)", json: ["description": NSNull()])) == nil)
            #expect(try description(try await api.admin(.patch, "/admin/v1/products/\(id)", json: ["description": "second"])) as? String == "second")
            #expect(try description(try await api.admin(.patch, "/admin/v1/products/\(id)", json: ["description": ""])) == nil)
            let stored = try await api.services.database.query("SELECT description FROM products WHERE id = $1", [UUID(uuidString: id)])
            #expect(try stored.first?.decode(String?.self, "description") == nil, "stored as NULL, not as an empty text")
        }
    }

    @Test("PATCH validates: unknown product 404, ill-typed fields 400, bad amounts 422")
    func patchInvalid() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            let coins = try #require(tenant.productIds[Tenant.Offer.coins])
            expectError(try await api.admin(.patch, "/admin/v1/products/\(UUID())", json: ["enabled": false]), .notFound, code: "not_found")
            expectError(try await api.admin(.patch, "/admin/v1/products/nope", json: ["enabled": false]), .notFound, code: "not_found")
            expectError(try await api.admin(.patch, "/admin/v1/products/\(coins)", json: ["enabled": "false"]), .badRequest, code: "invalid_type", field: "enabled")
            expectError(try await api.admin(.patch, "/admin/v1/products/\(coins)", json: ["enabled": 0]), .badRequest, code: "invalid_type", field: "enabled")
            // A misspelt field is refused, with the rest of the body: nothing is changed.
            let unknown = try await api.admin(.patch, "/admin/v1/products/\(coins)", json: ["enabled": false, "enable": false, "cions": 5])
            expectError(unknown, .badRequest, code: "unknown_field", field: "cions")
            #expect(unknown.text.contains("enabled"), "the message lists the fields")
            let longName = String(repeating: "x", count: 65)
            let unnamed = try await api.admin(.patch, "/admin/v1/products/\(coins)", json: ["enabled": false, longName: 1])
            expectError(unnamed, .badRequest, code: "unknown_field")
            #expect(!unnamed.text.contains(longName))
            expectError(try await api.admin(.patch, "/admin/v1/products/\(coins)", json: ["coins": 0]), .unprocessableContent, code: "invalid_coins", field: "coins")
            expectError(try await api.admin(.patch, "/admin/v1/products/\(coins)", json: ["coins": 3_000_000_000]), .unprocessableContent, code: "invalid_coins", field: "coins")
            expectError(try await api.admin(.patch, "/admin/v1/products/\(coins)", json: ["title": "a\u{0}b"]), .unprocessableContent, code: "invalid_character", field: "title")
            expectError(try await api.admin(.patch, "/admin/v1/products/\(coins)", json: ["title": ""]), .unprocessableContent, code: "invalid_title", field: "title")
            expectError(
                try await api.admin(.patch, "/admin/v1/products/\(coins)", json: ["title": String(repeating: "é", count: 201)]), .unprocessableContent, code: "invalid_title", field: "title"
            )
            expectError(
                try await api.admin(.patch, "/admin/v1/products/\(coins)", json: ["description": String(repeating: "d", count: 2001)]), .unprocessableContent,
                code: "invalid_description", field: "description"
            )
            #expect(try await api.admin(.patch, "/admin/v1/products/\(coins)", json: ["title": String(repeating: "é", count: 200)]).status == .ok)
            // What identifies the product cannot change (grants were made under it); sent back unchanged, it is accepted.
            let current = try #require((try await api.admin(.get, "/admin/v1/products?publisherId=\(tenant.publisherId)").json()["products"] as? [[String: Any]])?
                .first { $0["id"] as? String == coins })
            for field in ["id", "publisherId", "bundleId", "productId", "offerId", "kind"] {
                let changed = ["id", "publisherId"].contains(field) ? UUID().uuidString : field == "kind" ? "non_consumable" : "changed.\(field)"
                expectError(
                    try await api.admin(.patch, "/admin/v1/products/\(coins)", json: [field: changed, "enabled": false]),
                    .unprocessableContent, code: "immutable_field", field: field
                )
            }
            // An ill-typed field is 400 though an identifying one changed too.
            expectError(
                try await api.admin(.patch, "/admin/v1/products/\(coins)", json: ["kind": "non_consumable", "coins": "100"]),
                .badRequest, code: "invalid_type", field: "coins"
            )
            expectError(
                try await api.admin(.patch, "/admin/v1/products/\(coins)", json: ["title": "", "description": 5]),
                .badRequest, code: "invalid_type", field: "description"
            )
            var unchanged = current.filter { ["publisherId", "bundleId", "productId", "offerId", "kind", "title"].contains($0.key) }
            unchanged["publisherId"] = (unchanged["publisherId"] as? String)?.uppercased()
            // The bundle id as another request named it (apps are matched in any case).
            unchanged["bundleId"] = (unchanged["bundleId"] as? String)?.uppercased()
            #expect(try await api.admin(.patch, "/admin/v1/products/\(coins)", json: unchanged).status == .ok)
            // The product as listed, sent back whole: its timestamps are the server's.
            var whole = current
            whole["id"] = (whole["id"] as? String)?.uppercased()
            whole["updatedAt"] = 0
            let sentBack = try await api.admin(.patch, "/admin/v1/products/\(coins)", json: whole)
            #expect(sentBack.status == .ok, "\(sentBack.text)")
            #expect(Set(current.keys).isSubset(of: AdminController.productFields), "every field a product is listed with may be sent back")
            // Amounts of another kind are ignored, never stored (the database would refuse some of them).
            let pass = try #require(tenant.productIds[Tenant.Offer.pass])
            let lifetime = try #require(tenant.productIds[Tenant.Offer.lifetime])
            for (id, body) in [(coins, ["durationDays": 0]), (lifetime, ["coins": -1, "durationDays": 0]), (pass, ["coins": 5])] {
                let response = try await api.admin(.patch, "/admin/v1/products/\(id)", json: body)
                #expect(response.status == .ok, "\(body): \(response.text)")
                let json = try response.json()
                #expect(json["coins"] as? Int == (id == coins ? 100 : nil))
                #expect(json["durationDays"] as? Int == (id == pass ? 30 : nil))
            }
            let product = try await api.admin(.get, "/admin/v1/products?publisherId=\(tenant.publisherId)").json()
            let listed = try #require((product["products"] as? [[String: Any]])?.first { $0["id"] as? String == coins })
            #expect(listed["enabled"] as? Bool == true)
            #expect(listed["coins"] as? Int == 100)
        }
    }

    // MARK: Queue and dead letters

    /// `GET /admin/v1/queue`'s counts; every one must be a whole number.
    static func counts(_ response: TestResponse) throws -> [String: Int] {
        #expect(response.status == .ok)
        return try response.json().mapValues { try #require($0 as? Int) }
    }

    @Test("queue counts follow submissions; a dead letter is listed and requeued")
    func queueAndDeadLetters() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            let empty = try await api.admin(.get, "/admin/v1/queue")
            #expect(empty.status == .ok)
            #expect(try Self.counts(empty) == ["queued": 0, "processing": 0, "retrying": 0, "dead": 0])

            let first = try await api.submit(tenant, Payment.body(email: "one@example.com"))
            _ = try await api.submit(tenant, Payment.body(email: "two@example.com"))
            #expect(try await Self.counts(api.admin(.get, "/admin/v1/queue")) == ["queued": 2, "processing": 0, "retrying": 0, "dead": 0])
            #expect(try await api.admin(.get, "/admin/v1/dead-letters").json()["deadLetters"] as? [Any] != nil)
            #expect((try await api.admin(.get, "/admin/v1/dead-letters").json()["deadLetters"] as? [Any])?.isEmpty == true)
            for limit in ["all", "1.5", "", "10abc"] {
                expectError(try await api.admin(.get, "/admin/v1/dead-letters?limit=\(limit)"), .badRequest, code: "invalid_type", field: "limit")
            }
            #expect(try await api.admin(.get, "/admin/v1/dead-letters?limit=0").status == .ok, "clamped")
            for after in ["", "abc", "1-", "-1", "1-2-3", "1.5-0", "18446744073709551616-0", "+1-0", "(1-0"] {
                let encoded = after.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? after
                expectError(try await api.admin(.get, "/admin/v1/dead-letters?after=\(encoded)"), .badRequest, code: "invalid_type", field: "after")
            }
            #expect(try await api.admin(.get, "/admin/v1/dead-letters?after=0-0").json()["next"] == nil)

            // Act as a worker: take the first job and dead-letter it.
            let blocking = try TestEnvironment.redis(connections: 1)
            let deliveries = try await api.services.queue.readNew(consumer: "test-worker", count: 1, blockMilliseconds: 1000, blockingClient: blocking)
            await blocking.shutdown()
            let delivery = try #require(deliveries.first)
            #expect(delivery.jobId == first)
            guard case .ready(let job, _, _, _) = try await api.services.queue.start(delivery, now: WallClock.nowMilliseconds(), maxStarts: 100) else {
                Issue.record("the job did not start")
                return
            }
            #expect(try await Self.counts(api.admin(.get, "/admin/v1/queue")) == ["queued": 1, "processing": 1, "retrying": 0, "dead": 0])
            try await api.services.queue.deadLetter(
                delivery, job: job, reason: .appleUnavailable, detail: "test", now: WallClock.nowMilliseconds(), retentionSeconds: 3600
            )
            #expect(try await Self.counts(api.admin(.get, "/admin/v1/queue")) == ["queued": 1, "processing": 0, "retrying": 0, "dead": 1])

            let letters = try #require(try await api.admin(.get, "/admin/v1/dead-letters").json()["deadLetters"] as? [[String: Any]])
            #expect(letters.count == 1)
            // A second dead letter: pages of one, the first naming where the second starts.
            let other = try #require(
                try await api.services.redis.send("XADD", api.services.queue.keys.dead, "*", "job", "other-job", "reason", "internal", "detail", "", "at", "0").string
            )
            let page = try await api.admin(.get, "/admin/v1/dead-letters?limit=1").json()
            #expect((page["deadLetters"] as? [[String: Any]])?.map { $0["jobId"] as? String } == [first])
            let next = try #require(page["next"] as? String)
            let rest = try await api.admin(.get, "/admin/v1/dead-letters?limit=1&after=\(next)").json()
            #expect((rest["deadLetters"] as? [[String: Any]])?.map { $0["jobId"] as? String } == ["other-job"])
            #expect(rest["next"] == nil)
            try await api.services.redis.send("XDEL", api.services.queue.keys.dead, other)
            #expect(letters.first?["jobId"] as? String == first)
            #expect(letters.first?["reason"] as? String == "apple_unavailable")
            let failed = try await api.get(tenant, "/v1/receipts/\(first)").json()
            #expect(failed["status"] as? String == "failed")
            #expect(failed["reason"] as? String == "apple_unavailable")

            let requeued = try await api.admin(.post, "/admin/v1/dead-letters/\(first.uppercased())/requeue")
            #expect(requeued.status == .ok)
            #expect(try requeued.json()["jobId"] as? String == first)
            #expect(try requeued.json()["status"] as? String == "queued")
            #expect(try await Self.counts(api.admin(.get, "/admin/v1/queue")) == ["queued": 2, "processing": 0, "retrying": 0, "dead": 0])
            #expect((try await api.admin(.get, "/admin/v1/dead-letters").json()["deadLetters"] as? [Any])?.isEmpty == true)
            let back = try await api.get(tenant, "/v1/receipts/\(first)").json()
            #expect(back["status"] as? String == "queued")
            #expect(back["attempts"] as? Int == 0)
            #expect(back["reason"] == nil)

            // Requeuing again is harmless; an unknown job is 404.
            let again = try await api.admin(.post, "/admin/v1/dead-letters/\(first)/requeue")
            #expect(again.status == .ok)
            #expect(try again.json()["status"] as? String == "queued")
            #expect(try await api.streamLength() == 2)
            expectError(try await api.admin(.post, "/admin/v1/dead-letters/\(UUID().uuidString.lowercased())/requeue"), .notFound, code: "not_found")
        }
    }
}
