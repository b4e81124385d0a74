/// Decides Apple's answer for a scenario, the way Apple's verifyReceipt orders its checks.
///
/// Pure: it reads no state and no clock, so the answer logic is testable without a server. Transient
/// failures (global and per scenario) are decided before, by the controller.
struct ReceiptVerifier: Sendable {
    /// Apple's answer to `request`, which carries `scenario`, posted to the `endpoint` environment's route at `nowMs`.
    ///
    /// Order: wrong environment (21007/21008), then the shared secret (21004), then a forced status,
    /// then the full receipt. A forced 21006 keeps the full receipt, as Apple's expired-subscription answer does;
    /// a forced 21007 or 21008 is only its status, as the wrong environment's.
    func answer(
        scenario: Scenario,
        request: VerifyReceiptRequest,
        endpoint: AppleEnvironment,
        nowMs: Int64
    ) -> AppleVerifyReceiptResponse {
        guard scenario.environment == endpoint else {
            return .status(scenario.environment.wrongEndpointStatus)
        }
        if let sharedSecret = scenario.sharedSecret, request.password != sharedSecret {
            return AppleVerifyReceiptResponse(status: 21004, environment: scenario.environment)
        }
        if let status = scenario.status, status != 0 {
            // Apple's "wrong environment" answers carry nothing else, whoever asks for them.
            if [AppleEnvironment.production, .sandbox].map(\.wrongEndpointStatus).contains(status) {
                return .status(status)
            }
            var answer = AppleVerifyReceiptResponse(status: status, environment: scenario.environment)
            if let isRetryable = scenario.isRetryable {
                answer.isRetryable = isRetryable
            } else if (21100...21199).contains(status) {
                answer.isRetryable = true
            }
            answer.retryableKey = scenario.retryableKey
            if status == 21006 {
                fillReceipt(of: &answer, scenario: scenario, request: request, nowMs: nowMs)
            }
            return answer
        }
        var answer = AppleVerifyReceiptResponse(status: 0, environment: scenario.environment)
        fillReceipt(of: &answer, scenario: scenario, request: request, nowMs: nowMs)
        return answer
    }

    private func fillReceipt(
        of answer: inout AppleVerifyReceiptResponse,
        scenario: Scenario,
        request: VerifyReceiptRequest,
        nowMs: Int64
    ) {
        let inApp = scenario.inApp.map { AppleInAppTransaction($0, nowMs: nowMs) }
        answer.receipt = AppleReceipt(scenario, inApp: inApp, nowMs: nowMs)

        // Apple returns latest_receipt_info only for a receipt that holds an auto-renewable subscription,
        // and then lists every transaction of the receipt in it, not only the subscription's.
        let holdsSubscription = scenario.inApp.contains { $0.expiresDateMs != nil }
        var latest = scenario.latestReceiptInfo ?? (holdsSubscription ? scenario.inApp : [])
        if request.excludeOldTransactions == true {
            latest = Self.newestPerOriginalTransaction(latest, nowMs: nowMs)
        }
        if !latest.isEmpty {
            answer.latestReceiptInfo = latest.map { AppleInAppTransaction($0, nowMs: nowMs) }
            answer.latestReceipt = request.receiptData
        }
        if let renewals = scenario.pendingRenewalInfo {
            answer.pendingRenewalInfo = renewals.map(ApplePendingRenewalInfo.init)
        }
    }

    /// Keeps, for each original transaction, only the entry with the latest purchase date (the first of
    /// equals), in the order the scenario lists them.
    static func newestPerOriginalTransaction(_ entries: [ScenarioTransaction], nowMs: Int64) -> [ScenarioTransaction] {
        var newestIndex: [String: Int] = [:]
        for (index, entry) in entries.enumerated() {
            let key = entry.originalTransactionId ?? entry.transactionId
            if let kept = newestIndex[key] {
                let keptDate = entries[kept].purchaseDateMs ?? nowMs
                if (entry.purchaseDateMs ?? nowMs) > keptDate {
                    newestIndex[key] = index
                }
            } else {
                newestIndex[key] = index
            }
        }
        let keep = Set(newestIndex.values)
        return entries.indices.filter(keep.contains).map { entries[$0] }
    }
}
