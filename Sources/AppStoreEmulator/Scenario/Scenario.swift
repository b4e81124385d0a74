import Foundation

/// What a test receipt asks the emulator to answer.
///
/// A scenario travels as the request's `receipt-data`: standard base64 of UTF-8 JSON. Only `bundleId` is
/// required; `docs/emulator.md` documents every field. A scenario that cannot be read answers status
/// 21002, as Apple does for a receipt it cannot parse.
struct Scenario: Decodable, Equatable, Sendable {
    var bundleId: String
    /// The environment the receipt belongs to; defaults to production.
    var environment: AppleEnvironment = .production
    /// A forced Apple status; the answer then carries only the status (and the full receipt for 21006).
    var status: Int?
    /// The retry flag for statuses 21100–21199; defaults to `true` in that range.
    var isRetryable: Bool?
    /// The spelling of the retry flag.
    var retryableKey: RetryableKey = .hyphen
    /// When set, the request's `password` must equal it, else status 21004.
    var sharedSecret: String?
    /// Extra delay for this receipt, in milliseconds.
    var latencyMs: Int = 0
    /// A transient failure for the first calls carrying this receipt.
    var fail: ScenarioFailure?
    var inApp: [ScenarioTransaction] = []
    /// When absent, every `inApp` entry if one has an expiry date (Apple's answer for a subscriber), else none.
    var latestReceiptInfo: [ScenarioTransaction]?
    var pendingRenewalInfo: [ScenarioPendingRenewal]?
    var applicationVersion: String = "1"
    var originalApplicationVersion: String = "1.0"
    /// Defaults to the time of the request.
    var receiptCreationDateMs: Int64?
    /// The app's first download; defaults to the earliest purchase, or the time of the request.
    var originalPurchaseDateMs: Int64?
    /// Every `…_ms` of the answer as a JSON number rather than a string of digits: the other spelling a
    /// verifyReceipt client meets (older answers), which it must read the same.
    var millisecondsAsNumbers = false

    private enum CodingKeys: String, CodingKey {
        case bundleId, environment, status, isRetryable, retryableKey, sharedSecret, latencyMs, fail
        case inApp, latestReceiptInfo, pendingRenewalInfo, applicationVersion, originalApplicationVersion
        case receiptCreationDateMs, originalPurchaseDateMs, millisecondsAsNumbers
    }

    /// Builds a scenario in code, as tests do.
    init(bundleId: String, environment: AppleEnvironment = .production, inApp: [ScenarioTransaction] = []) {
        self.bundleId = bundleId
        self.environment = environment
        self.inApp = inApp
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        bundleId = try container.decode(String.self, forKey: .bundleId)
        if let environment = try container.decodeIfPresent(String.self, forKey: .environment) {
            // Accept any capitalisation: "sandbox" in a hand-written fixture means what it says.
            switch environment.lowercased() {
            case "production": self.environment = .production
            case "sandbox": self.environment = .sandbox
            default:
                throw DecodingError.dataCorruptedError(forKey: .environment, in: container, debugDescription: "expected Production or Sandbox")
            }
        }
        status = try container.decodeLenientIntIfPresent(forKey: .status)
        isRetryable = try container.decodeLenientBoolIfPresent(forKey: .isRetryable)
        retryableKey = try container.decodeIfPresent(RetryableKey.self, forKey: .retryableKey) ?? .hyphen
        sharedSecret = try container.decodeIfPresent(String.self, forKey: .sharedSecret)
        latencyMs = try container.decodeLenientIntIfPresent(forKey: .latencyMs) ?? 0
        guard FaultSettings.isValidDuration(latencyMs) else {
            throw DecodingError.dataCorruptedError(forKey: .latencyMs, in: container, debugDescription: "latencyMs out of range")
        }
        fail = try container.decodeIfPresent(ScenarioFailure.self, forKey: .fail)
        inApp = try container.decodeIfPresent([ScenarioTransaction].self, forKey: .inApp) ?? []
        latestReceiptInfo = try container.decodeIfPresent([ScenarioTransaction].self, forKey: .latestReceiptInfo)
        pendingRenewalInfo = try container.decodeIfPresent([ScenarioPendingRenewal].self, forKey: .pendingRenewalInfo)
        applicationVersion = try container.decodeLenientStringIfPresent(forKey: .applicationVersion) ?? "1"
        originalApplicationVersion = try container.decodeLenientStringIfPresent(forKey: .originalApplicationVersion) ?? "1.0"
        receiptCreationDateMs = try container.decodeLenientInt64IfPresent(forKey: .receiptCreationDateMs)
        originalPurchaseDateMs = try container.decodeLenientInt64IfPresent(forKey: .originalPurchaseDateMs)
        millisecondsAsNumbers = try container.decodeLenientBoolIfPresent(forKey: .millisecondsAsNumbers) ?? false
    }

    /// Reads a scenario from a request's `receipt-data`, or `nil` when it is not standard base64 of a
    /// JSON object with the scenario's shape (the caller answers 21002).
    static func decode(receiptData: String) -> Scenario? {
        guard !receiptData.isEmpty, let json = Data(base64Encoded: receiptData) else { return nil }
        return try? JSONDecoder().decode(Scenario.self, from: json)
    }
}
