import Foundation

/// Syntax rules for submitted fields; each returns the normalised value or throws an error naming the field.
enum FieldRules {
    /// An email address: lower-cased (emails compare case-insensitively), at most 254 characters. ASCII
    /// only, checked before lower-casing: Unicode's lower-casing maps some other characters to ASCII
    /// letters (KELVIN SIGN to `k`), which would name another customer.
    static func email(_ text: String, field: String = "customerEmail") throws -> String {
        let trimmed = Self.trimmingSpaces(text)
        // Built only when thrown: an accepted receipt's email is checked on the hot path.
        var invalid: APIError { APIError.invalid(field, code: "invalid_email", "\(field) must be an email address of at most 254 characters") }
        guard trimmed.utf8.allSatisfy({ $0 < 0x80 }) else { throw invalid }
        let email = trimmed.lowercased()
        let parts = email.utf8.split(separator: UInt8(ascii: "@"), omittingEmptySubsequences: false)
        guard email.utf8.count <= 254, parts.count == 2 else { throw invalid }
        let local = parts[0]
        let domain = parts[1]
        let dot = UInt8(ascii: ".")
        guard (1...64).contains(local.count), local.allSatisfy(Self.isLocalPartByte),
            local.first != dot, local.last != dot, !zip(local, local.dropFirst()).contains(where: { $0 == dot && $1 == dot })
        else { throw invalid }
        let labels = domain.split(separator: dot, omittingEmptySubsequences: false)
        let hyphen = UInt8(ascii: "-")
        guard labels.count >= 2, labels.allSatisfy({ label in
            (1...63).contains(label.count) && label.allSatisfy(Self.isLabelByte) && label.first != hyphen && label.last != hyphen
        }) else { throw invalid }
        return email
    }

    /// `text` without leading and trailing spaces and tabs (no other character: a valid email or
    /// credential is ASCII).
    static func trimmingSpaces(_ text: String) -> String {
        let utf8 = text.utf8
        let isSpace: (UInt8) -> Bool = { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
        guard let first = utf8.firstIndex(where: { !isSpace($0) }), let last = utf8.lastIndex(where: { !isSpace($0) }) else { return "" }
        if first == utf8.startIndex, last == utf8.index(before: utf8.endIndex) { return text }
        return String(text[first...last])
    }

    /// Lower-case letters, digits and ``!#$%&'*+/=?^_`{|}~.-``: what the local part may hold.
    private static func isLocalPartByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "!"), UInt8(ascii: "#")...UInt8(ascii: "'"),
            UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "/"), UInt8(ascii: "="), UInt8(ascii: "?"),
            UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "{")...UInt8(ascii: "~"): true
        default: false
        }
    }

    /// Lower-case letters, digits and `-`: what a domain label may hold.
    private static func isLabelByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"): true
        default: false
        }
    }

    static let offerIdMaxLength = 128

    /// An offer id: 1 to 128 printable ASCII characters.
    static func offerId(_ text: String, field: String = "offerId") throws -> String {
        guard (1...offerIdMaxLength).contains(text.utf8.count), text.utf8.allSatisfy({ (0x21...0x7e).contains($0) }) else {
            throw APIError.invalid(field, code: "invalid_offer_id", "\(field) must be 1-\(offerIdMaxLength) printable characters without spaces")
        }
        return text
    }

    /// Standard base64, padding required, returned without line breaks: MIME encoders wrap lines (RFC 2045,
    /// every 76 characters, CRLF or LF), and the same receipt unwrapped is what is kept, deduplicated and
    /// sent to Apple. Any other whitespace is refused.
    static func base64(_ text: String, field: String) throws -> String {
        if Self.isStandardBase64(text.utf8) { return text }
        let unwrapped = String(decoding: text.utf8.filter { $0 != UInt8(ascii: "\n") && $0 != UInt8(ascii: "\r") }, as: UTF8.self)
        guard unwrapped.utf8.count < text.utf8.count, Self.isStandardBase64(unwrapped.utf8) else {
            throw APIError.invalid(field, code: "invalid_receipt_data", "\(field) must be standard base64")
        }
        return unwrapped
    }

    private static func isStandardBase64(_ bytes: String.UTF8View) -> Bool {
        guard !bytes.isEmpty, bytes.count % 4 == 0 else { return false }
        let padding = bytes.reversed().prefix { $0 == UInt8(ascii: "=") }.count
        return padding <= 2 && bytes.dropLast(padding).allSatisfy(Self.isBase64Byte)
    }

    private static func isBase64Byte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "+"), UInt8(ascii: "/"): true
        default: false
        }
    }

    /// A transaction id: 1 to 64 printable ASCII characters. Apple's are digits, but CONTRACT.md only
    /// recommends the field and the worker trusts it only once Apple's answer names it, so anything else
    /// is rejected there (`transaction_not_found`) rather than refused here.
    static func transactionId(_ text: String, field: String = "receipt.transactionId") throws -> String {
        guard (1...64).contains(text.utf8.count), text.utf8.allSatisfy({ (0x21...0x7e).contains($0) }) else {
            throw APIError.invalid(field, code: "invalid_transaction_id", "\(field) must be 1-64 printable characters without spaces")
        }
        return text
    }

    /// The client address to keep from `ipAddress`: an IPv4 or IPv6 address, or the first of an
    /// `X-Forwarded-For` list ("client, proxy, …"); anything else is not kept. The field is optional and
    /// informational, so it never refuses a paid receipt: CONTRACT.md's 422 list does not name it.
    static func clientAddress(_ text: String) -> String? {
        let comma = text.utf8.firstIndex(of: UInt8(ascii: ",")) ?? text.utf8.endIndex
        let candidate = Self.trimmingSpaces(comma == text.utf8.endIndex ? text : String(text[..<comma]))
        var v4 = in_addr()
        var v6 = in6_addr()
        // inet_pton reads a C string: an embedded NUL would hide whatever follows it from the check.
        guard candidate.utf8.count <= 45, !candidate.utf8.contains(0),
            inet_pton(AF_INET, candidate, &v4) == 1 || inet_pton(AF_INET6, candidate, &v6) == 1
        else { return nil }
        return candidate
    }
}
