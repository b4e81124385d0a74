import Hummingbird
import Shared

/// Guards `/admin/v1/*` with `Authorization: Bearer <TOLLGATE_ADMIN_TOKEN>`; without a configured token
/// the admin routes do not exist (404), so an unset variable never opens them.
struct AdminAuthMiddleware<Context: RequestContext>: RouterMiddleware {
    let tokenHash: [UInt8]?

    init(token: String?) {
        self.tokenHash = token.map(PublisherCredentials.hash)
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let tokenHash else { throw APIError.notFound }
        guard let presented = Credentials.bearer(request.headers[.authorization]),
            PublisherCredentials.constantTimeEquals(PublisherCredentials.hash(presented), tokenHash)
        else { throw APIError.unauthorizedAdmin }
        return try await next(request, context)
    }
}
