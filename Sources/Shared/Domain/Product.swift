import Foundation

/// A product sold in one app, and the offer it unlocks.
public struct Product: Sendable, Equatable {
    /// Its id.
    public var id: UUID
    /// The publisher that owns it.
    public var publisherId: UUID
    /// The app it is sold in.
    public var appId: UUID
    /// The app's bundle id.
    public var bundleId: String
    /// Apple's product identifier.
    public var productId: String
    /// The publisher's offer identifier (defaults to the product id).
    public var offerId: String
    /// What buying it grants.
    public var kind: ProductKind
    /// Title for people.
    public var title: String
    /// Optional description.
    public var description: String?
    /// Coins credited per purchase (consumables).
    public var coins: Int?
    /// Days of access per purchase (non-renewing subscriptions).
    public var durationDays: Int?
    /// Whether new submissions for it are accepted.
    public var enabled: Bool
    /// When it was last disabled, while it is: jobs accepted before then are still granted. `nil` for one
    /// disabled by a binary from before migration 9.
    public var disabledAt: Date?
    /// When it was created.
    public var createdAt: Date
    /// When it last changed.
    public var updatedAt: Date

    /// Creates a product.
    public init(
        id: UUID, publisherId: UUID, appId: UUID, bundleId: String, productId: String, offerId: String, kind: ProductKind,
        title: String, description: String?, coins: Int?, durationDays: Int?, enabled: Bool, disabledAt: Date? = nil, createdAt: Date,
        updatedAt: Date
    ) {
        self.id = id
        self.publisherId = publisherId
        self.appId = appId
        self.bundleId = bundleId
        self.productId = productId
        self.offerId = offerId
        self.kind = kind
        self.title = title
        self.description = description
        self.coins = coins
        self.durationDays = durationDays
        self.enabled = enabled
        self.disabledAt = disabledAt
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}
