import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import Shared

/// Turns every error into CONTRACT.md's JSON error; a dependency that is down is a 503 with
/// `Retry-After` (`outcome_unknown` when PostgreSQL was lost after a change went out), and only a real fault
/// is a 500. Logs name the error's type, never request data.
struct ErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    /// Tells a schema older than the binary (503 until `migrate` has run) from a statement's defect (500).
    let schema: SchemaCheck

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as APIError {
            return error.response
        } catch let error as RedisError where error.isAccessRefused {
            // Not an outage: a password, user, database or ACL changed under a running process.
            context.logger.error("Redis refused Tollgate's access: check TOLLGATE_REDIS_URL and its user's ACL", metadata: ["error": "\(error)"])
            return APIError.unavailable("the queue").response
        } catch let error as RedisError where error.isUnavailable {
            context.logger.warning("Redis unavailable", metadata: ["error": "\(error)"])
            return APIError.unavailable("the queue").response
        } catch let error as PostgresError where error.isSchemaBehind {
            guard let missing = try? await self.schema.missing(), !missing.isEmpty else { return Self.fault(error, context: context) }
            context.logger.error("the database schema is older than this binary: run `tollgate-api migrate`", metadata: ["error": "\(error)"])
            return APIError.unavailable("the database").response
        } catch let error as PostgresError where error.outcomeUnknown {
            // Not "nothing was written": the change may have committed, so sending it again blindly could make it twice.
            context.logger.warning("PostgreSQL was lost before it confirmed a change", metadata: ["error": "\(error)"])
            return APIError.outcomeUnknown.response
        } catch let error as PostgresError where error.isUnavailable {
            context.logger.warning("PostgreSQL unavailable", metadata: ["error": "\(error)"])
            return APIError.unavailable("the database").response
        } catch is HTTPParserError {
            // The body broke off: the client went away half-way, or its connection was closed for sending
            // too slowly (the idle timeout, the body deadline). The client's doing, not a fault: no error line
            // an anonymous client could fill the logs with.
            context.logger.debug("request body broke off")
            return Self.translate(.badRequest).response
        } catch is CancellationError where Task.isCancelled {
            // The shutdown's grace ran out while this request waited (for a PostgreSQL connection, the body, a
            // directory reload): not a fault. The server is closing the connection, so the answer rarely gets out.
            // Every await that honours cancellation comes before a route writes anything; a route that awaits
            // one after a write must catch it itself, or this answer would tell the client to send it again.
            context.logger.debug("request cut off by the shutdown")
            return APIError.shuttingDown.response
        } catch is NIOTooManyBytesError {
            return APIError(.contentTooLarge, code: "body_too_large", "the body is larger than 1 MiB").response
        } catch let error as any HTTPResponseError {
            return Self.translate(error.status).response
        } catch {
            return Self.fault(error, context: context)
        }
    }

    /// A real server fault: 500, and the error's type in the log.
    private static func fault(_ error: any Error, context: Context) -> Response {
        context.logger.error("request failed", metadata: ["error": "\(LoggableError.describe(error))"])
        return APIError(.internalServerError, code: "internal", "internal error").response
    }

    private static func translate(_ status: HTTPResponse.Status) -> APIError {
        switch status {
        case .notFound: APIError.notFound
        case .methodNotAllowed: APIError(.methodNotAllowed, code: "method_not_allowed", "method not allowed on this route")
        case .contentTooLarge: APIError(.contentTooLarge, code: "body_too_large", "the body is larger than 1 MiB")
        case .unauthorized: APIError.unauthorized
        case .badRequest: APIError(.badRequest, code: "bad_request", "the request is malformed")
        default: APIError(status, code: "http_\(status.code)", status.reasonPhrase)
        }
    }
}
