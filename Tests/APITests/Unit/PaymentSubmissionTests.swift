import Foundation
import Hummingbird
import Shared
import Testing

@testable import API

/// `PaymentSubmission(body:)`: 400 for malformed JSON or a missing/ill-typed field, 422 for a value that
/// is well-formed but unusable, each naming the field at fault.
@Suite("PaymentSubmission")
struct PaymentSubmissionTests {
    static let receiptData = Data(#"{"bundleId":"com.example.tollgate"}"#.utf8).base64EncodedString()

    static func parse(_ text: String) throws -> PaymentSubmission {
        try PaymentSubmission(body: ByteBuffer(string: text))
    }

    /// One body that must be refused.
    struct Refusal: Sendable, CustomTestStringConvertible {
        let name: String
        let body: String
        let status: HTTPResponse.Status
        let code: String
        let field: String?

        var testDescription: String { self.name }

        init(_ name: String, _ body: String, _ status: HTTPResponse.Status, _ code: String, _ field: String?) {
            self.name = name
            self.body = body
            self.status = status
            self.code = code
            self.field = field
        }
    }

    static let rd = PaymentSubmissionTests.receiptData

    /// A valid submission with an unknown member `pad` holding `count` zeros.
    static func padded(_ count: Int) -> String {
        #"{"customerEmail":"v@example.com","offerId":"o","receipt":{"receiptData":"\#(rd)"},"pad":["#
            + Array(repeating: "0", count: count).joined(separator: ",") + "]}"
    }

    @Test("a body of exactly 10,000 JSON values is read; one more is refused, before any field is looked at")
    func valueLimit() throws {
        #expect(try Self.parse(Self.padded(9_994)).offerId == "o")
        #expect(throws: APIError.self) { try Self.parse(Self.padded(9_995)) }
    }

    static let refusals: [Refusal] = [
        // 400: not a JSON object.
        Refusal("empty body", "", .badRequest, "malformed_json", nil),
        Refusal("truncated JSON", #"{"customerEmail": "viewer@example.com""#, .badRequest, "malformed_json", nil),
        Refusal("not JSON", "customerEmail=viewer@example.com", .badRequest, "malformed_json", nil),
        Refusal("a JSON array", #"[{"customerEmail":"viewer@example.com"}]"#, .badRequest, "malformed_json", nil),
        Refusal("a JSON string", #""hello""#, .badRequest, "malformed_json", nil),
        Refusal("JSON null", "null", .badRequest, "malformed_json", nil),
        Refusal("offerId twice", #"{"customerEmail":"v@example.com","offerId":"o","receipt":{"receiptData":"\#(rd)"},"offerId":"p"}"#, .badRequest, "duplicate_key", nil),
        // Six values of the submission's own, and an unknown member's array: 10,001 in all.
        Refusal("10,001 JSON values", Self.padded(9_995), .badRequest, "too_many_values", nil),
        Refusal("transactionId twice", #"{"customerEmail":"v@example.com","offerId":"o","receipt":{"receiptData":"\#(rd)","transactionId":"1","transactionId":"2"}}"#, .badRequest, "duplicate_key", nil),
        // 400: missing fields.
        Refusal("missing customerEmail", #"{"offerId":"o","receipt":{"receiptData":"\#(rd)"}}"#, .badRequest, "missing_field", "customerEmail"),
        Refusal("empty customerEmail", #"{"customerEmail":"","offerId":"o","receipt":{"receiptData":"\#(rd)"}}"#, .badRequest, "missing_field", "customerEmail"),
        Refusal("null customerEmail", #"{"customerEmail":null,"offerId":"o","receipt":{"receiptData":"\#(rd)"}}"#, .badRequest, "missing_field", "customerEmail"),
        Refusal("missing offerId", #"{"customerEmail":"v@example.com","receipt":{"receiptData":"\#(rd)"}}"#, .badRequest, "missing_field", "offerId"),
        Refusal("missing receipt", #"{"customerEmail":"v@example.com","offerId":"o"}"#, .badRequest, "missing_field", "receipt"),
        Refusal("null receipt", #"{"customerEmail":"v@example.com","offerId":"o","receipt":null}"#, .badRequest, "missing_field", "receipt"),
        Refusal("missing receiptData", #"{"customerEmail":"v@example.com","offerId":"o","receipt":{"transactionId":"1"}}"#, .badRequest, "missing_field", "receipt.receiptData"),
        Refusal("empty receiptData", #"{"customerEmail":"v@example.com","offerId":"o","receipt":{"receiptData":""}}"#, .badRequest, "missing_field", "receipt.receiptData"),
        // 400: ill-typed fields.
        Refusal("numeric customerEmail", #"{"customerEmail":42,"offerId":"o","receipt":{"receiptData":"\#(rd)"}}"#, .badRequest, "invalid_type", "customerEmail"),
        Refusal("array offerId", #"{"customerEmail":"v@example.com","offerId":["o"],"receipt":{"receiptData":"\#(rd)"}}"#, .badRequest, "invalid_type", "offerId"),
        Refusal("boolean offerId", #"{"customerEmail":"v@example.com","offerId":true,"receipt":{"receiptData":"\#(rd)"}}"#, .badRequest, "invalid_type", "offerId"),
        Refusal("string receipt", #"{"customerEmail":"v@example.com","offerId":"o","receipt":"\#(rd)"}"#, .badRequest, "invalid_type", "receipt"),
        Refusal("numeric receiptData", #"{"customerEmail":"v@example.com","offerId":"o","receipt":{"receiptData":12345}}"#, .badRequest, "invalid_type", "receipt.receiptData"),
        Refusal("numeric transactionId", #"{"customerEmail":"v@example.com","offerId":"o","receipt":{"receiptData":"\#(rd)","transactionId":1000000241260292}}"#, .badRequest, "invalid_type", "receipt.transactionId"),
        Refusal("numeric appType", #"{"customerEmail":"v@example.com","offerId":"o","receipt":{"receiptData":"\#(rd)"},"appType":1}"#, .badRequest, "invalid_type", "appType"),
        Refusal("object ipAddress", #"{"customerEmail":"v@example.com","offerId":"o","receipt":{"receiptData":"\#(rd)"},"ipAddress":{}}"#, .badRequest, "invalid_type", "ipAddress"),
        // 400 wins over 422: a type error is reported even when another field is also unusable.
        Refusal("bad email and ill-typed appType", #"{"customerEmail":"nope","offerId":"o","receipt":{"receiptData":"\#(rd)"},"appType":false}"#, .badRequest, "invalid_type", "appType"),
        // 422: well-formed but unusable.
        Refusal("bad email", #"{"customerEmail":"not-an-email","offerId":"o","receipt":{"receiptData":"\#(rd)"}}"#, .unprocessableContent, "invalid_email", "customerEmail"),
        Refusal("offerId with a space", #"{"customerEmail":"v@example.com","offerId":"o o","receipt":{"receiptData":"\#(rd)"}}"#, .unprocessableContent, "invalid_offer_id", "offerId"),
        Refusal("receiptData not base64", #"{"customerEmail":"v@example.com","offerId":"o","receipt":{"receiptData":"not base64!"}}"#, .unprocessableContent, "invalid_receipt_data", "receipt.receiptData"),
        Refusal("receiptData without padding", #"{"customerEmail":"v@example.com","offerId":"o","receipt":{"receiptData":"QUI"}}"#, .unprocessableContent, "invalid_receipt_data", "receipt.receiptData"),
        Refusal("transactionId with a space", #"{"customerEmail":"v@example.com","offerId":"o","receipt":{"receiptData":"\#(rd)","transactionId":"a b"}}"#, .unprocessableContent, "invalid_transaction_id", "receipt.transactionId"),
        Refusal("appType android", #"{"customerEmail":"v@example.com","offerId":"o","receipt":{"receiptData":"\#(rd)"},"appType":"android"}"#, .unprocessableContent, "invalid_app_type", "appType"),
        Refusal("appType empty", #"{"customerEmail":"v@example.com","offerId":"o","receipt":{"receiptData":"\#(rd)"},"appType":""}"#, .unprocessableContent, "invalid_app_type", "appType"),
    ]

    @Test("each malformed body gives its status, code and field", arguments: PaymentSubmissionTests.refusals)
    func refusal(_ refusal: Refusal) {
        let error = #expect(throws: APIError.self) { try Self.parse(refusal.body) }
        #expect(error?.status == refusal.status)
        #expect(error?.code == refusal.code)
        #expect(error?.field == refusal.field)
    }

    @Test("a complete body parses, folding the email and keeping every field")
    func complete() throws {
        let submission = try Self.parse(#"""
            {"customerEmail":"Viewer@Example.com","offerId":"S598742062_US",
             "receipt":{"transactionId":"1000000241260292","receiptData":"\#(Self.rd)"},
             "appType":"tvos","ipAddress":"2001:db8::1","extra":"ignored"}
            """#)
        #expect(submission.customerEmail == "viewer@example.com")
        #expect(submission.offerId == "S598742062_US")
        #expect(submission.transactionId == "1000000241260292")
        #expect(submission.receiptData == Self.rd)
        #expect(submission.appType == .tvos)
        #expect(submission.ipAddress == "2001:db8::1")
    }

    @Test("an ipAddress that is not an address is not kept, and the receipt is accepted; an X-Forwarded-For list keeps its first", arguments: [
        ("999.1.1.1", nil), ("unknown", nil), ("1.2.3.4:5678", nil), ("", nil),
        ("203.0.113.7, 10.0.0.1", "203.0.113.7"), (" 2001:db8::1 ", "2001:db8::1"),
    ] as [(String, String?)])
    func ipAddressKeptOrNot(_ input: String, _ kept: String?) throws {
        let submission = try Self.parse(#"{"customerEmail":"v@example.com","offerId":"o","receipt":{"receiptData":"\#(Self.rd)"},"ipAddress":"\#(input)"}"#)
        #expect(submission.ipAddress == kept)
    }

    @Test("appType defaults to ios; transactionId and ipAddress are optional")
    func defaults() throws {
        let minimal = try Self.parse(#"{"customerEmail":"v@example.com","offerId":"o","receipt":{"receiptData":"\#(Self.rd)"}}"#)
        #expect(minimal.appType == .ios)
        #expect(minimal.transactionId == nil)
        #expect(minimal.ipAddress == nil)
        let nulls = try Self.parse(#"{"customerEmail":"v@example.com","offerId":"o","receipt":{"receiptData":"\#(Self.rd)","transactionId":null},"appType":null,"ipAddress":null}"#)
        #expect(nulls.appType == .ios)
        #expect(nulls.transactionId == nil)
        #expect(nulls.ipAddress == nil)
        let empties = try Self.parse(#"{"customerEmail":"v@example.com","offerId":"o","receipt":{"receiptData":"\#(Self.rd)","transactionId":""},"ipAddress":""}"#)
        #expect(empties.transactionId == nil)
        #expect(empties.ipAddress == nil)
        let ios = try Self.parse(#"{"customerEmail":"v@example.com","offerId":"o","receipt":{"receiptData":"\#(Self.rd)"},"appType":"ios"}"#)
        #expect(ios.appType == .ios)
    }
}

/// `JSONObject`: each accessor takes only its own JSON type (a number is not a boolean, nor the reverse).
@Suite("JSONObject")
struct JSONObjectTests {
    static func object(_ text: String) throws -> JSONObject {
        try JSONObject(body: ByteBuffer(string: text))
    }

    @Test("bool accepts only true and false", arguments: [("true", true), ("false", false)])
    func booleans(literal: String, expected: Bool) throws {
        #expect(try Self.object(#"{"flag":\#(literal)}"#).bool("flag") == expected)
    }

    @Test("bool refuses numbers and strings with 400 invalid_type", arguments: ["1", "0", "1.0", "2", "-1", #""true""#, #""1""#, "[]", "{}"])
    func notBooleans(literal: String) throws {
        let json = try Self.object(#"{"flag":\#(literal)}"#)
        let error = #expect(throws: APIError.self) { try json.bool("flag") }
        #expect(error?.status == .badRequest)
        #expect(error?.code == "invalid_type")
        #expect(error?.field == "flag")
    }

    @Test("int accepts whole numbers", arguments: [
        ("0", 0), ("1", 1), ("100", 100), ("-7", -7), ("1000000000", 1_000_000_000), ("30.0", 30), ("3e1", 30), ("1500e-2", 15),
        ("-0.0", 0), ("0.000e5", 0), ("12.500e1", 125), ("-2.5E+1", -25), ("9223372036854775807", Int.max),
        ("-9223372036854775808", Int.min), ("9.223372036854775807e18", Int.max), ("0e999999", 0), ("1e0", 1),
    ])
    func integers(literal: String, expected: Int) throws {
        #expect(try Self.object(#"{"n":\#(literal)}"#).int("n") == expected)
    }

    @Test("int refuses booleans, fractions, strings and out-of-range numbers", arguments: [
        "true", "false", "1.5", #""100""#, "1e300", "[1]", "1.0000000000000001", "9007199254740993.5", "1e-1", "15e-1",
        "9223372036854775808", "9.223372036854775808e18", "-9223372036854775809", "1e19", "1e9999999",
    ])
    func notIntegers(literal: String) throws {
        let json = try Self.object(#"{"n":\#(literal)}"#)
        let error = #expect(throws: APIError.self) { try json.int("n") }
        #expect(error?.status == .badRequest)
        #expect(error?.code == "invalid_type")
        #expect(error?.field == "n")
    }

    @Test("absent and null fields read as nil; nested errors name the full path")
    func absentAndNested() throws {
        let json = try Self.object(#"{"a":null,"outer":{"inner":1}}"#)
        #expect(try json.bool("a") == nil)
        #expect(try json.bool("missing") == nil)
        #expect(try json.int("a") == nil)
        #expect(try json.string("a") == nil)
        #expect(json.has("a"))
        #expect(!json.has("missing"))
        let outer = try #require(try json.object("outer"))
        let error = #expect(throws: APIError.self) { try outer.bool("inner") }
        #expect(error?.field == "outer.inner")
        let missing = #expect(throws: APIError.self) { try outer.requiredString("name") }
        #expect(missing?.code == "missing_field")
        #expect(missing?.field == "outer.name")
    }
}

/// `Credentials`: parsing `Authorization` headers.
@Suite("Credentials")
struct CredentialsTests {
    static func basic(_ text: String) -> String { "Basic " + Data(text.utf8).base64EncodedString() }

    @Test("bearer tokens are read with a case-insensitive scheme", arguments: [
        ("Bearer abc123", "abc123"), ("bearer abc123", "abc123"), ("BEARER abc123", "abc123"), ("Bearer   abc123  ", "abc123"),
    ])
    func bearer(header: String, expected: String) {
        #expect(Credentials.bearer(header) == expected)
    }

    @Test("anything else is not a bearer token", arguments: [
        nil, "", "Bearer", "Bearer ", "Bearer    ", "Basic abc123", "Token abc123", "Bearerabc123", "abc123",
    ] as [String?])
    func notBearer(header: String?) {
        #expect(Credentials.bearer(header) == nil)
    }

    @Test("basic credentials decode user and password, splitting at the first colon")
    func basic() throws {
        let plain = try #require(Credentials.basic(Self.basic("pub_0123:s3cret")))
        #expect(plain.username == "pub_0123")
        #expect(plain.password == "s3cret")
        let colons = try #require(Credentials.basic(Self.basic("user:pa:ss:")))
        #expect(colons.username == "user")
        #expect(colons.password == "pa:ss:")
        let lower = try #require(Credentials.basic("basic " + Data("u:p".utf8).base64EncodedString()))
        #expect(lower.username == "u")
        #expect(lower.password == "p")
        let emptyPassword = try #require(Credentials.basic(Self.basic("user:")))
        #expect(emptyPassword.username == "user")
        #expect(emptyPassword.password == "")
    }

    @Test("malformed basic credentials are refused", arguments: [
        nil, "", "Basic", "Basic ", "Bearer " + Data("u:p".utf8).base64EncodedString(),
        "Basic " + Data("no-colon".utf8).base64EncodedString(), "Basic not*base64!", "Basic d=Tpw",
        Data("u:p".utf8).base64EncodedString(),
    ] as [String?])
    func notBasic(header: String?) {
        #expect(Credentials.basic(header) == nil)
    }
}
