/// The `receipt` object of a verifyReceipt answer ("responseBody.Receipt").
public struct AppleReceipt: Sendable, Equatable, Decodable {
    /// `bundle_id`: the app the receipt belongs to.
    public var bundleId: String
    /// `in_app`: the in-app purchases in this receipt (not ordered).
    public var inApp: [AppleTransaction]

    enum CodingKeys: String, CodingKey {
        case bundleId = "bundle_id"
        case inApp = "in_app"
    }

    /// Creates a receipt.
    public init(bundleId: String, inApp: [AppleTransaction]) {
        self.bundleId = bundleId
        self.inApp = inApp
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.bundleId = try container.decode(String.self, forKey: .bundleId)
        self.inApp = try container.decodeIfPresent([AppleTransaction].self, forKey: .inApp) ?? []
    }
}
