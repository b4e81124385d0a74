import Hummingbird

/// Answers every `HEAD` request without a body (RFC 9110): the status and headers it would have with `GET`
/// or, for an error, the error's. The router's generated `HEAD` endpoints already drop the body of what
/// their route's whole chain answers (errors included); this covers what no route answers, the 404 or 405
/// and its JSON, which would otherwise go out whole, and a client that reads no body after a `HEAD` would
/// take it for the start of the next answer on the connection.
///
/// Add it first, outside every middleware that can answer on its own.
public struct HeadRequestMiddleware<Context: RequestContext>: RouterMiddleware {
    public init() {}

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let response = try await next(request, context)
        return request.method == .head ? response.createHeadResponse() : response
    }
}
