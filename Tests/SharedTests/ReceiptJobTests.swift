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
            #expect(ReceiptJob(json: job.json) == job)
        }
    }

    @Test(
        "a payload that is not a job does not read",
        arguments: [
            "", "null", "[]", "{}", #"{"jobId": "j"}"#,
            // One field wrong at a time, from a job that reads.
            #"{"acceptedAtMilliseconds":"1","appType":"ios","customerEmail":"c@d.io","jobId":"j","offerId":"o","publisherId":"00000000-0000-0000-0000-000000000001","receiptData":"QQ=="}"#,
            #"{"acceptedAtMilliseconds":1,"appType":"android","customerEmail":"c@d.io","jobId":"j","offerId":"o","publisherId":"00000000-0000-0000-0000-000000000001","receiptData":"QQ=="}"#,
            #"{"acceptedAtMilliseconds":1,"appType":"ios","customerEmail":"c@d.io","jobId":"j","offerId":"o","publisherId":"publisher","receiptData":"QQ=="}"#,
            #"{"acceptedAtMilliseconds":1,"appType":"ios","customerEmail":"c@d.io","jobId":"j","offerId":"o","publisherId":"00000000-0000-0000-0000-000000000001"}"#,
            #"{"acceptedAtMilliseconds":1,"appType":"ios","customerEmail":"c@d.io","jobId":"j","offerId":"o","publisherId":"00000000-0000-0000-0000-000000000001","receiptData":"QQ==","transactionId":7}"#,
            // Written by a later version, whose fields may change what the job means; or a version that is not one.
            #"{"v":2,"acceptedAtMilliseconds":1,"appType":"ios","customerEmail":"c@d.io","jobId":"j","offerId":"o","publisherId":"00000000-0000-0000-0000-000000000001","receiptData":"QQ=="}"#,
            #"{"v":"1","acceptedAtMilliseconds":1,"appType":"ios","customerEmail":"c@d.io","jobId":"j","offerId":"o","publisherId":"00000000-0000-0000-0000-000000000001","receiptData":"QQ=="}"#,
        ]
    )
    func notAJob(json: String) {
        #expect(ReceiptJob(json: json) == nil)
    }

    @Test("a job that reads: optional fields may be absent or null")
    func optionalFields() throws {
        let json = #"{"acceptedAtMilliseconds":1,"appType":"ios","customerEmail":"c@d.io","jobId":"j","offerId":"o","#
            + #""publisherId":"00000000-0000-0000-0000-00000000000A","receiptData":"QQ==","ipAddress":null}"#
        let job = try #require(ReceiptJob(json: json))
        #expect(job.transactionId == nil && job.ipAddress == nil && job.acceptedAtMilliseconds == 1)
        // Version 1 written out, as by this build, reads the same (older APIs wrote none).
        #expect(ReceiptJob(json: #"{"v":1,"# + json.dropFirst()) == job)
        #expect(job.json.hasPrefix(#"{"v":1,"#))
        #expect(job.publisherId == UUID(uuidString: "00000000-0000-0000-0000-00000000000a"))
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
