import Foundation
import Logging
import Shared
import Testing
import TestSupport

@testable import API

@Suite("Offer look-ups")
struct OfferLookupTests {
    @Test("made-up offer ids answer 422 from the publisher's offer ids in memory, not one PostgreSQL query each")
    func madeUpOffers() async throws {
        try await Self.withKnownOffer(offerIdsLifetime: 3600) { database, _, publisher, services in
            #expect(try await services.offerProducts(publisherId: publisher.id, offerId: "KNOWN").map(\.productId) == ["known"])
            try await Self.expectUnknown(services, publisher.id, "made-up-0")

            // From here on, any query of the products table fails: a made-up offer must not need one.
            _ = try await database.query("ALTER TABLE products RENAME TO products_elsewhere")
            for index in 1...20 {
                try await Self.expectUnknown(services, publisher.id, "made-up-\(index)")
            }
            #expect(try await services.offerProducts(publisherId: publisher.id, offerId: "KNOWN").map(\.productId) == ["known"], "cached")
        }
    }

    @Test("while PostgreSQL is away, an offer missing from offer ids read before is 503, not 422: it may have been created since")
    func offerCreatedBeforeAnOutage() async throws {
        // Offer ids that are past their lifetime at once: every look-up after the first asks PostgreSQL again.
        try await Self.withKnownOffer(offerIdsLifetime: 0) { database, catalog, publisher, services in
            try await Self.expectUnknown(services, publisher.id, "NEW")
            // Created through another API process (this one's caches are not told), just before PostgreSQL goes away.
            _ = try await catalog.createProduct(Self.product("NEW", of: publisher.id))
            _ = try await database.query("ALTER TABLE products RENAME TO products_elsewhere")
            do {
                _ = try await services.offerProducts(publisherId: publisher.id, offerId: "NEW")
                Issue.record("NEW: found")
            } catch let error as APIError {
                #expect(error.status == .serviceUnavailable && error.code == "dependency_unavailable", "\(error)")
            }
            _ = try await database.query("ALTER TABLE products_elsewhere RENAME TO products")
            // Back: within the second a failed refresh waits before asking again.
            let found = try await Poll.until(timeout: .seconds(10), "NEW found once PostgreSQL is back") {
                try? await services.offerProducts(publisherId: publisher.id, offerId: "NEW").map(\.productId)
            }
            #expect(found == ["new"])
        }
    }

    /// A non-consumable sold under `offerId` by the publisher's app.
    static func product(_ offerId: String, of publisherId: UUID) -> ProductDraft {
        ProductDraft(
            publisherId: publisherId, bundleId: "com.example.offers", productId: offerId.lowercased(), offerId: offerId, kind: .nonConsumable,
            title: offerId, description: nil, coins: nil, durationDays: nil, enabled: true
        )
    }

    /// A publisher with an app selling offer `KNOWN` (product `known`), and the API's services over it.
    static func withKnownOffer(
        offerIdsLifetime: Double, _ body: (PostgresClient, CatalogStore, Publisher, APIServices) async throws -> Void
    ) async throws {
        let database = PostgresClient(url: try await TestEnvironment.freshDatabase(), connections: 2)
        let redis = try TestEnvironment.redis()
        try await TestEnvironment.using(database, redis) {
            let catalog = CatalogStore(database: database)
            let publisher = try await catalog.createPublisher(name: "Offer look-ups").0
            _ = try await catalog.createApp(publisherId: publisher.id, bundleId: "com.example.offers", sharedSecret: nil, allowSandbox: true)
            _ = try await catalog.createProduct(Self.product("KNOWN", of: publisher.id))
            let services = await APIServices(
                configuration: try Configuration(environment: [:]), redis: redis, database: database, logger: Logger(label: "test.api"),
                offerIdsLifetime: offerIdsLifetime
            )
            try await body(database, catalog, publisher, services)
        }
    }

    static func expectUnknown(_ services: APIServices, _ publisherId: UUID, _ offerId: String) async throws {
        do {
            _ = try await services.offerProducts(publisherId: publisherId, offerId: offerId)
            Issue.record("\(offerId): found")
        } catch let error as APIError {
            #expect(error.code == "unknown_offer", "\(offerId): \(error)")
        }
    }
}
