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
        let database = PostgresClient(url: try await TestEnvironment.freshDatabase(), connections: 2)
        let redis = try TestEnvironment.redis()
        try await TestEnvironment.using(database, redis) {
            let catalog = CatalogStore(database: database)
            let publisher = try await catalog.createPublisher(name: "Offer look-ups").0
            _ = try await catalog.createApp(publisherId: publisher.id, bundleId: "com.example.offers", sharedSecret: nil, allowSandbox: true)
            _ = try await catalog.createProduct(ProductDraft(
                publisherId: publisher.id, bundleId: "com.example.offers", productId: "known", offerId: "KNOWN", kind: .nonConsumable,
                title: "Known", description: nil, coins: nil, durationDays: nil, enabled: true
            ))
            let services = await APIServices(
                configuration: try Configuration(environment: [:]), redis: redis, database: database, logger: Logger(label: "test.api"),
                offerIdsLifetime: 3600
            )
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

    static func expectUnknown(_ services: APIServices, _ publisherId: UUID, _ offerId: String) async throws {
        do {
            _ = try await services.offerProducts(publisherId: publisherId, offerId: offerId)
            Issue.record("\(offerId): found")
        } catch let error as APIError {
            #expect(error.code == "unknown_offer", "\(offerId): \(error)")
        }
    }
}
