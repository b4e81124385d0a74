import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import PropertyBased
import Shared
import Synchronization
import Testing
import TestSupport

@testable import API

/// Property-based checks of the submission path with random, malformed and hostile bodies: every body is
/// either accepted with fields that obey the rules, or refused with a 4xx JSON error that names the
/// problem; nothing crashes, nothing answers 5xx, and nothing is enqueued for a refused body.
@Suite("Submission fuzzing")
struct SubmissionFuzzTests {
    // MARK: Bodies built from choices

    /// Values for each field: valid ones, boundary ones, wrong types, hostile text.
    static var emails: [Any] { [
        "viewer@example.com", "Viewer@Example.COM", "", " ", "no-at-sign", "a@b", "a..b@example.com", ".a@example.com",
        String(repeating: "a", count: 64) + "@" + String(repeating: "b", count: 185) + ".com",
        String(repeating: "a", count: 64) + "@" + String(repeating: "b", count: 186) + ".com", "ü@exämple.com", "a@example.com\u{0}x",
        "<script>@example.com", 5, 1.5, true, NSNull(), ["a@example.com"], ["email": "a@example.com"],
    ] }
    static var offers: [Any] { [
        Tenant.Offer.pass, Tenant.Offer.coins, "unknown-offer", "", "a b", String(repeating: "o", count: 128),
        String(repeating: "o", count: 129), "\u{7f}", "ok\n", "€", 7, false, NSNull(), [Tenant.Offer.pass],
    ] }
    static var receiptDatas: [Any] { [
        "VALID", "", "=", "!!!!", "YQ", "YQ=", "YQ==", "YQ===", "Y Q==", "YQ==\n", "YWJj", String(repeating: "A", count: 4096),
        1, NSNull(), [1], ["receiptData": "YQ=="],
    ] }
    static var transactionIds: [Any] { [
        "1000000000000001", "", "12a", "-1", "1 5", String(repeating: "9", count: 64), String(repeating: "9", count: 65), "١٢٣",
        12, 1.0e20, NSNull(), ["1"],
    ] }
    static var appTypes: [Any] { ["ios", "tvos", "android", "", "IOS", " ios", 0, NSNull(), ["ios"]] }
    static var ipAddresses: [Any] { [
        "192.168.1.1", "::1", "2001:db8::8a2e:370:7334", "300.1.1.1", "1.2.3", "", "1.2.3.4\u{0}", "fe80::1%eth0",
        String(repeating: "1", count: 100), 4, NSNull(), ["1.1.1.1"],
    ] }

    /// A body from one choice per field: index 0 of each pool is valid, and the last choice of each
    /// picks "absent". The receipt's own shape varies too. A choice above 40 picks the valid value (the
    /// receipt as an object), so that about one body in sixteen is accepted whole and that branch runs too.
    static func body(_ choices: [Int], validReceipt: String) -> [String: Any] {
        func pick(_ pool: [Any], _ choice: Int) -> Any? {
            let index = choice > 40 ? 0 : choice % (pool.count + 1)
            guard index < pool.count else { return nil }
            let value = pool[index]
            return (value as? String) == "VALID" ? validReceipt : value
        }
        var receipt: [String: Any] = [:]
        receipt["receiptData"] = pick(Self.receiptDatas, choices[2])
        receipt["transactionId"] = pick(Self.transactionIds, choices[3])
        var body: [String: Any] = [:]
        body["customerEmail"] = pick(Self.emails, choices[0])
        body["offerId"] = pick(Self.offers, choices[1])
        switch choices[6] > 40 ? 4 : choices[6] % 5 {
        case 0: body["receipt"] = "not an object"
        case 1: body["receipt"] = NSNull()
        case 2: body["receipt"] = [receipt]
        default: body["receipt"] = receipt
        }
        body["appType"] = pick(Self.appTypes, choices[4])
        body["ipAddress"] = pick(Self.ipAddresses, choices[5])
        if choices[7] % 3 == 0 { body["unknownField"] = ["ignored": [1, 2, 3]] }
        return body
    }

    static let choices = Gen.int(in: 0...80).array(of: 8...8)

    /// What every answer must be: accepted with valid fields, or a 400/422 `APIError` naming a problem.
    /// Whether it was accepted.
    @discardableResult
    static func checkParse(_ bytes: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        do {
            let submission = try PaymentSubmission(body: ByteBuffer(bytes: bytes))
            #expect(submission.customerEmail == submission.customerEmail.lowercased(), sourceLocation: sourceLocation)
            #expect(submission.customerEmail.utf8.count <= 254 && submission.customerEmail.contains("@"), sourceLocation: sourceLocation)
            #expect((1...128).contains(submission.offerId.utf8.count), sourceLocation: sourceLocation)
            #expect(submission.offerId.utf8.allSatisfy { (0x21...0x7e).contains($0) }, sourceLocation: sourceLocation)
            #expect(Data(base64Encoded: submission.receiptData) != nil, sourceLocation: sourceLocation)
            #expect(submission.transactionId.map { $0.utf8.allSatisfy { (0x21...0x7e).contains($0) } && $0.utf8.count <= 64 } ?? true, sourceLocation: sourceLocation)
            return true
        } catch let error as APIError {
            #expect([.badRequest, .unprocessableContent].contains(error.status), "\(error)", sourceLocation: sourceLocation)
            #expect(!error.message.isEmpty && !error.code.isEmpty, sourceLocation: sourceLocation)
        } catch {
            Issue.record("not an APIError: \(error)", sourceLocation: sourceLocation)
        }
        return false
    }

    @Test("bodies built from valid, boundary, ill-typed and hostile field values parse or are refused with 400/422")
    func fieldChoices() async throws {
        let receipt = Payment.receipt(transactionId: "1000000000000001")
        let accepted = Atomic(0)
        await propertyCheck(count: 2000, input: Self.choices) { choices in
            let body = Self.body(choices, validReceipt: receipt)
            if Self.checkParse(Array(try! JSONSerialization.data(withJSONObject: body))) { accepted.add(1, ordering: .relaxed) }
        }
        // About 120 are expected: none would mean the accepted branch's checks never ran.
        #expect(accepted.load(ordering: .relaxed) > 0)
    }

    @Test("a valid body with random bytes overwritten, inserted or cut parses or is refused with 400/422")
    func byteMutations() async throws {
        let valid = Array(try JSONSerialization.data(withJSONObject: Payment.body(), options: [.sortedKeys]))
        let edits = Gen.int(in: 0...Int(UInt16.max)).array(of: 1...24)
        await propertyCheck(count: 2000, input: edits) { edits in
            var bytes = valid
            for pair in stride(from: 0, to: edits.count - 1, by: 2) {
                let position = edits[pair] % max(bytes.count, 1)
                let byte = UInt8(truncatingIfNeeded: edits[pair + 1])
                switch edits[pair + 1] >> 8 % 3 {
                case 0 where !bytes.isEmpty: bytes[position] = byte
                case 1: bytes.insert(byte, at: position)
                default: bytes = Array(bytes.prefix(position))
                }
            }
            Self.checkParse(bytes)
        }
    }

    @Test("random text and deep nesting are refused with 400, never a crash")
    func randomText() async throws {
        await propertyCheck(count: 1000, input: Gen.ascii.string(of: 0...300)) { text in
            Self.expectBadRequest(text)
        }
        for depth in [31, 32, 33, 1000, 200_000] {
            Self.expectBadRequest("{\"a\":" + String(repeating: "[", count: depth) + String(repeating: "]", count: depth) + "}")
        }
        Self.expectBadRequest("{\"a\":" + String(repeating: "[", count: 200_000) + "}")
    }

    /// A body that is not JSON, or JSON without the submission's fields: 400, never accepted, never 422.
    static func expectBadRequest(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let error = #expect(throws: APIError.self, sourceLocation: sourceLocation) { try PaymentSubmission(body: ByteBuffer(string: text)) }
        #expect(error?.status == .badRequest, "\(String(describing: error)) for \(text.prefix(80))", sourceLocation: sourceLocation)
    }

    @Test("through the live route: no 5xx, a JSON error naming the problem for every refusal, nothing enqueued for a refused body")
    func throughTheRoute() async throws {
        var options = APIHarness.Options()
        options.extra = ["TOLLGATE_RATE_LIMIT_PER_S": "0"]
        try await APIHarness.withAPI(options) { api in
            let tenant = try await api.provisionTenant()
            let receipt = Payment.receipt(transactionId: "1000000000000001")
            let accepted = Atomic(0)
            await propertyCheck(count: 300, input: Self.choices) { choices in
                let before = try await api.streamLength()
                let body = Self.body(choices, validReceipt: receipt)
                let response = try await api.pay(tenant, body)
                #expect([.ok, .badRequest, .conflict, .unprocessableContent].contains(response.status), "\(response.status): \(response.text)")
                let json = try response.json()
                if response.status == .ok {
                    #expect(json["jobId"] is String)
                    accepted.add(1, ordering: .relaxed)
                } else {
                    #expect((json["message"] as? String)?.isEmpty == false && (json["code"] as? String)?.isEmpty == false, "\(response.text)")
                    #expect(try await api.streamLength() == before)
                }
            }
            // About 18 are expected (the same submission twice counts twice).
            #expect(accepted.load(ordering: .relaxed) > 0)
        }
    }
}
