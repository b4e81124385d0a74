import Foundation
import Shared
import Testing

@Suite("ReceiptJob: the payload the API writes and the worker reads")
struct ReceiptJobTests {
    @Test("the hand-written JSON decodes to the same job, with and without optional fields, whatever the characters")
    func jsonRoundTrip() throws {
        let jobs = [
            ReceiptJob(
                jobId: ReceiptJob.newJobId(), publisherId: UUID(), customerEmail: "a+b@example.com", offerId: "S\"1\\x\u{2028}é",
                transactionId: "1000000123", receiptData: "eyJh/+==", appType: .tvos, ipAddress: "2001:db8::1",
                acceptedAtMilliseconds: 1_790_000_000_123
            ),
            ReceiptJob(
                jobId: "j", publisherId: UUID(), customerEmail: "c@d.io", offerId: "tab\there\u{01}", transactionId: nil,
                receiptData: "QQ==", appType: .ios, ipAddress: nil, acceptedAtMilliseconds: 0
            ),
        ]
        for job in jobs {
            let decoded = try JSONDecoder().decode(ReceiptJob.self, from: Data(job.json.utf8))
            #expect(decoded == job)
        }
    }

    @Test("job ids are lower-case version 4 UUIDs, all different")
    func jobIds() {
        let ids = (0..<1_000).map { _ in ReceiptJob.newJobId() }
        #expect(Set(ids).count == ids.count)
        for id in ids {
            let parsed = UUID(uuidString: id)
            #expect(parsed != nil)
            #expect(id == id.lowercased())
            #expect(id.count == 36)
            let bytes = parsed.map { withUnsafeBytes(of: $0.uuid, Array.init) } ?? []
            #expect(bytes.count == 16 && bytes[6] >> 4 == 4 && bytes[8] >> 6 == 2)
        }
    }
}
