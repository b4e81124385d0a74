import Foundation
import NIOCore

/// A parsed JSON object with typed accessors whose errors name the field (`receipt.receiptData`).
struct JSONObject {
    private let values: [String: Any]
    private let path: String

    /// Parses a body that must be one JSON object.
    init(body: ByteBuffer) throws {
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

    /// Whether an `NSNumber` from JSONSerialization came from `true`/`false`.
    static func isBoolean(_ number: NSNumber) -> Bool {
        String(cString: number.objCType) == "c"
    }
}
