import HTTPTypes
import Hummingbird
import Shared

/// Authenticates a publisher by both of its credentials: `X-Publisher-Token` and HTTP Basic.
///
/// The token's hash finds the publisher (a cache avoids a database round trip on most requests); the
/// Basic password's hash is compared in constant time. Any failure is the same 401, so a caller cannot
/// tell which credential was wrong.
struct PublisherAuthMiddleware: RouterMiddleware {
    typealias Context = TollgateRequestContext

    let authenticator: PublisherAuthenticator

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let token = request.headers[.publisherToken], !token.isEmpty,
            let basic = Credentials.basic(request.headers[.authorization]),
            let publisher = try await self.authenticator.authenticate(token: token, username: basic.username, password: basic.password)
        else { throw APIError.unauthorized }
        var context = context
        context.publisher = publisher
        context.logger[metadataKey: "publisher"] = "\(publisher.id.uuidString.lowercased())"
        return try await next(request, context)
    }
}

extension HTTPField.Name {
    /// `X-Publisher-Token`.
    static let publisherToken = HTTPField.Name("X-Publisher-Token")!
}
