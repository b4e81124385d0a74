import Foundation
import Shared
import Testing
import TestSupport

/// Issue #5, transport: calls to Apple verify TLS certificates. A real TLS server (`openssl s_server`)
/// with a self-signed certificate for 127.0.0.1 must be refused by the worker's own HTTP client, as
/// configured from the environment, and the answer classified as a retry, never trusted.
@Suite("TLS verification")
struct TLSVerificationTests {
    @Test("a self-signed certificate is refused: the call is a transport failure, retried, never an answer")
    func selfSignedRefused() async throws {
        let certificate = try await SelfSignedCertificate(purpose: "tls")
        let port = try DedicatedRedis.freePort()
        let server = try ManagedProcess(
            executable: "/usr/bin/openssl",
            arguments: ["s_server", "-accept", "127.0.0.1:\(port)", "-cert", certificate.certificatePath, "-key", certificate.keyPath, "-www", "-quiet"],
            environment: [:], portFileVariable: nil
        )
        do {
            _ = try await Poll.until(timeout: .seconds(10), "openssl s_server listening") { DedicatedRedis.accepts(port: port) ? true : nil }
            let configuration = try Configuration(environment: [
                "TOLLGATE_APPLE_PRODUCTION_URL": "https://127.0.0.1:\(port)/verifyReceipt",
                "TOLLGATE_APPLE_SANDBOX_URL": "https://127.0.0.1:\(port)/sandbox/verifyReceipt",
                "TOLLGATE_APPLE_TIMEOUT_MS": "30000",  // the handshake fails at once; a timeout would hide why
            ])
            let http = VerifyReceiptClient.makeHTTPClient(configuration: configuration)
            let client = VerifyReceiptClient(
                http: http, productionURL: configuration.appleProductionURL, sandboxURL: configuration.appleSandboxURL,
                timeoutMilliseconds: configuration.appleTimeoutMilliseconds
            )
            let verdict = await client.verify(receiptData: "YQ==", password: nil, excludeOldTransactions: false, environment: .production)
            try await http.shutdown()
            guard case .retry(let detail, _, _) = verdict else {
                Issue.record("expected a transport failure, got \(verdict)")
                await server.stop()
                return
            }
            #expect(detail.lowercased().contains("certificate") || detail.lowercased().contains("ssl") || detail.lowercased().contains("tls"), "\(detail)")
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }
}
