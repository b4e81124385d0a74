/// Apple's decoded `receipt` object, with Apple's literal field names.
///
/// The identifiers Apple sends as JSON numbers (`adam_id`, `app_item_id`, `download_id`,
/// `version_external_identifier`) stay numbers; everything else is a string, as in Apple's answers.
struct AppleReceipt: Encodable, Sendable {
    var receiptType: String
    var adamId: Int64 = 0
    var appItemId: Int64 = 0
    var bundleId: String
    var applicationVersion: String
    var downloadId: Int64 = 0
    var versionExternalIdentifier: Int64 = 0
    var receiptCreationDate: String
    var receiptCreationDateMs: String
    var receiptCreationDatePst: String
    var requestDate: String
    var requestDateMs: String
    var requestDatePst: String
    var originalPurchaseDate: String
    var originalPurchaseDateMs: String
    var originalPurchaseDatePst: String
    var originalApplicationVersion: String
    var inApp: [AppleInAppTransaction]

    private enum CodingKeys: String, CodingKey {
        case receiptType = "receipt_type"
        case adamId = "adam_id"
        case appItemId = "app_item_id"
        case bundleId = "bundle_id"
        case applicationVersion = "application_version"
        case downloadId = "download_id"
        case versionExternalIdentifier = "version_external_identifier"
        case receiptCreationDate = "receipt_creation_date"
        case receiptCreationDateMs = "receipt_creation_date_ms"
        case receiptCreationDatePst = "receipt_creation_date_pst"
        case requestDate = "request_date"
        case requestDateMs = "request_date_ms"
        case requestDatePst = "request_date_pst"
        case originalPurchaseDate = "original_purchase_date"
        case originalPurchaseDateMs = "original_purchase_date_ms"
        case originalPurchaseDatePst = "original_purchase_date_pst"
        case originalApplicationVersion = "original_application_version"
        case inApp = "in_app"
    }

    /// Apple's rendering of a scenario's receipt at request time `nowMs`.
    init(_ scenario: Scenario, inApp: [AppleInAppTransaction], nowMs: Int64) {
        let creationMs = scenario.receiptCreationDateMs ?? nowMs
        let earliestPurchaseMs = scenario.inApp.map { $0.purchaseDateMs ?? nowMs }.min()
        let originalMs = scenario.originalPurchaseDateMs ?? earliestPurchaseMs ?? nowMs
        receiptType = scenario.environment.receiptType
        bundleId = scenario.bundleId
        applicationVersion = scenario.applicationVersion
        receiptCreationDate = AppleDateFormatter.gmt(milliseconds: creationMs)
        receiptCreationDateMs = String(creationMs)
        receiptCreationDatePst = AppleDateFormatter.pacificTime(milliseconds: creationMs)
        requestDate = AppleDateFormatter.gmt(milliseconds: nowMs)
        requestDateMs = String(nowMs)
        requestDatePst = AppleDateFormatter.pacificTime(milliseconds: nowMs)
        originalPurchaseDate = AppleDateFormatter.gmt(milliseconds: originalMs)
        originalPurchaseDateMs = String(originalMs)
        originalPurchaseDatePst = AppleDateFormatter.pacificTime(milliseconds: originalMs)
        originalApplicationVersion = scenario.originalApplicationVersion
        self.inApp = inApp
    }
}
