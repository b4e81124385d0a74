/// Lenient readers for scenario fields.
///
/// Scenario authors copy values from Apple's answers, where numbers are strings, as often as they type
/// them as JSON numbers; accepting both keeps test fixtures and demo scripts short.
extension KeyedDecodingContainer {
    /// An integer given as a JSON number (integral) or a string of digits; `nil` when absent or null.
    func decodeLenientInt64IfPresent(forKey key: Key) throws -> Int64? {
        guard contains(key), try !decodeNil(forKey: key) else { return nil }
        if let number = try? decode(Int64.self, forKey: key) {
            return number
        }
        if let double = try? decode(Double.self, forKey: key), double.rounded() == double,
            let number = Int64(exactly: double) {
            return number
        }
        let text = try decode(String.self, forKey: key)
        guard let number = Int64(text.trimmingWhitespace()) else {
            throw DecodingError.dataCorruptedError(forKey: key, in: self, debugDescription: "expected an integer")
        }
        return number
    }

    /// An `Int`-sized integer, read as `decodeLenientInt64IfPresent` does.
    func decodeLenientIntIfPresent(forKey key: Key) throws -> Int? {
        guard let number = try decodeLenientInt64IfPresent(forKey: key) else { return nil }
        guard let value = Int(exactly: number) else {
            throw DecodingError.dataCorruptedError(forKey: key, in: self, debugDescription: "integer out of range")
        }
        return value
    }

    /// A boolean given as `true`/`false`, `1`/`0`, or those as strings; `nil` when absent or null.
    func decodeLenientBoolIfPresent(forKey key: Key) throws -> Bool? {
        guard contains(key), try !decodeNil(forKey: key) else { return nil }
        if let value = try? decode(Bool.self, forKey: key) {
            return value
        }
        if let number = try? decode(Int.self, forKey: key), number == 0 || number == 1 {
            return number == 1
        }
        switch try decode(String.self, forKey: key).trimmingWhitespace().lowercased() {
        case "true", "1": return true
        case "false", "0": return false
        default:
            throw DecodingError.dataCorruptedError(forKey: key, in: self, debugDescription: "expected a boolean")
        }
    }

    /// An identifier given as a string or as a JSON integer; `nil` when absent or null.
    func decodeLenientStringIfPresent(forKey key: Key) throws -> String? {
        guard contains(key), try !decodeNil(forKey: key) else { return nil }
        if let text = try? decode(String.self, forKey: key) {
            return text
        }
        return String(try decode(Int64.self, forKey: key))
    }
}

extension String {
    /// The string without leading and trailing spaces, tabs or newlines.
    fileprivate func trimmingWhitespace() -> Substring {
        let start = firstIndex(where: { !$0.isWhitespace }) ?? endIndex
        let end = lastIndex(where: { !$0.isWhitespace }).map(index(after:)) ?? start
        return self[start..<max(start, end)]
    }
}
