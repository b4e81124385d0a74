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

    /// `value` as a JSON response.
    static func response(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        Response(
            status: status,
            headers: [.contentType: "application/json"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: try encoder.encode(value)))
        )
    }
}
