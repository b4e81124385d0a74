import Hummingbird
import Synchronization

/// Answers a request that matched no route with CONTRACT.md's JSON error: 405 `method_not_allowed` with
/// `Allow` when its path is a route's under other methods (RFC 9110), else 404 `not_found`.
///
/// Add it before the routes, then hand it the finished router with ``learnRoutes(of:excludingPathsWithPrefix:)``.
/// The router is expected to generate `HEAD` endpoints for its `GET` routes.
public final class UnmatchedRouteMiddleware<Context: RequestContext>: RouterMiddleware, Sendable {
    private let routes = Mutex<[(path: RouterPath, method: HTTPRequest.Method)]>([])

    public init() {}

    /// Takes the routes of the finished router; paths starting with `hiddenPrefix` (routes that must look
    /// absent, such as a disabled admin API) stay 404 under any method.
    public func learnRoutes(of router: Router<Context>, excludingPathsWithPrefix hiddenPrefix: String? = nil) {
        let routes = router.routes
            .filter { route in hiddenPrefix.map { !route.path.description.hasPrefix($0) } ?? true }
            .map { (path: $0.path, method: $0.method) }
        self.routes.withLock { $0 = routes }
    }

    /// The methods the routes matching `path` answer, sorted; empty when no route matches it. `HEAD` comes
    /// with `GET`: the router answers it wherever `GET` works (`RouterOptions.autoGenerateHeadEndpoints`).
    public func allowedMethods(for path: String) -> [String] {
        let segments = path.split(separator: "/", omittingEmptySubsequences: true)
        var methods = Set(self.routes.withLock { routes in
            routes.filter { route in
                route.path.components.count == segments.count && zip(route.path.components, segments).allSatisfy { $0 ~= $1 }
            }.map(\.method)
        })
        if methods.contains(.get) { methods.insert(.head) }
        return methods.map(\.rawValue).sorted()
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound && context.endpointPath == "NotFound" {
            // The router's own "no route": it names the endpoint so.
            let allowed = self.allowedMethods(for: request.uri.path)
            guard !allowed.isEmpty else {
                return JSONBody.error(.notFound, code: "not_found", "no such resource")
            }
            return JSONBody.error(
                .methodNotAllowed, code: "method_not_allowed", "\(request.method.rawValue) is not allowed here; allowed: \(allowed.joined(separator: ", "))",
                headers: [.allow: allowed.joined(separator: ", ")]
            )
        }
    }
}
