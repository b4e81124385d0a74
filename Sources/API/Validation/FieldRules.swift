import Foundation

/// Syntax rules for submitted fields; each returns the normalised value or throws an error naming the field.
enum FieldRules {
    /// An email address: lower-cased (emails compare case-insensitively), at most 254 characters.
    static func email(_ text: String, field: String = "customerEmail") throws -> String {
        let email = text.trimmingCharacters(in: .whitespaces).lowercased()
        let parts = email.split(separator: "@", omittingEmptySubsequences: false)
        let invalid = APIError.invalid(field, code: "invalid_email", "\(field) must be an email address of at most 254 characters")
        guard email.utf8.count <= 254, parts.count == 2 else { throw invalid }
        let local = parts[0]
        let domain = parts[1]
        let localAllowed = Set("abcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+/=?^_`{|}~.-".utf8)
        guard (1...64).contains(local.utf8.count), local.utf8.allSatisfy(localAllowed.contains),
            !local.hasPrefix("."), !local.hasSuffix("."), !local.contains("..")
        else { throw invalid }
        let labels = domain.split(separator: ".", omittingEmptySubsequences: false)
        let labelAllowed = Set("abcdefghijklmnopqrstuvwxyz0123456789-".utf8)
        guard labels.count >= 2, labels.allSatisfy({ label in
            (1...63).contains(label.utf8.count) && label.utf8.allSatisfy(labelAllowed.contains) && !label.hasPrefix("-") && !label.hasSuffix("-")
        }) else { throw invalid }
        return email
    }

    /// An offer id: 1 to 128 printable ASCII characters.
    static func offerId(_ text: String, field: String = "offerId") throws -> String {
        guard (1...128).contains(text.utf8.count), text.utf8.allSatisfy({ (0x21...0x7e).contains($0) }) else {
            throw APIError.invalid(field, code: "invalid_offer_id", "\(field) must be 1-128 printable characters without spaces")
        }
        return text
    }

    /// Strict standard base64 (padding required, no whitespace).
    static func base64(_ text: String, field: String) throws -> String {
        let alphabet = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        let bytes = Array(text.utf8)
        let invalid = APIError.invalid(field, code: "invalid_receipt_data", "\(field) must be standard base64")
        guard !bytes.isEmpty, bytes.count % 4 == 0 else { throw invalid }
        let padding = bytes.reversed().prefix { $0 == UInt8(ascii: "=") }.count
        guard padding <= 2, bytes.dropLast(padding).allSatisfy(alphabet.contains) else { throw invalid }
        return text
    }

    /// An App Store transaction id: 1 to 64 digits.
    static func transactionId(_ text: String, field: String = "receipt.transactionId") throws -> String {
        guard (1...64).contains(text.utf8.count), text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else {
            throw APIError.invalid(field, code: "invalid_transaction_id", "\(field) must be 1-64 digits")
        }
        return text
    }

    /// An IPv4 or IPv6 address.
    static func ipAddress(_ text: String, field: String = "ipAddress") throws -> String {
        var v4 = in_addr()
        var v6 = in6_addr()
        // inet_pton reads a C string: an embedded NUL would hide whatever follows it from the check.
        guard text.utf8.count <= 45, !text.utf8.contains(0),
            inet_pton(AF_INET, text, &v4) == 1 || inet_pton(AF_INET6, text, &v6) == 1
        else {
            throw APIError.invalid(field, code: "invalid_ip_address", "\(field) must be an IPv4 or IPv6 address")
        }
        return text
    }
}
