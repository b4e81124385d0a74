/// Fields of a product to change; `nil` leaves a field as it is.
public struct ProductPatch: Sendable, Equatable {
    public var enabled: Bool?
    public var title: String?
    /// A new description; an empty one clears it.
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

    /// The fields the patch sets, as the admin API names them.
    public var fieldNames: [String] {
        [("enabled", self.enabled != nil), ("title", self.title != nil), ("description", self.description != nil),
         ("coins", self.coins != nil), ("durationDays", self.durationDays != nil)].filter(\.1).map(\.0)
    }
}
