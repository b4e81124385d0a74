import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Shared
import Synchronization
import Testing
import TestSupport

@testable import API

/// `GET /admin/v1/publishers`, `PATCH /admin/v1/publishers/{id}` and `POST /admin/v1/publishers/{id}/credentials`:
/// changes that apply at once in the process that made them and within seconds in every other API process.
@Suite("Publisher administration")
struct PublisherAdminTests {
    static let wallet = "/v1/customers/viewer%40example.com/wallet"

    /// Runs `body` with a second API process on the same database (its own caches, its own Redis prefix).
    static func withSecondAPI(_ first: APIClient, _ body: @Sendable (APIClient) async throws -> Void) async throws {
        var options = APIHarness.Options()
        options.databaseURL = first.services.configuration.databaseURL
        try await APIHarness.withAPI(options, body)
    }

    /// Polls until `tenant`'s credentials answer `status` on `api`; the auth cache lives 5 s, and 30 s
    /// leaves room for a loaded machine.
    static func expectEventually(_ api: APIClient, _ tenant: Tenant, _ status: HTTPResponse.Status, _ what: String) async throws {
        _ = try await Poll.until(timeout: .seconds(30), what) {
            try await api.get(tenant, Self.wallet).status == status ? true : nil
        }
    }

    @Test("the list shows every publisher with its state and no secret")
    func list() async throws {
        try await APIHarness.withAPI { api in
            let a = try await api.provisionTenant(name: "Alpha")
            let b = try await api.provisionTenant(name: "Beta")
            let response = try await api.admin(.get, "/admin/v1/publishers")
            #expect(response.status == .ok)
            let list = try #require(try response.json()["publishers"] as? [[String: Any]])
            #expect(list.compactMap { $0["id"] as? String } == [a.publisherId, b.publisherId])
            #expect(list.compactMap { $0["name"] as? String } == ["Alpha", "Beta"])
            #expect(list.allSatisfy { Set($0.keys) == ["id", "name", "enabled"] && $0["enabled"] as? Bool == true })
            #expect(!response.text.contains(a.publisherToken) && !response.text.contains(a.password))
        }
    }

    @Test("disabling a publisher refuses its credentials at once here and within seconds in another API process; enabling restores them")
    func disable() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            let other = try await api.provisionTenant()
            try await Self.withSecondAPI(api) { second in
                // Both processes have the publisher cached.
                #expect(try await api.get(tenant, Self.wallet).status == .ok)
                #expect(try await second.get(tenant, Self.wallet).status == .ok)

                let disabled = try await api.admin(.patch, "/admin/v1/publishers/\(tenant.publisherId)", json: ["enabled": false])
                #expect(disabled.status == .ok)
                #expect(try disabled.json()["enabled"] as? Bool == false)
                expectError(try await api.get(tenant, Self.wallet), .unauthorized, code: "unauthorized")
                let before = try await api.streamLength()
                expectError(try await api.pay(tenant, Payment.body()), .unauthorized, code: "unauthorized")
                #expect(try await api.streamLength() == before)
                try await Self.expectEventually(second, tenant, .unauthorized, "the second process refuses a disabled publisher")
                // Another publisher is untouched.
                #expect(try await second.get(other, Self.wallet).status == .ok)

                #expect(try await api.admin(.patch, "/admin/v1/publishers/\(tenant.publisherId)", json: ["enabled": true]).status == .ok)
                #expect(try await api.get(tenant, Self.wallet).status == .ok)
                try await Self.expectEventually(second, tenant, .ok, "the second process accepts the publisher again")
            }
        }
    }

    @Test("rotating credentials shows new ones once; the old ones stop working here at once and within seconds elsewhere")
    func rotate() async throws {
        try await APIHarness.withAPI { api in
            let old = try await api.provisionTenant()
            try await Self.withSecondAPI(api) { second in
                #expect(try await second.get(old, Self.wallet).status == .ok)
                let response = try await api.admin(.post, "/admin/v1/publishers/\(old.publisherId)/credentials")
                #expect(response.status == .created)
                let json = try response.json()
                #expect(json["id"] as? String == old.publisherId)
                let basic = try #require(json["basicAuth"] as? [String: Any])
                let new = Tenant(
                    publisherId: old.publisherId, name: old.name, publisherToken: try #require(json["publisherToken"] as? String),
                    username: try #require(basic["username"] as? String), password: try #require(basic["password"] as? String),
                    bundleId: old.bundleId, productIds: old.productIds
                )
                #expect(new.publisherToken != old.publisherToken && new.password != old.password)
                expectError(try await api.get(old, Self.wallet), .unauthorized, code: "unauthorized")
                #expect(try await api.get(new, Self.wallet).status == .ok)
                #expect(try await second.get(new, Self.wallet).status == .ok)
                try await Self.expectEventually(second, old, .unauthorized, "the second process refuses the old credentials")
                // The new credentials reach the same tenant: its products are still there.
                _ = try await api.submit(new, Payment.body())
            }
        }
    }

    @Test("disabling a publisher and rotating its credentials are announced on the access channel, for the other API processes; enabling is not")
    func revocationsAnnounced() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            let publisherId = try #require(UUID(uuidString: tenant.publisherId))
            let keys = api.services.queue.keys
            let heard = Mutex<[String]>([])
            let subscriber = RedisSubscriber(configuration: try RedisConfiguration(url: TestEnvironment.redisURL()), channel: keys.accessChannel) { event in
                if case .message(let message) = event { heard.withLock { $0.append(message) } }
                if case .subscribed = event { heard.withLock { $0.append("(subscribed)") } }
            }
            subscriber.start()
            _ = try await Poll.until(timeout: .seconds(30), "subscribed") { heard.withLock { $0.contains("(subscribed)") } ? true : nil }
            let revocation = keys.revocation(of: publisherId)
            #expect(keys.revokedPublisher(revocation) == publisherId)
            #expect(keys.revokedPublisher(keys.pending(publisherId: publisherId, customerEmail: "v@example.com", offerId: "o")) == nil)
            #expect(try await api.admin(.patch, "/admin/v1/publishers/\(tenant.publisherId)", json: ["enabled": false]).status == .ok)
            #expect(try await api.admin(.patch, "/admin/v1/publishers/\(tenant.publisherId)", json: ["enabled": true]).status == .ok)
            #expect(try await api.admin(.post, "/admin/v1/publishers/\(tenant.publisherId)/credentials").status == .created)
            // A marker published last: once it is heard, everything published before it has been.
            try await api.services.redis.send("PUBLISH", keys.accessChannel, "(end)")
            let messages = try await Poll.until(timeout: .seconds(30), "the marker heard") {
                let all = heard.withLock { $0 }
                return all.contains("(end)") ? all : nil
            }
            #expect(messages.filter { $0 == revocation }.count == 2, "\(messages)")
            await subscriber.shutdown()
        }
    }

    @Test("unknown publishers answer 404; a bad body names its field")
    func refusals() async throws {
        try await APIHarness.withAPI { api in
            let tenant = try await api.provisionTenant()
            expectError(try await api.admin(.patch, "/admin/v1/publishers/\(UUID())", json: ["enabled": false]), .notFound, code: "not_found")
            expectError(try await api.admin(.patch, "/admin/v1/publishers/not-a-uuid", json: ["enabled": false]), .notFound, code: "not_found")
            expectError(try await api.admin(.post, "/admin/v1/publishers/\(UUID())/credentials"), .notFound, code: "not_found")
            expectError(try await api.admin(.patch, "/admin/v1/publishers/\(tenant.publisherId)", json: [String: Any]()), .badRequest, code: "missing_field", field: "enabled")
            expectError(try await api.admin(.patch, "/admin/v1/publishers/\(tenant.publisherId)", json: ["enabled": "no"]), .badRequest, code: "invalid_type", field: "enabled")
            // A misspelt field is refused, not ignored, with what it sent besides.
            expectError(
                try await api.admin(.patch, "/admin/v1/publishers/\(tenant.publisherId)", json: ["enabled": false, "name": "Renamed"]),
                .badRequest, code: "unknown_field", field: "name"
            )
            // Nothing changed.
            #expect(try await api.get(tenant, Self.wallet).status == .ok)
        }
    }
}
