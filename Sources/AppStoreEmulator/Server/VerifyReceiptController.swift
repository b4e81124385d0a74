import Foundation
import Hummingbird

/// The two verifyReceipt routes: `POST /verifyReceipt` (production) and `POST /sandbox/verifyReceipt`.
struct VerifyReceiptController: Sendable {
    /// Large enough for any real receipt (Apple's run to a few hundred KiB for apps with long histories).
    static let maxBodySize = 8 * 1024 * 1024

    let state: EmulatorState
    let verifier = ReceiptVerifier()

    /// Registers both routes on `router`. A `GET` (a client that followed a redirect as browsers do) gets
    /// Apple's answer to it: HTTP 200 with status 21000, "not made using the HTTP POST request method".
    func addRoutes<Context: RequestContext>(to router: Router<Context>) {
        for endpoint in [AppleEnvironment.production, .sandbox] {
            router.post(RouterPath(endpoint.path)) { request, _ in
                try await self.verify(request, endpoint: endpoint)
            }
            router.get(RouterPath(endpoint.path)) { _, _ in
                try JSONAnswer.response(AppleVerifyReceiptResponse.status(21000))
            }
        }
    }

    /// Answers one call as Apple's `endpoint` environment would, after the configured faults.
    ///
    /// Global latency and fault injection come first, because they stand for Apple or the network failing
    /// whatever the receipt; a scenario's own latency and scripted failures come once its receipt is read.
    /// The target of an injected redirect (`?moved=1`) answers normally: the call it stands for failed already.
    func verify(_ request: Request, endpoint: AppleEnvironment) async throws -> Response {
        var request = request
        // Read the body even when a failure is injected, so the connection stays reusable.
        let body = try await request.collectBody(upTo: Self.maxBodySize)
        let admitted = ContinuousClock.now
        let latencyMs = await state.admit(endpoint)
        // Latency, like a `timeout` hold, ends early on a stop signal: a graceful shutdown waits for the
        // calls in flight, and an operator may have set minutes of it. Lowered meanwhile, it ends sooner.
        if latencyMs > 0 {
            try await state.holdLatency(milliseconds: latencyMs, admitted: admitted)
        }
        let moved = request.uri.queryParameters["moved"] == "1"
        let admission = await state.draw(faults: !moved)
        let verifyRequest = VerifyReceiptRequest.decode(from: body)
        if let verifyRequest {
            // Counted whatever the answer: what the client sent is the point.
            await state.recordRequest(
                withPassword: verifyRequest.password != nil, excludeOldTransactions: verifyRequest.excludeOldTransactions == true
            )
        }
        if let failure = admission.injectedFailure {
            return try await FaultResponder.response(for: failure, endpoint: endpoint, holdMs: admission.timeoutHoldMs, retryableKey: .hyphen, state: state)
        }
        guard let verifyRequest else {
            return try JSONAnswer.response(AppleVerifyReceiptResponse.status(21000))
        }
        guard let scenario = Scenario.decode(receiptData: verifyRequest.receiptData) else {
            return try JSONAnswer.response(AppleVerifyReceiptResponse.status(21002))
        }
        if scenario.latencyMs > 0 {
            try await state.hold(milliseconds: scenario.latencyMs)
        }
        if !moved, let fail = scenario.fail, fail.count > 0,
            await state.consumeScenarioFailure(receiptData: verifyRequest.receiptData, count: fail.count) {
            return try await FaultResponder.response(for: fail.mode, endpoint: endpoint, holdMs: admission.timeoutHoldMs, retryableKey: scenario.retryableKey, state: state)
        }

        let nowMs = Int64((Date().timeIntervalSince1970 * 1000).rounded(.down))
        let answer = verifier.answer(scenario: scenario, request: verifyRequest, endpoint: endpoint, nowMs: nowMs)
        return try JSONAnswer.response(answer, millisecondsAsNumbers: scenario.millisecondsAsNumbers)
    }
}
