/// Fields of a product to change; `nil` leaves a field as it is.
public struct ProductPatch: Sendable, Equatable {
    public var enabled: Bool?
    public var title: String?
    public var description: String?
    public var coins: Int?
    public var durationDays: Int?

    /// Creates a patch.
    public init(enabled: Bool? = nil, title: String? = nil, description: String? = nil, coins: Int? = nil, durationDays: Int? = nil) {
        self.enabled = enabled
        self.title = title
        self.description = description
        self.coins = coins
        self.durationDays = durationDays
    }
}
