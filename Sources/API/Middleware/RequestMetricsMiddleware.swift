import Hummingbird
import Metrics
import Shared

/// `tollgate_http_requests_total{route,method,status}` and `tollgate_http_request_duration_seconds{route,method}`.
///
/// `route` is the matched route's pattern (`/v1/receipts/{jobId}`), never the raw path, so ids and emails
/// neither multiply the series nor reach the metrics; requests that match no route count as `unmatched`.
struct RequestMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let started = ContinuousClock.now
        let method = request.method.rawValue
        do {
            let response = try await next(request, context)
            Self.record(context: context, method: method, status: Int(response.status.code), started: started)
            return response
        } catch {
            let status = (error as? any HTTPResponseError)?.status.code ?? 500
            Self.record(context: context, method: method, status: Int(status), started: started)
            throw error
        }
    }

    static func record(context: Context, method: String, status: Int, started: ContinuousClock.Instant) {
        // Hummingbird names the path of a request no route matched "NotFound".
        let route = context.endpointPath.flatMap { $0 == "NotFound" ? nil : $0 } ?? "unmatched"
        MetricHandles.counter("tollgate_http_requests_total", [("route", route), ("method", method), ("status", String(status))]).increment()
        MetricHandles.timer("tollgate_http_request_duration_seconds", [("route", route), ("method", method)])
            .record(duration: ContinuousClock.now - started)
    }
}
