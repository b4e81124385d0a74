import Foundation
import Hummingbird
import HummingbirdTesting
@testable import AppStoreEmulator

/// Builders and readers shared by the emulator's tests.
enum Fixtures {
    /// A scenario as it travels: standard base64 of its JSON text.
    static func receiptData(_ scenarioJSON: String) -> String {
        Data(scenarioJSON.utf8).base64EncodedString()
    }

    /// Apple's request body for `receiptData`.
    static func requestBody(receiptData: String, password: String? = nil, excludeOldTransactions: Bool? = nil) throws -> ByteBuffer {
        var object: [String: Any] = ["receipt-data": receiptData]
        object["password"] = password
        object["exclude-old-transactions"] = excludeOldTransactions
        return ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: object))
    }

    /// A JSON object answer.
    static func object(_ body: ByteBuffer) throws -> [String: Any] {
        let value = try JSONSerialization.jsonObject(with: Data(body.readableBytesView))
        guard let object = value as? [String: Any] else {
            throw FixtureError(description: "not a JSON object: \(String(buffer: body))")
        }
        return object
    }

    /// An array of objects under `key`, or an empty array.
    static func objects(_ object: [String: Any], _ key: String) -> [[String: Any]] {
        object[key] as? [[String: Any]] ?? []
    }

    /// The emulator as the process builds it, with the given starting faults.
    static func makeApplication(faults: FaultSettings = .defaults) -> some ApplicationProtocol {
        buildApplication(EmulatorConfiguration(faults: faults))
    }

    /// A one-product scenario of `environment`.
    static func simpleScenario(environment: String = "Production", extra: String = "") -> String {
        #"{"bundleId":"com.example.app","environment":"\#(environment)","inApp":[{"productId":"coins.100","transactionId":"1000000000000001","purchaseDateMs":1700000000000}]\#(extra)}"#
    }
}
