import Foundation
import Logging
import Shared

/// A publisher's offer, as the offer cache's key.
struct OfferKey: Hashable, Sendable {
    let publisherId: UUID
    let offerId: String
}

/// What the routes need, built once at start.
struct APIServices: Sendable {
    let configuration: Configuration
    let redis: RedisClient
    let database: PostgresClient
    let queue: ReceiptQueue
    let catalog: CatalogStore
    let access: AccessStore
    let authenticator: PublisherAuthenticator
    let rateLimiter: RateLimiter
    /// Recent access-status answers, kept exact through the queue's access channel.
    let accessCache: AccessCache
    /// Offer look-ups, cached briefly: a disabled product stops accepting within seconds. While PostgreSQL
    /// is away, offers looked up in the last ten minutes still answer (see ``PublisherDirectory``).
    let offers = ExpiringCache<OfferKey, [Product]>(lifetime: 5, staleFor: PublisherDirectory.staleLifetime)
    /// Each publisher's offer ids, asked for when an offer is not in ``offers``: an offer id that is none of
    /// them answers 422 from memory (503 while they are served stale: PostgreSQL away). App clients (a customer token, which any device holds) can name any
    /// offer, unlimited; made-up ones then cost PostgreSQL one query per publisher and lifetime, not one each.
    let offerIds: ExpiringCache<UUID, Set<String>>

    init(configuration: Configuration, redis: RedisClient, database: PostgresClient, logger: Logger, offerIdsLifetime: Double = 1) async {
        self.offerIds = ExpiringCache(lifetime: offerIdsLifetime, staleFor: PublisherDirectory.staleLifetime)
        self.configuration = configuration
        self.redis = redis
        self.database = database
        self.queue = ReceiptQueue(redis: redis, prefix: configuration.queuePrefix)
        self.catalog = CatalogStore(database: database)
        self.access = AccessStore(database: database)
        self.accessCache = AccessCache(lifetimeSeconds: configuration.accessCacheLifetimeSeconds)
        var customerTokens: CustomerTokens?
        if let secret = configuration.tokenSecret {
            customerTokens = await CustomerTokens(secret: secret, lifetimeSeconds: configuration.customerTokenLifetimeSeconds)
        }
        self.authenticator = PublisherAuthenticator(
            directory: PublisherDirectory(catalog: self.catalog, logger: logger), customerTokens: customerTokens
        )
        self.rateLimiter = RateLimiter(
            redis: redis, prefix: configuration.queuePrefix, perSecond: configuration.rateLimitPerSecond, burst: configuration.rateLimitBurst
        )
    }

    /// The products behind a publisher's offer, from ``offers``; 422 `unknown_offer` when it has none.
    func offerProducts(publisherId: UUID, offerId: String, field: String = "offerId") async throws -> [Product] {
        let products = try await self.offers.value(for: OfferKey(publisherId: publisherId, offerId: offerId)) {
            let known = try await self.offerIds.lookup(for: publisherId) { try await self.catalog.offerIds(publisherId: publisherId) }
            guard known.value?.contains(offerId) == true else {
                // Offer ids served stale (PostgreSQL away) may miss an offer created since they were read: only
                // current ones may refuse an offer for good (422). Offers looked up lately still answer from memory.
                if known.stale { throw APIError.unavailable("the database") }
                return nil
            }
            let found = try await self.catalog.products(publisherId: publisherId, offerId: offerId)
            return found.isEmpty ? nil : found
        } ?? []
        guard !products.isEmpty else {
            throw APIError.invalid(field, code: "unknown_offer", "\(field) is not an offer of this publisher")
        }
        return products
    }

    /// How long dedup and claim keys live: a job may retry for the maximum age, then its status is retained.
    var keyTTLSeconds: Int { self.configuration.retry.maxAgeSeconds + self.configuration.jobRetentionSeconds }
}
