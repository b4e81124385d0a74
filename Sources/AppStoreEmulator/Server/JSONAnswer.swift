import Foundation
import Hummingbird

/// Builds JSON responses.
enum JSONAnswer {
    /// One shared encoder (safe to use concurrently); slashes stay unescaped, as in Apple's
    /// `America/Los_Angeles`. Field order is not specified.
    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .withoutEscapingSlashes
        return encoder
    }()

    /// `value` as a JSON response; with `millisecondsAsNumbers`, every `…_ms` string of digits becomes a number.
    static func response(_ value: some Encodable, status: HTTPResponse.Status = .ok, millisecondsAsNumbers: Bool = false) throws -> Response {
        var data = try encoder.encode(value)
        if millisecondsAsNumbers {
            data = try JSONSerialization.data(withJSONObject: Self.numbers(try JSONSerialization.jsonObject(with: data)), options: .withoutEscapingSlashes)
        }
        return Response(status: status, headers: [.contentType: "application/json"], body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// `value` with every `"…_ms": "digits"` as `"…_ms": digits`, at any depth.
    private static func numbers(_ value: Any) -> Any {
        if let object = value as? [String: Any] {
            var result: [String: Any] = [:]
            for (key, field) in object {
                if key.hasSuffix("_ms"), let text = field as? String, let number = Int64(text) {
                    result[key] = NSNumber(value: number)
                } else {
                    result[key] = Self.numbers(field)
                }
            }
            return result
        }
        if let array = value as? [Any] { return array.map(Self.numbers) }
        return value
    }
}
