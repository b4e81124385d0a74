import Foundation
import Hummingbird
import Shared

/// `POST /api/3.0/json`: the Cleeng-style JSON-RPC call `getAccessStatus` for apps, authenticated by the
/// customer token in its parameters. It answers what `GET /v1/access-status` answers for that token.
struct JSONRPCController {
    let services: APIServices
    let access: AccessController

    init(services: APIServices) {
        self.services = services
        self.access = AccessController(services: services)
    }

    func register(on router: Router<TollgateRequestContext>) {
        router.post("/api/3.0/json", use: self.call)
    }

    struct Answer: Encodable {
        struct Result: Encodable {
            let accessGranted: Bool
            let expiresAt: Int?

            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: CodingKeys.self)
                try container.encode(self.accessGranted, forKey: .accessGranted)
                try container.encode(self.expiresAt, forKey: .expiresAt)  // null when access has no end or none is granted
            }

            enum CodingKeys: String, CodingKey { case accessGranted, expiresAt }
        }

        let result: Result
    }

    @Sendable func call(_ request: Request, context: TollgateRequestContext) async throws -> Response {
        let json = try await JSONObject.read(request)
        let method = try json.requiredString("method")
        guard method == "getAccessStatus" else {
            // Well-formed but not something this endpoint does: 422, like an unknown offer (CONTRACT.md, Errors).
            throw APIError.invalid("method", code: "unknown_method", "method must be getAccessStatus")
        }
        guard let params = try json.object("params") else { throw APIError.missingField("params") }
        let token = try params.requiredString("customerToken")
        // The token is the credential: a wrong one answers 401 whatever else the call holds.
        guard let (publisher, identity) = try await self.services.authenticator.authenticate(customerToken: token) else {
            throw APIError.unauthorizedCustomer
        }
        let offerId = try FieldRules.offerId(params.requiredString("offerId"), field: "params.offerId")
        let view = try await self.access.access(publisherId: publisher.id, customerEmail: identity.customerEmail, offerId: offerId, offerField: "params.offerId")
        return JSONBody.response(
            .ok, Answer(result: .init(accessGranted: view.accessGranted, expiresAt: view.expiresAt)),
            headers: view.pending ? [.retryAfter: "5"] : [:]
        )
    }
}
