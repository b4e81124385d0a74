import Foundation
import Hummingbird
import NIOCore

/// A parsed JSON object with typed accessors whose errors name the field (`receipt.receiptData`).
struct JSONObject {
    private let values: [String: Any]
    private let path: String

    /// Deepest nesting of arrays and objects accepted; Tollgate's own bodies need 2.
    static let maxDepth = 32

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
        guard Self.depth(of: body.readableBytesView) <= Self.maxDepth else {
            throw APIError(.badRequest, code: "too_deeply_nested", "the body nests arrays or objects more than \(Self.maxDepth) deep")
        }
        guard let object = try? JSONSerialization.jsonObject(with: Data(body.readableBytesView), options: []),
            let values = object as? [String: Any]
        else { throw APIError(.badRequest, code: "malformed_json", "the body must be a JSON object") }
        self.init(values: values, path: "")
    }

    private init(values: [String: Any], path: String) {
        self.values = values
        self.path = path
    }

    private func name(_ key: String) -> String { self.path.isEmpty ? key : "\(self.path).\(key)" }

    private func present(_ key: String) -> Any? {
        guard let value = self.values[key], !(value is NSNull) else { return nil }
        return value
    }

    /// A string field; `nil` when absent or null.
    func string(_ key: String) throws -> String? {
        guard let value = self.present(key) else { return nil }
        guard let text = value as? String else { throw APIError.invalidType(self.name(key), expected: "a string") }
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

    /// A boolean field.
    func bool(_ key: String) throws -> Bool? {
        guard let value = self.present(key) else { return nil }
        // JSONSerialization bridges numbers and booleans alike: only a real JSON true/false passes.
        guard let number = value as? NSNumber, Self.isBoolean(number) else {
            throw APIError.invalidType(self.name(key), expected: "true or false")
        }
        return number.boolValue
    }

    /// A whole-number field.
    func int(_ key: String) throws -> Int? {
        guard let value = self.present(key) else { return nil }
        guard let number = value as? NSNumber, !Self.isBoolean(number), let int = Int(exactly: number.doubleValue) else {
            throw APIError.invalidType(self.name(key), expected: "a whole number")
        }
        return int
    }

    /// A nested object field.
    func object(_ key: String) throws -> JSONObject? {
        guard let value = self.present(key) else { return nil }
        guard let values = value as? [String: Any] else { throw APIError.invalidType(self.name(key), expected: "an object") }
        return JSONObject(values: values, path: self.name(key))
    }

    /// Whether a key is present (even as null).
    func has(_ key: String) -> Bool { self.values[key] != nil }

    /// The deepest nesting of `[` and `{` outside strings, found in one pass before any parsing, so a hostile
    /// body cannot make the parser recurse deeply. Stops counting past ``maxDepth``.
    static func depth(of bytes: some Sequence<UInt8>) -> Int {
        var depth = 0
        var deepest = 0
        var inString = false
        var escaped = false
        for byte in bytes {
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
                deepest = max(deepest, depth)
                if deepest > Self.maxDepth { return deepest }
            case UInt8(ascii: "]"), UInt8(ascii: "}"): depth -= 1
            default: break
            }
        }
        return deepest
    }

    /// Whether an `NSNumber` from JSONSerialization came from `true`/`false`.
    static func isBoolean(_ number: NSNumber) -> Bool {
        String(cString: number.objCType) == "c"
    }
}
