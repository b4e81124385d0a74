import Foundation

/// A Swift value that binds as a statement parameter, in PostgreSQL's text format.
public protocol PostgresEncodable: Sendable {
    /// The text PostgreSQL parses for this value; `nil` binds SQL `NULL`.
    var postgresText: String? { get }
}

/// A Swift value that decodes from a column in PostgreSQL's text format.
public protocol PostgresDecodable: Sendable {
    /// Decodes `text` (`nil` is SQL `NULL`); returns `nil` when the text is not a valid value.
    static func decode(postgresText text: String?) -> Self?
}

extension String: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { self }
    public static func decode(postgresText text: String?) -> String? { text }
}

extension Int: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { String(self) }
    public static func decode(postgresText text: String?) -> Int? { text.flatMap { Int($0) } }
}

extension Int64: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { String(self) }
    public static func decode(postgresText text: String?) -> Int64? { text.flatMap { Int64($0) } }
}

extension Double: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { String(self) }
    public static func decode(postgresText text: String?) -> Double? { text.flatMap { Double($0) } }
}

extension Bool: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { self ? "t" : "f" }
    public static func decode(postgresText text: String?) -> Bool? {
        switch text {
        case "t", "true": true
        case "f", "false": false
        default: nil
        }
    }
}

extension UUID: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { self.lowercasedString }
    public static func decode(postgresText text: String?) -> UUID? { text.flatMap { UUID(uuidString: $0) } }
}

/// Dates travel as `timestamptz` text with microseconds and an explicit `+00` offset, so they mean the
/// same instant whatever the session's time zone; sessions run with `TimeZone=UTC` so results parse back.
extension Date: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? {
        let micros = Int64((self.timeIntervalSince1970 * 1_000_000).rounded())
        let seconds = micros.quotientAndRemainder(dividingBy: 1_000_000)
        let fraction = seconds.remainder < 0 ? seconds.remainder + 1_000_000 : seconds.remainder
        let whole = seconds.remainder < 0 ? seconds.quotient - 1 : seconds.quotient
        var text = PostgresTimestamp.format(unixSeconds: whole)
        text += "."
        PostgresTimestamp.append(fraction, width: 6, to: &text)
        text += "+00"
        return text
    }

    public static func decode(postgresText text: String?) -> Date? {
        text.flatMap(PostgresTimestamp.parse)
    }
}

/// `bytea`, in PostgreSQL's hex format (`\x…`).
public struct PostgresBytes: PostgresEncodable, PostgresDecodable, Hashable {
    /// The bytes.
    public var bytes: [UInt8]

    /// Wraps bytes.
    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    public var postgresText: String? { "\\x" + Hex.encode(self.bytes) }

    public static func decode(postgresText text: String?) -> PostgresBytes? {
        guard let text, text.hasPrefix("\\x"), let bytes = Hex.decode(text.dropFirst(2)) else { return nil }
        return PostgresBytes(bytes)
    }
}

extension Optional: PostgresEncodable where Wrapped: PostgresEncodable {
    public var postgresText: String? { self.flatMap { $0.postgresText } }  // A closure: a key path here is built at run time on every call.
}

extension Optional: PostgresDecodable where Wrapped: PostgresDecodable {
    public static func decode(postgresText text: String?) -> Wrapped?? {
        guard let text else { return .some(nil) }
        guard let value = Wrapped.decode(postgresText: text) else { return nil }
        return .some(value)
    }
}

/// A `text[]` parameter (`= ANY($n)`), in PostgreSQL's array literal form with every element quoted.
public struct PostgresTextArray: PostgresEncodable, Equatable {
    /// The elements.
    public var elements: [String]

    /// Wraps elements.
    public init(_ elements: [String]) { self.elements = elements }

    public var postgresText: String? {
        let quoted = self.elements.map { element -> String in
            let escaped = element.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            return "\"\(escaped)\""
        }
        return "{" + quoted.joined(separator: ",") + "}"
    }
}
