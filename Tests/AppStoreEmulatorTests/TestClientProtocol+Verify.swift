import Hummingbird
import HummingbirdTesting

extension TestClientProtocol {
    /// Posts `receiptData` to the production route, or the sandbox route when `sandbox` is true.
    func verify(
        _ receiptData: String,
        sandbox: Bool = false,
        password: String? = nil,
        excludeOldTransactions: Bool? = nil
    ) async throws -> TestResponse {
        try await execute(
            uri: sandbox ? "/sandbox/verifyReceipt" : "/verifyReceipt",
            method: .post,
            headers: [.contentType: "application/json"],
            body: try Fixtures.requestBody(receiptData: receiptData, password: password, excludeOldTransactions: excludeOldTransactions)
        )
    }

    /// Posts a raw body to the production route.
    func verifyRaw(_ body: String) async throws -> TestResponse {
        try await execute(uri: "/verifyReceipt", method: .post, body: ByteBuffer(string: body))
    }
}
