/// Apple's two verifyReceipt environments, spelled as Apple writes them in the `environment` field.
enum AppleEnvironment: String, Codable, Sendable {
    case production = "Production"
    case sandbox = "Sandbox"

    /// The emulator's verifyReceipt route for this environment.
    var path: String {
        switch self {
        case .production: "/verifyReceipt"
        case .sandbox: "/sandbox/verifyReceipt"
        }
    }

    /// The value of the receipt's `receipt_type` field in this environment.
    var receiptType: String {
        switch self {
        case .production: "Production"
        case .sandbox: "ProductionSandbox"
        }
    }

    /// The status Apple answers when a receipt of this environment reaches the other environment's
    /// endpoint: 21007 for a sandbox receipt sent to production, 21008 for the reverse.
    var wrongEndpointStatus: Int {
        switch self {
        case .production: 21008
        case .sandbox: 21007
        }
    }
}
