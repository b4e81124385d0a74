import Foundation

/// Builds the emulator's scenario receipts (docs/emulator.md): base64 of a JSON object.
public enum ScenarioReceipt {
    /// One purchase in a scenario.
    public struct Purchase: Sendable {
        public var productId: String
        public var transactionId: String
        public var originalTransactionId: String?
        public var purchaseDateMs: Int64?
        public var expiresDateMs: Int64?
        public var cancellationDateMs: Int64?

        public init(
            productId: String, transactionId: String, originalTransactionId: String? = nil, purchaseDateMs: Int64? = nil,
            expiresDateMs: Int64? = nil, cancellationDateMs: Int64? = nil
        ) {
            self.productId = productId
            self.transactionId = transactionId
            self.originalTransactionId = originalTransactionId
            self.purchaseDateMs = purchaseDateMs
            self.expiresDateMs = expiresDateMs
            self.cancellationDateMs = cancellationDateMs
        }

        var json: [String: Any] {
            var object: [String: Any] = ["productId": self.productId, "transactionId": self.transactionId]
            if let originalTransactionId { object["originalTransactionId"] = originalTransactionId }
            if let purchaseDateMs { object["purchaseDateMs"] = String(purchaseDateMs) }
            if let expiresDateMs { object["expiresDateMs"] = String(expiresDateMs) }
            if let cancellationDateMs { object["cancellationDateMs"] = String(cancellationDateMs) }
            return object
        }
    }

    /// The base64 receipt for a scenario; `extra` adds any other scenario field (`status`, `fail`, …).
    public static func make(
        bundleId: String, purchases: [Purchase], environment: String = "Production", extra: [String: Any] = [:]
    ) -> String {
        var object: [String: Any] = ["bundleId": bundleId, "environment": environment, "inApp": purchases.map(\.json)]
        for (key, value) in extra { object[key] = value }
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        return data.base64EncodedString()
    }

    /// A random App Store-like transaction id (16 digits).
    public static func transactionId() -> String {
        String(UInt64.random(in: 1_000_000_000_000_000...9_999_999_999_999_999))
    }
}
