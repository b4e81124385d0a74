import Hummingbird
import Testing

@testable import API

/// `FieldRules`: the syntax of submitted fields; a bad value is a 422 naming its field.
@Suite("FieldRules")
struct FieldRulesTests {
    /// Expects `body` to throw a 422 `APIError` with `code` and `field`.
    static func expectInvalid(
        code: String, field: String, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> String
    ) {
        let error = #expect(throws: APIError.self, sourceLocation: sourceLocation) { _ = try body() }
        #expect(error?.status == .unprocessableContent, sourceLocation: sourceLocation)
        #expect(error?.code == code, sourceLocation: sourceLocation)
        #expect(error?.field == field, sourceLocation: sourceLocation)
    }

    // MARK: Email

    /// A 254-character address (64-character local part, labels of at most 63).
    static let longestEmail = String(repeating: "a", count: 64) + "@" + String(repeating: "b", count: 63) + "."
        + String(repeating: "c", count: 63) + "." + String(repeating: "d", count: 57) + ".com"

    @Test("valid emails are accepted and folded to lower case", arguments: [
        ("viewer@example.com", "viewer@example.com"),
        ("Viewer@Example.COM", "viewer@example.com"),
        ("VIEWER+Tag@Sub.Example.Org", "viewer+tag@sub.example.org"),
        ("first.last@example.co.uk", "first.last@example.co.uk"),
        ("o'brien_1-2@my-domain.io", "o'brien_1-2@my-domain.io"),
        ("  viewer@example.com ", "viewer@example.com"),
        // Every character a local part may hold besides letters and digits.
        ("x!#$%&'*+/=?^_`{|}~.-x@example.com", "x!#$%&'*+/=?^_`{|}~.-x@example.com"),
    ])
    func validEmail(input: String, expected: String) throws {
        #expect(try FieldRules.email(input) == expected)
    }

    @Test("an email of exactly 254 characters is accepted; 255 is refused")
    func emailLengthLimit() throws {
        #expect(Self.longestEmail.utf8.count == 254)
        #expect(try FieldRules.email(Self.longestEmail) == Self.longestEmail)
        let tooLong = String(repeating: "a", count: 64) + "@" + String(repeating: "b", count: 63) + "."
            + String(repeating: "c", count: 63) + "." + String(repeating: "d", count: 58) + ".com"
        #expect(tooLong.utf8.count == 255)
        Self.expectInvalid(code: "invalid_email", field: "customerEmail") { try FieldRules.email(tooLong) }
    }

    @Test("malformed emails are refused with 422 invalid_email", arguments: [
        "", "viewer", "viewer@", "@example.com", "viewer@example", "viewer@@example.com", "a@b@example.com",
        "view er@example.com", "viewer@exa mple.com", ".viewer@example.com", "viewer.@example.com", "vi..ewer@example.com",
        "viewer@-example.com", "viewer@example-.com", "viewer@example..com", "viewer@.example.com", "viewer@example.com.",
        "vïewer@example.com", "viewer@exämple.com", "viewer@example.com\u{0}", "<viewer@example.com>",
        // Characters Unicode lower-cases to ASCII letters (KELVIN SIGN, LATIN CAPITAL I WITH DOT ABOVE), and
        // spaces other than space and tab.
        "\u{212A}ate@example.com", "viewer@\u{212A}ample.com", "\u{0130}nfo@example.com", "\u{00A0}viewer@example.com",
        "viewer@example.com\u{3000}",
        // The printable ASCII characters a local part may not hold.
        "a\"b@example.com", "a(b@example.com", "a)b@example.com", "a,b@example.com", "a:b@example.com", "a;b@example.com",
        "a[b@example.com", "a\\b@example.com", "a]b@example.com", "a\u{7f}b@example.com",
        String(repeating: "a", count: 65) + "@example.com", "viewer@" + String(repeating: "b", count: 64) + ".com",
    ])
    func invalidEmail(input: String) {
        Self.expectInvalid(code: "invalid_email", field: "customerEmail") { try FieldRules.email(input) }
    }

    @Test("an email error names the field it was given")
    func emailFieldName() {
        Self.expectInvalid(code: "invalid_email", field: "owner") { try FieldRules.email("nope", field: "owner") }
    }

    // MARK: Offer id

    @Test("offer ids of 1-128 printable characters are accepted", arguments: [
        "S598742062_US", "a", String(repeating: "x", count: 128), "com.example.pass-30:days/1", "!~",
    ])
    func validOfferId(input: String) throws {
        #expect(try FieldRules.offerId(input) == input)
    }

    @Test("offer ids that are empty, too long or not printable ASCII are refused", arguments: [
        "", String(repeating: "x", count: 129), "with space", "tab\there", "new\nline", "café", "null\u{0}byte", "\u{7f}",
    ])
    func invalidOfferId(input: String) {
        Self.expectInvalid(code: "invalid_offer_id", field: "offerId") { try FieldRules.offerId(input) }
    }

    // MARK: Base64

    @Test("strict standard base64 is accepted", arguments: ["QUJD", "QUI=", "QQ==", "YWJjZA==", "+/+/", "AAAAAAAA"])
    func validBase64(input: String) throws {
        #expect(try FieldRules.base64(input, field: "receipt.receiptData") == input)
    }

    @Test("base64 wrapped in lines (LF or CRLF, as MIME encoders write it) is accepted without its line breaks", arguments: [
        ("QUJD\n", "QUJD"), ("QUJD\r\nQUJD", "QUJDQUJD"), ("QU\nJD\nQQ==\n", "QUJDQQ=="), ("\nQUJD", "QUJD"),
    ])
    func wrappedBase64(input: String, unwrapped: String) throws {
        #expect(try FieldRules.base64(input, field: "receipt.receiptData") == unwrapped)
    }

    @Test("anything but standard base64 is refused", arguments: [
        "",  // empty
        "QUI", "QQ", "QUJDR",  // missing padding
        "Q===", "====",  // too much padding
        "QU JD", " QUJD", "QUJD ", "QUJD\t", "QU\tJD", "QUJD\u{0B}", "QUJD\u{0C}",  // whitespace but line breaks
        "\n", "\r\n", "QUI\n", "QU\nJDR",  // nothing, or not base64, once unwrapped
        "QU*D", "QUJ!", "QUJD-_==", "QUJ\u{0}",  // bad characters (and base64url)
        "QQ=A", "Q=QA", "=QUI",  // padding not at the end
        "QUJDé===",
    ])
    func invalidBase64(input: String) {
        Self.expectInvalid(code: "invalid_receipt_data", field: "receipt.receiptData") {
            try FieldRules.base64(input, field: "receipt.receiptData")
        }
    }

    // MARK: Transaction id

    @Test("transaction ids of 1-64 printable characters are accepted", arguments: ["1", "1000000241260292", String(repeating: "9", count: 64), "0007", "tx-1", "GPA.1234:x"])
    func validTransactionId(input: String) throws {
        #expect(try FieldRules.transactionId(input) == input)
    }

    @Test("transaction ids that are not 1-64 printable ASCII characters are refused", arguments: [
        "", String(repeating: "9", count: 65), "1 2", " 12", "12 ", "1\t2", "1\n", "١٢٣", "１２３", "é", "1\u{0}",
    ])
    func invalidTransactionId(input: String) {
        Self.expectInvalid(code: "invalid_transaction_id", field: "receipt.transactionId") { try FieldRules.transactionId(input) }
    }

    // MARK: IP address

    @Test("IPv4 and IPv6 addresses are kept", arguments: [
        "192.168.1.1", "0.0.0.0", "255.255.255.255", "8.8.8.8", "::1", "::", "2001:db8::1", "fe80::1",
        "2001:0db8:85a3:0000:0000:8a2e:0370:7334", "::ffff:192.0.2.1", "2001:DB8::ABCD",
    ])
    func validIPAddress(input: String) {
        #expect(FieldRules.clientAddress(input) == input)
    }

    @Test("of an X-Forwarded-For list, the first address is kept; surrounding spaces are dropped", arguments: [
        ("192.168.1.1, 10.0.0.1", "192.168.1.1"), ("2001:db8::1,10.0.0.1", "2001:db8::1"), (" 192.168.1.1 ", "192.168.1.1"),
        ("\t10.0.0.1\t", "10.0.0.1"), ("10.0.0.1 ,x", "10.0.0.1"), ("::1,", "::1"),
    ])
    func forwardedFor(input: String, kept: String) {
        #expect(FieldRules.clientAddress(input) == kept)
    }

    @Test("anything else is not kept", arguments: [
        "", "256.1.1.1", "1.2.3", "1.2.3.4.5", "192.168.1.1/24", "example.com", "unknown, 10.0.0.1",
        "gggg::1", "2001:db8:::1", "1:2:3:4:5:6:7:8:9", "fe80::1%eth0", "192.168.1.1\u{0}junk", "::1\u{0}",
        "192.168.001.001x", "localhost", "1.2.3.4:5678", String(repeating: "1", count: 100), ",10.0.0.1", "\u{00A0}10.0.0.1",
    ])
    func invalidIPAddress(input: String) {
        #expect(FieldRules.clientAddress(input) == nil)
    }
}
