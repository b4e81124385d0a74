import Foundation
import Hummingbird
import Shared

/// `POST /v1/customer-tokens`: a publisher obtains a short-lived token for one of its customers, to hand to
/// the customer's app.
struct CustomerTokenController {
    let services: APIServices

    func register(on group: RouterGroup<TollgateRequestContext>) {
        group.post("/v1/customer-tokens", use: self.issue)
    }

    struct Issued: Encodable {
        let customerToken: String
        let expiresAt: Int
    }

    @Sendable func issue(_ request: Request, context: TollgateRequestContext) async throws -> Response {
        let publisher = try context.requirePublisher()
        guard let tokens = self.services.authenticator.customerTokens else {
            throw APIError(.notFound, code: "customer_tokens_disabled", "customer tokens are not enabled on this server (TOLLGATE_TOKEN_SECRET is unset)")
        }
        // PublisherAuthMiddleware let the request in by this token (and Basic): the customer token records it.
        guard let publisherToken = request.headers[.publisherToken] else { throw APIError.unauthorized }
        let json = try await JSONObject.read(request)
        let email = try FieldRules.email(json.requiredString("customerEmail"))
        let (token, expiresAt) = try await tokens.issue(
            publisherId: publisher.id, customerEmail: email,
            credentials: PublisherCredentials.fingerprint(tokenHash: PublisherCredentials.hash(publisherToken))
        )
        return JSONBody.response(.ok, Issued(customerToken: token, expiresAt: Int(expiresAt.timeIntervalSince1970)))
    }
}
