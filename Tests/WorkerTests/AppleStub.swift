import AsyncHTTPClient
import Hummingbird
import NIOCore
import Shared

/// A verifyReceipt on loopback whose production answer is 200 with `{"status":`, then what `rest` writes,
/// then `<status>}`; and the worker's client (as `makeHTTPClient` configures it) over it.
enum AppleStub {
    static func with<T>(
        timeoutMilliseconds: Int = 30_000, answerBudgetBytes: Int = 128 << 20, status: Int = 0,
        rest: @escaping @Sendable (inout any ResponseBodyWriter) async throws -> Void = { _ in },
        _ body: (VerifyReceiptClient) async throws -> T
    ) async throws -> T {
        let router = Router()
        router.post("verifyReceipt") { _, _ in
            Response(status: .ok, headers: [.contentType: "application/json"], body: ResponseBody { writer in
                try await writer.write(ByteBuffer(string: "{\"status\":"))
                try await rest(&writer)
                try await writer.write(ByteBuffer(string: "\(status)}"))
                try await writer.finish(nil)
            })
        }
        let server = try await LoopbackServer.start(router, label: "test.apple-stub")
        let configuration = try Configuration(environment: ["TOLLGATE_APPLE_TIMEOUT_MS": String(timeoutMilliseconds)])
        let http = VerifyReceiptClient.makeHTTPClient(configuration: configuration)
        let client = VerifyReceiptClient(
            http: http, productionURL: "\(server.base)/verifyReceipt", sandboxURL: "\(server.base)/sandbox/verifyReceipt",
            timeoutMilliseconds: configuration.appleTimeoutMilliseconds, answerBudgetBytes: answerBudgetBytes
        )
        do {
            let result = try await body(client)
            try await http.shutdown()
            await server.stop()
            return result
        } catch {
            try? await http.shutdown()
            await server.stop()
            throw error
        }
    }

    /// One production call of `client`.
    static func verify(_ client: VerifyReceiptClient) async -> AppleVerdict {
        await client.verify(receiptData: "QQ==", password: nil, excludeOldTransactions: false, environment: .production)
    }
}
