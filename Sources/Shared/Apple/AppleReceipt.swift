/// The `receipt` object of a verifyReceipt answer ("responseBody.Receipt").
public struct AppleReceipt: Sendable, Equatable {
    /// `bundle_id`: the app the receipt belongs to.
    public var bundleId: String
    /// `in_app`: the in-app purchases in this receipt (not ordered).
    public var inApp: [AppleTransaction]

    /// Creates a receipt.
    public init(bundleId: String, inApp: [AppleTransaction]) {
        self.bundleId = bundleId
        self.inApp = inApp
    }

    /// Reads a `receipt` object: a string `bundle_id` and, when present, well-formed `in_app` transactions.
    init(json value: JSONValue) throws(Lenient.Malformed) {
        let object = try Lenient.object(value)
        guard case .string(let bundleId)? = object["bundle_id"] else { throw Lenient.Malformed() }
        self.init(bundleId: bundleId, inApp: try Lenient.array(object, "in_app", AppleTransaction.init(json:)))
    }
}
