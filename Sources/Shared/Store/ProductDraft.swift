import Foundation

/// A product to create, validated by the caller.
public struct ProductDraft: Sendable, Equatable {
    public var publisherId: UUID
    public var bundleId: String
    public var productId: String
    public var offerId: String
    public var kind: ProductKind
    public var title: String
    public var description: String?
    public var coins: Int?
    public var durationDays: Int?
    public var enabled: Bool

    /// Creates a draft; `offerId` defaults to `productId` (Apple's convention).
    public init(
        publisherId: UUID, bundleId: String, productId: String, offerId: String?, kind: ProductKind, title: String,
        description: String?, coins: Int?, durationDays: Int?, enabled: Bool
    ) {
        self.publisherId = publisherId
        self.bundleId = bundleId
        self.productId = productId
        self.offerId = offerId ?? productId
        self.kind = kind
        self.title = title
        self.description = description
        self.coins = coins
        self.durationDays = durationDays
        self.enabled = enabled
    }
}
