import HTTPTypes
import Hummingbird
import Logging
import Shared

/// Authenticates a publisher by both of its credentials: `X-Publisher-Token` and HTTP Basic, then takes
/// one token of its rate limit (429 with `Retry-After` when the bucket is empty).
///
/// The token's hash finds the publisher (in memory, ``PublisherDirectory``); the Basic password's hash is
/// compared in constant time. Any failure is the same 401, so a caller cannot tell which credential was wrong.
///
/// Where ``acceptsCustomerTokens`` is set (the access status), an app may instead present
/// `Authorization: Bearer <customerToken>`: the request then acts for the token's publisher and may only
/// ask about the token's customer. A customer token sent along with another publisher's
/// `X-Publisher-Token` is refused. Such an app request is not a publisher route's: it takes nothing from
/// the publisher's rate limit, so one app polling hard cannot lock its publisher out.
struct PublisherAuthMiddleware: RouterMiddleware {
    typealias Context = TollgateRequestContext

    let authenticator: PublisherAuthenticator
    let rateLimiter: RateLimiter
    var acceptsCustomerTokens = false

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        let authorization = request.headers[.authorization]
        let publisher: Publisher
        if self.acceptsCustomerTokens, let bearer = Credentials.bearer(authorization) {
            guard let (tokenPublisher, identity) = try await self.authenticator.authenticate(customerToken: bearer) else {
                throw APIError.unauthorizedCustomer
            }
            if let token = request.headers[.publisherToken] {
                guard try await self.authenticator.publisher(token: token)?.id == tokenPublisher.id else { throw APIError.unauthorizedCustomer }
            }
            publisher = tokenPublisher
            context.customerEmail = identity.customerEmail
        } else {
            guard let token = request.headers[.publisherToken], !token.isEmpty, let basic = Credentials.basic(authorization),
                let found = try await self.authenticator.authenticate(token: token, username: basic.username, password: basic.password)
            else { throw APIError.unauthorized }
            try await self.rateLimiter.admit(found, logger: context.logger)
            publisher = found
        }
        context.publisher = publisher
        context.logger[metadataKey: "publisher"] = .string(publisher.id.lowercasedString)
        return try await next(request, context)
    }
}

extension RateLimiter {
    /// Takes one token of the publisher's bucket, or throws 429 with the wait in `Retry-After`.
    ///
    /// The limit fails open while Redis is away: it protects capacity, it decides nothing, and the route
    /// itself answers 503 if it needs Redis (bad input still gets its 4xx).
    func admit(_ publisher: Publisher, logger: Logger) async throws {
        let wait: Int?
        do {
            wait = try await self.take(publisherId: publisher.id)
        } catch let error as RedisError where error.isUnavailable {
            logger.debug("rate limit skipped: Redis unavailable")
            return
        }
        if let wait {
            throw APIError(.tooManyRequests, code: "rate_limited", "too many requests for this publisher; retry later", retryAfter: wait)
        }
    }
}

extension HTTPField.Name {
    /// `X-Publisher-Token`.
    static let publisherToken = HTTPField.Name("X-Publisher-Token")!
}
