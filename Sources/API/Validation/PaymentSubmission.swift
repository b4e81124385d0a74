import NIOCore
import Shared

/// A validated `POST /apple/payment` body (CONTRACT.md).
struct PaymentSubmission: Equatable {
    var customerEmail: String
    var offerId: String
    var transactionId: String?
    var receiptData: String
    var appType: AppType
    var ipAddress: String?

    /// Parses and checks every field: 400 for malformed JSON or a missing/ill-typed field, 422 for a
    /// well-formed value that cannot be used.
    init(body: ByteBuffer) throws {
        try self.init(json: JSONObject(body: body))
    }

    /// Checks the fields of a parsed body.
    init(json: JSONObject) throws {
        let email = try json.requiredString("customerEmail")
        let offer = try json.requiredString("offerId")
        guard let receipt = try json.object("receipt") else { throw APIError.missingField("receipt") }
        let receiptData = try receipt.requiredString("receiptData")
        let transactionId = try receipt.string("transactionId")
        let appType = try json.string("appType")
        let ipAddress = try json.string("ipAddress")

        self.customerEmail = try FieldRules.email(email)
        self.offerId = try FieldRules.offerId(offer)
        self.receiptData = try FieldRules.base64(receiptData, field: "receipt.receiptData")
        self.transactionId = try transactionId.flatMap { $0.isEmpty ? nil : try FieldRules.transactionId($0) }
        if let appType {
            guard let parsed = AppType(rawValue: appType) else {
                throw APIError.invalid("appType", code: "invalid_app_type", "appType must be ios or tvos")
            }
            self.appType = parsed
        } else {
            self.appType = .ios
        }
        self.ipAddress = ipAddress.flatMap(FieldRules.clientAddress)
    }
}
