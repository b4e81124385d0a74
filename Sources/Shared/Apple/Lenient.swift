import Foundation

/// Apple sends most numbers as strings ("1700000000000") but not always; these read both.
enum Lenient {
    /// An integer: a number (a fraction is cut off) or a string holding an integer.
    static func int(_ value: JSONValue) -> Int64? {
        switch value {
        case .number(let literal):
            if let number = Int64(literal) { return number }
            guard let double = Double(literal), double.isFinite, abs(double) < 9e18 else { return nil }
            return Int64(double)
        case .string(let text):
            return Int64(text.trimmingCharacters(in: .whitespaces))
        default:
            return nil
        }
    }

    /// The latest instant a date field may name, in Unix ms: the last of year 9999. Apple's dates are years
    /// from now; one past this is no date (PostgreSQL's text form and the microseconds a grant binds stop
    /// short of it).
    static let latestMilliseconds: Int64 = 253_402_300_799_999

    /// A date as Unix ms (`…_date_ms`): a whole number from 1970 to the end of year 9999.
    static func milliseconds(_ value: JSONValue) -> Int64? {
        Self.int(value).flatMap { (0...Self.latestMilliseconds).contains($0) ? $0 : nil }
    }

    /// A string, or a whole number Apple sent as a number (identifiers).
    static func string(_ value: JSONValue) -> String? {
        switch value {
        case .string(let text): text
        case .number(let literal): Int64(literal).map(String.init)
        default: nil
        }
    }

    /// A boolean, a whole number (non-zero is true) or a string (`true`, `1`, `yes` or `false`, `0`, `no`,
    /// in any case); `nil` for anything else, which says neither.
    static func bool(_ value: JSONValue) -> Bool? {
        switch value {
        case .bool(let flag): flag
        case .number(let literal): Int64(literal).map { $0 != 0 }
        case .string(let text):
            switch text.trimmingCharacters(in: .whitespaces).lowercased() {
            case "true", "1", "yes": true
            case "false", "0", "no": false
            default: nil
            }
        default: nil
        }
    }

    /// A value of Apple's answer that is not what it must be.
    struct Malformed: Error {}

    /// The members of an object.
    static func object(_ value: JSONValue) throws(Malformed) -> [String: JSONValue] {
        guard case .object(let members) = value else { throw Malformed() }
        return members
    }

    /// An optional field read by `read`: `nil` when absent or null, an error when present but unreadable.
    static func field<T>(_ object: [String: JSONValue], _ key: String, _ read: (JSONValue) -> T?) throws(Malformed) -> T? {
        guard let value = object.present(key) else { return nil }
        guard let read = read(value) else { throw Malformed() }
        return read
    }

    /// A field that must be there, read by `read`.
    static func required<T>(_ object: [String: JSONValue], _ key: String, _ read: (JSONValue) -> T?) throws(Malformed) -> T {
        guard let value = try Self.field(object, key, read) else { throw Malformed() }
        return value
    }

    /// An optional array whose every element must read: `[]` when absent or null.
    static func array<Element>(
        _ object: [String: JSONValue], _ key: String, _ read: (JSONValue) throws(Malformed) -> Element
    ) throws(Malformed) -> [Element] {
        guard let value = object.present(key) else { return [] }
        guard case .array(let elements) = value else { throw Malformed() }
        var items: [Element] = []
        items.reserveCapacity(elements.count)
        for element in elements { items.append(try read(element)) }
        return items
    }

    /// An optional array's elements that read; the others, and an array that is not one, are left out.
    static func readableElements<Element>(
        _ object: [String: JSONValue], _ key: String, _ read: (JSONValue) throws(Malformed) -> Element
    ) -> [Element] {
        guard case .array(let elements)? = object.present(key) else { return [] }
        return elements.compactMap { element in try? read(element) }
    }
}
