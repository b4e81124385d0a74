import Foundation
import Hummingbird

/// The JSON body a client posts to verifyReceipt, with Apple's literal field names.
struct VerifyReceiptRequest: Decodable, Sendable {
    /// The base64 receipt; for the emulator, a base64 scenario.
    var receiptData: String
    /// The app's shared secret, required by Apple for auto-renewable subscriptions.
    var password: String?
    /// Asks for only the newest renewal of each subscription in `latest_receipt_info`.
    var excludeOldTransactions: Bool?

    private enum CodingKeys: String, CodingKey {
        case receiptData = "receipt-data"
        case password
        case excludeOldTransactions = "exclude-old-transactions"
    }

    /// Reads a request body, or `nil` when it is not a JSON object with a string `receipt-data` (the
    /// caller answers 21000, as Apple does).
    static func decode(from body: ByteBuffer) -> VerifyReceiptRequest? {
        guard body.readableBytes > 0 else { return nil }
        return body.withUnsafeReadableBytes { bytes in
            try? JSONDecoder().decode(VerifyReceiptRequest.self, from: Data(bytes))
        }
    }
}
