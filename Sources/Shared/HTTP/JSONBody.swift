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
        var headers = headers
        headers[.contentType] = "application/json; charset=utf-8"
        let data = (try? Self.encoder.encode(value)) ?? Data("{}".utf8)
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}
