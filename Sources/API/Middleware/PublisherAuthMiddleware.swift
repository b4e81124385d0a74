import HTTPTypes
import Hummingbird
import Shared

/// Authenticates a publisher by both of its credentials: `X-Publisher-Token` and HTTP Basic, then takes
/// one token of its rate limit (429 with `Retry-After` when the bucket is empty).
///
/// The token's hash finds the publisher (a cache avoids a database round trip on most requests); the
/// Basic password's hash is compared in constant time. Any failure is the same 401, so a caller cannot
/// tell which credential was wrong.
struct PublisherAuthMiddleware: RouterMiddleware {
    typealias Context = TollgateRequestContext

    let authenticator: PublisherAuthenticator
    let rateLimiter: RateLimiter

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let token = request.headers[.publisherToken], !token.isEmpty,
            let basic = Credentials.basic(request.headers[.authorization]),
            let publisher = try await self.authenticator.authenticate(token: token, username: basic.username, password: basic.password)
        else { throw APIError.unauthorized }
        if let wait = try await self.rateLimit(publisher, context: context) {
            throw APIError(.tooManyRequests, code: "rate_limited", "too many requests for this publisher; retry later", retryAfter: wait)
        }
        var context = context
        context.publisher = publisher
        context.logger[metadataKey: "publisher"] = "\(publisher.id.uuidString.lowercased())"
        return try await next(request, context)
    }
}

extension PublisherAuthMiddleware {
    /// The wait before the publisher's next request, or `nil` to let it through. The limit fails open while
    /// Redis is away: it protects capacity, it decides nothing, and the route itself answers 503 if it
    /// needs Redis (bad input still gets its 4xx).
    func rateLimit(_ publisher: Publisher, context: Context) async throws -> Int? {
        do {
            return try await self.rateLimiter.take(publisherId: publisher.id)
        } catch let error as RedisError where error.isUnavailable {
            context.logger.debug("rate limit skipped: Redis unavailable")
            return nil
        }
    }
}

extension HTTPField.Name {
    /// `X-Publisher-Token`.
    static let publisherToken = HTTPField.Name("X-Publisher-Token")!
}
