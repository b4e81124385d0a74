import Foundation
import Shared

/// Small builders shared by the suites.
enum Fixtures {
    /// A receipt job with sensible defaults; every argument can be overridden.
    static func job(
        jobId: String = UUID().uuidString.lowercased(), publisherId: UUID = UUID(), customerEmail: String = "viewer@example.com",
        offerId: String = "offer.monthly", transactionId: String? = "1000000000000001", receiptData: String = "cmVjZWlwdA==",
        appType: AppType = .ios, ipAddress: String? = nil, acceptedAtMilliseconds: Int = WallClock.nowMilliseconds()
    ) -> ReceiptJob {
        ReceiptJob(
            jobId: jobId, publisherId: publisherId, customerEmail: customerEmail, offerId: offerId, transactionId: transactionId,
            receiptData: receiptData, appType: appType, ipAddress: ipAddress, acceptedAtMilliseconds: acceptedAtMilliseconds
        )
    }

    /// A random 16-digit App Store-like transaction id.
    static func transactionId() -> String {
        String(UInt64.random(in: 1_000_000_000_000_000...9_999_999_999_999_999))
    }

    /// A random lower-case hex suffix for names.
    static func suffix(_ bytes: Int = 6) -> String {
        Hex.encode((0..<bytes).map { _ in UInt8.random(in: 0...255) })
    }
}
