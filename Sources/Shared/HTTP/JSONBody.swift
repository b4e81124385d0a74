import Foundation
import Hummingbird
import NIOCore

/// Builds JSON responses.
public enum JSONBody {
    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    /// A response with `value` encoded as JSON.
    public static func response<T: Encodable>(_ status: HTTPResponse.Status, _ value: T, headers: HTTPFields = [:]) -> Response {
        Self.response(status, ByteBuffer(bytes: (try? Self.encoder.encode(value)) ?? Data("{}".utf8)), headers: headers)
    }

    /// A response with a hand-written object.
    public static func response(_ status: HTTPResponse.Status, _ object: JSONObjectWriter, headers: HTTPFields = [:]) -> Response {
        Self.response(status, ByteBuffer(bytes: object.bytes), headers: headers)
    }

    /// CONTRACT.md's error, `{"code","message"}`.
    public static func error(_ status: HTTPResponse.Status, code: String, _ message: String, headers: HTTPFields = [:]) -> Response {
        var object = JSONObjectWriter()
        object.add("code", code)
        object.add("message", message)
        return Self.response(status, object, headers: headers)
    }

    private static func response(_ status: HTTPResponse.Status, _ body: ByteBuffer, headers: HTTPFields) -> Response {
        var headers = headers
        headers[.contentType] = "application/json; charset=utf-8"
        return Response(status: status, headers: headers, body: .init(byteBuffer: body))
    }
}

/// A flat JSON object written by hand, for the answers on the hot paths (accepting a receipt, the access
/// status), where Foundation's `JSONEncoder` cost about 5 % of the API's CPU. Add the keys in sorted
/// order, as ``JSONBody``'s encoder writes them, so every answer has one shape whichever way it was made.
public struct JSONObjectWriter: Sendable {
    private var text = JSONText(capacity: 512)
    private var empty = true

    public init() {
        self.text.append("{")
    }

    public mutating func add(_ key: String, _ value: String?) {
        self.key(key)
        if let value { self.text.appendString(value) } else { self.text.append("null") }
    }

    public mutating func add(_ key: String, _ value: Int?) {
        self.key(key)
        self.text.append(value.map { String($0) } ?? "null")
    }

    public mutating func add(_ key: String, _ value: Bool) {
        self.key(key)
        self.text.append(value ? "true" : "false")
    }

    /// The object's text, as UTF-8.
    public var bytes: [UInt8] { self.text.bytes + [UInt8(ascii: "}")] }

    /// The object's text.
    public var json: String { String(decoding: self.bytes, as: UTF8.self) }

    private mutating func key(_ key: String) {
        if !self.empty { self.text.append(",") }
        self.empty = false
        self.text.appendString(key)
        self.text.append(":")
    }
}
