import AsyncHTTPClient
import Foundation
import NIOCore
@testable import Shared
import TestSupport

/// An `appstore-emulator` of its own, started with `arguments` (a fail mode, a hold), and clients of the
/// worker's (as `makeHTTPClient` configures them) over it.
struct EmulatedApple {
    /// The emulator's base URL.
    let base: String
    let http: HTTPClient
    let timeoutMilliseconds: Int

    /// A verifyReceipt client of the emulator with its own answer budget.
    func client(answerBudgetBytes: Int = 128 << 20) -> VerifyReceiptClient {
        VerifyReceiptClient(
            http: self.http, productionURL: "\(self.base)/verifyReceipt", sandboxURL: "\(self.base)/sandbox/verifyReceipt",
            timeoutMilliseconds: self.timeoutMilliseconds, answerBudgetBytes: answerBudgetBytes
        )
    }

    /// The size in bytes of the emulator's production answer to `receipt`, read with a plain client.
    func answerSize(receipt: String) async throws -> Int {
        var request = HTTPClientRequest(url: "\(self.base)/verifyReceipt")
        request.method = .POST
        request.body = .bytes(ByteBuffer(bytes: VerifyReceiptClient.requestBody(receiptData: receipt, password: nil, excludeOldTransactions: false)))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        return try await response.body.collect(upTo: 1 << 20).readableBytes
    }

    static func with<T>(_ arguments: [String] = [], timeoutMilliseconds: Int = 30_000, _ body: (EmulatedApple) async throws -> T) async throws -> T {
        let emulator = try ManagedProcess(
            executable: "appstore-emulator", arguments: ["--port", "0"] + arguments, environment: [:],
            portFileVariable: "APPSTORE_EMULATOR_PORT_FILE"
        )
        let configuration = try Configuration(environment: ["TOLLGATE_APPLE_TIMEOUT_MS": String(timeoutMilliseconds)])
        let http = VerifyReceiptClient.makeHTTPClient(configuration: configuration)
        do {
            let apple = EmulatedApple(
                base: "http://127.0.0.1:\(try await emulator.port())", http: http, timeoutMilliseconds: configuration.appleTimeoutMilliseconds
            )
            let result = try await body(apple)
            try await http.shutdown()
            await emulator.stop()
            return result
        } catch {
            try? await http.shutdown()
            await emulator.stop()
            throw error
        }
    }

    /// A receipt of `purchases` consumables, each a transaction of its own.
    static func receipt(purchases: Int = 1) -> String {
        ScenarioReceipt.make(
            bundleId: "com.example.emulated", purchases: (0..<purchases).map { _ in
                ScenarioReceipt.Purchase(productId: "coins100", transactionId: ScenarioReceipt.transactionId(), purchaseDateMs: 1_700_000_000_000)
            }
        )
    }

    /// One production call of `client`.
    static func verify(_ client: VerifyReceiptClient, receipt: String = Self.receipt()) async -> AppleVerdict {
        await client.verify(receiptData: receipt, password: nil, excludeOldTransactions: false, environment: .production)
    }
}
