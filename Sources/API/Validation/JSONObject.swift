import Foundation
import Hummingbird
import NIOCore
import Shared

/// A parsed JSON object with typed accessors whose errors name the field (`receipt.receiptData`).
struct JSONObject {
    private let values: [String: JSONValue]
    private let path: String

    /// Deepest nesting of arrays and objects accepted; Tollgate's own bodies need 2.
    static let maxDepth = 32
    /// Most values accepted in a body; Tollgate's own bodies hold a few dozen. A 1 MiB body of tiny values
    /// would otherwise parse into 13 MB, before the JSON-RPC route can even check its token.
    static let maxValues = 10_000

    /// Reads a request's body (415 unless it is JSON, 413 past 1 MiB while reading) as one JSON object.
    static func read(_ request: Request) async throws -> JSONObject {
        guard Self.isJSON(request.headers[.contentType]) else {
            throw APIError(.unsupportedMediaType, code: "unsupported_media_type", "Content-Type must be application/json")
        }
        return try JSONObject(body: try await request.body.collect(upTo: APILimits.maxBodyBytes))
    }

    /// Whether a `Content-Type` names JSON (`application/json`, any parameters).
    static func isJSON(_ contentType: String?) -> Bool {
        guard let contentType else { return false }
        if contentType == "application/json" { return true }
        let mediaType = contentType.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
        return mediaType == "application/json"
    }

    /// Parses a body that must be one JSON object, nested at most ``maxDepth`` deep.
    init(body: ByteBuffer) throws {
        let parsed = body.withUnsafeReadableBytes { bytes in
            Result { () throws(JSONValue.ParseError) in try JSONValue.parse(bytes, maxDepth: Self.maxDepth, maxValues: Self.maxValues) }
        }
        switch parsed {
        case .success(.object(let values)):
            self.init(values: values, path: "")
        case .failure(.tooDeep):
            throw APIError(.badRequest, code: "too_deeply_nested", "the body nests arrays or objects more than \(Self.maxDepth) deep")
        case .failure(.tooManyValues):
            throw APIError(.badRequest, code: "too_many_values", "the body holds more than \(Self.maxValues) JSON values")
        case .failure(.duplicateKey(let key)):
            let named = key.utf8.count <= 64 ? " \"\(key)\"" : ""
            throw APIError(.badRequest, code: "duplicate_key", "an object in the body names the member\(named) twice")
        case .success, .failure(.malformed):
            throw APIError(.badRequest, code: "malformed_json", "the body must be a JSON object")
        }
    }

    private init(values: [String: JSONValue], path: String) {
        self.values = values
        self.path = path
    }

    private func name(_ key: String) -> String { self.path.isEmpty ? key : "\(self.path).\(key)" }

    /// A string field; `nil` when absent or null.
    func string(_ key: String) throws -> String? {
        guard let value = self.values.present(key) else { return nil }
        guard case .string(let text) = value else { throw APIError.invalidType(self.name(key), expected: "a string") }
        // PostgreSQL text cannot hold NUL, and C APIs would cut the value there: refuse it rather than store less.
        guard !text.utf8.contains(0) else {
            throw APIError.invalid(self.name(key), code: "invalid_character", "\(self.name(key)) must not contain NUL characters")
        }
        return text
    }

    /// A string field that must be there and not empty.
    func requiredString(_ key: String) throws -> String {
        guard let text = try self.string(key), !text.isEmpty else { throw APIError.missingField(self.name(key)) }
        return text
    }

    /// A boolean field: only a JSON `true` or `false`.
    func bool(_ key: String) throws -> Bool? {
        guard let value = self.values.present(key) else { return nil }
        guard case .bool(let flag) = value else { throw APIError.invalidType(self.name(key), expected: "true or false") }
        return flag
    }

    /// A whole-number field: an integer literal, or a number whose value is whole (`30.0`, `3e1`, `1500e-2`).
    func int(_ key: String) throws -> Int? {
        guard let value = self.values.present(key) else { return nil }
        guard case .number(let literal) = value, let int = Int(literal) ?? Self.wholeNumber(literal) else {
            throw APIError.invalidType(self.name(key), expected: "a whole number")
        }
        return int
    }

    /// The value of a JSON number literal (its grammar already checked) when it is whole and fits `Int`,
    /// read from its decimal digits: through `Double`, `1.0000000000000001` would read as 1.
    static func wholeNumber(_ literal: String) -> Int? {
        var digits: [UInt8] = []
        var point: Int?
        var exponent: Int? = 0
        var negative = false
        var bytes = literal.utf8[...]
        if bytes.first == UInt8(ascii: "-") {
            negative = true
            bytes = bytes.dropFirst()
        }
        while let byte = bytes.popFirst() {
            switch byte {
            case UInt8(ascii: "."): point = digits.count
            case UInt8(ascii: "e"), UInt8(ascii: "E"):
                exponent = Int(Substring(bytes))  // nil past Int: only zero is whole then
                bytes = bytes[bytes.endIndex...]
            default: digits.append(byte - UInt8(ascii: "0"))
            }
        }
        // The digits from the first that is not 0, and how many of them stand before the decimal point.
        guard let first = digits.firstIndex(where: { $0 != 0 }) else { return 0 }
        guard let exponent, case let (whole, overflow) = ((point ?? digits.count) - first).addingReportingOverflow(exponent), !overflow,
              (1...19).contains(whole) else { return nil }  // Int.max has 19 digits
        let significant = digits[first...]
        guard significant.dropFirst(whole).allSatisfy({ $0 == 0 }) else { return nil }
        var value = 0
        for index in 0..<whole {
            let digit = index < significant.count ? Int(significant[first + index]) : 0
            let (times, overflowTimes) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflowSum) = negative ? times.subtractingReportingOverflow(digit) : times.addingReportingOverflow(digit)
            guard !overflowTimes, !overflowSum else { return nil }
            value = sum
        }
        return value
    }

    /// A nested object field.
    func object(_ key: String) throws -> JSONObject? {
        guard let value = self.values.present(key) else { return nil }
        guard case .object(let values) = value else { throw APIError.invalidType(self.name(key), expected: "an object") }
        return JSONObject(values: values, path: self.name(key))
    }

    /// Whether a key is present (even as null).
    func has(_ key: String) -> Bool { self.values[key] != nil }

    /// Refuses a member not in `known` (400 `unknown_field`, the first in order): a change that names a field
    /// by a wrong name (`{"enable": false}`) must not answer 200 having changed nothing.
    func refuseUnknown(_ known: Set<String>) throws {
        guard let key = self.values.keys.filter({ !known.contains($0) }).min() else { return }
        let named = key.utf8.count <= 64 ? self.name(key) : nil
        throw APIError(
            .badRequest, code: "unknown_field",
            "\(named.map { "\($0) is" } ?? "a member of the body is") not a field of this change; the fields are \(known.sorted().joined(separator: ", "))",
            field: named
        )
    }
}
