import Hummingbird
import Shared

/// An error answered to the client as CONTRACT.md's JSON: `{"message","code","field"?}`.
struct APIError: Error, HTTPResponseError {
    let status: HTTPResponse.Status
    let code: String
    let message: String
    let field: String?
    var retryAfter: Int?
    /// `WWW-Authenticate` of a 401: the scheme the route takes (RFC 9110 requires one on every 401).
    var challenge: String?

    init(_ status: HTTPResponse.Status, code: String, _ message: String, field: String? = nil, retryAfter: Int? = nil, challenge: String? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retryAfter = retryAfter
        self.challenge = challenge
    }

    struct Body: Encodable {
        let message: String
        let code: String
        let field: String?
    }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        self.response
    }

    var response: Response {
        var headers: HTTPFields = [:]
        if let retryAfter { headers[.retryAfter] = String(retryAfter) }
        if let challenge { headers[.wwwAuthenticate] = challenge }
        return JSONBody.response(self.status, Body(message: self.message, code: self.code, field: self.field), headers: headers)
    }

    static func missingField(_ field: String) -> APIError {
        APIError(.badRequest, code: "missing_field", "\(field) is required", field: field)
    }

    static func invalidType(_ field: String, expected: String) -> APIError {
        APIError(.badRequest, code: "invalid_type", "\(field) must be \(expected)", field: field)
    }

    static func invalid(_ field: String, code: String, _ message: String) -> APIError {
        APIError(.unprocessableContent, code: code, message, field: field)
    }

    /// A publisher route's credentials (`X-Publisher-Token` with HTTP Basic) missing or wrong.
    static let unauthorized = APIError(.unauthorized, code: "unauthorized", "missing or wrong credentials", challenge: #"Basic realm="tollgate""#)
    /// The admin token missing or wrong.
    static let unauthorizedAdmin = APIError(.unauthorized, code: "unauthorized", "missing or wrong credentials", challenge: #"Bearer realm="tollgate-admin""#)
    /// A customer token (an app's credential) missing or wrong.
    static let unauthorizedCustomer = APIError(.unauthorized, code: "unauthorized", "missing or wrong credentials", challenge: #"Bearer realm="tollgate""#)
    static let notFound = APIError(.notFound, code: "not_found", "no such resource")
    /// A request the shutdown cut off before it wrote anything.
    static let shuttingDown = APIError(.serviceUnavailable, code: "shutting_down", "the server is shutting down; try again shortly", retryAfter: 5)
    static func unavailable(_ what: String) -> APIError {
        APIError(.serviceUnavailable, code: "dependency_unavailable", "\(what) is unavailable; try again shortly", retryAfter: 5)
    }
    /// PostgreSQL was lost after a change went out and before it confirmed it (``PostgresError/outcomeUnknown``):
    /// unlike every other refusal, the change may have been made.
    static let outcomeUnknown = APIError(
        .serviceUnavailable, code: "outcome_unknown",
        "the database did not confirm the change; it may have been made", retryAfter: 5
    )
}
