import Foundation
import Hummingbird
import HummingbirdTesting
import Testing
@testable import AppStoreEmulator

@Suite("verifyReceipt routes")
struct VerifyReceiptRouteTests {
    @Test("a valid scenario answers status 0 with Apple's fields, numbers as strings")
    func validScenario() async throws {
        let scenario = #"""
        {"bundleId":"com.example.app","inApp":[
          {"productId":"sub.monthly","transactionId":"2000000000000001","originalTransactionId":"2000000000000000",
           "purchaseDateMs":1700000000000,"expiresDateMs":"1702592000000","quantity":"2","isTrialPeriod":true},
          {"productId":"coins.100","transactionId":2000000000000002,"purchaseDateMs":"1700000001000",
           "cancellationDateMs":1701000000000}]}
        """#
        try await Fixtures.makeApplication().test(.router) { client in
            let response = try await client.verify(Fixtures.receiptData(scenario))
            #expect(response.status == .ok)
            #expect(response.headers[.contentType] == "application/json")
            let answer = try Fixtures.object(response.body)
            #expect(answer["status"] as? Int == 0)
            #expect(answer["environment"] as? String == "Production")
            let receipt = try #require(answer["receipt"] as? [String: Any])
            #expect(receipt["bundle_id"] as? String == "com.example.app")
            #expect(receipt["receipt_type"] as? String == "Production")
            #expect(receipt["adam_id"] as? Int == 0)
            #expect(receipt["original_purchase_date_ms"] as? String == "1700000000000")
            #expect((receipt["request_date_ms"] as? String).flatMap { Int64($0) } != nil)

            let inApp = Fixtures.objects(receipt, "in_app")
            try #require(inApp.count == 2)
            let subscription = inApp[0]
            #expect(subscription["product_id"] as? String == "sub.monthly")
            #expect(subscription["quantity"] as? String == "2")
            #expect(subscription["transaction_id"] as? String == "2000000000000001")
            #expect(subscription["original_transaction_id"] as? String == "2000000000000000")
            #expect(subscription["purchase_date"] as? String == "2023-11-14 22:13:20 Etc/GMT")
            #expect(subscription["purchase_date_ms"] as? String == "1700000000000")
            #expect(subscription["purchase_date_pst"] as? String == "2023-11-14 14:13:20 America/Los_Angeles")
            #expect(subscription["expires_date_ms"] as? String == "1702592000000")
            #expect(subscription["expires_date"] as? String == "2023-12-14 22:13:20 Etc/GMT")
            #expect(subscription["is_trial_period"] as? String == "true")
            #expect(subscription["is_in_intro_offer_period"] as? String == "false")
            #expect(subscription["in_app_ownership_type"] as? String == "PURCHASED")
            #expect(subscription["web_order_line_item_id"] as? String == "2000000000000001")
            #expect(subscription["cancellation_date"] == nil)

            let consumable = inApp[1]
            #expect(consumable["transaction_id"] as? String == "2000000000000002")
            #expect(consumable["original_transaction_id"] as? String == "2000000000000002")
            #expect(consumable["quantity"] as? String == "1")
            #expect(consumable["expires_date"] == nil)
            #expect(consumable["web_order_line_item_id"] == nil)
            #expect(consumable["cancellation_date_ms"] as? String == "1701000000000")
            #expect(consumable["cancellation_reason"] as? String == "0")

            // Without latestReceiptInfo, a receipt that holds a subscription lists every transaction there,
            // the consumable too, as Apple does.
            let latest = Fixtures.objects(answer, "latest_receipt_info")
            #expect(latest.map { $0["transaction_id"] as? String } == ["2000000000000001", "2000000000000002"])
            #expect(latest.last?["cancellation_date_ms"] as? String == "1701000000000")
            #expect(answer["latest_receipt"] as? String == Fixtures.receiptData(scenario))
            #expect(answer["pending_renewal_info"] == nil)
        }
    }

    @Test("millisecondsAsNumbers renders every …_ms as a JSON number, everything else as before")
    func millisecondsAsNumbers() async throws {
        let scenario = #"{"bundleId":"a","millisecondsAsNumbers":true,"inApp":[{"productId":"sub","transactionId":"7","purchaseDateMs":1700000000000,"expiresDateMs":1702592000000}],"pendingRenewalInfo":[{"productId":"sub","originalTransactionId":"7","gracePeriodExpiresDateMs":1702600000000}]}"#
        try await Fixtures.makeApplication().test(.router) { client in
            let body = try await client.verify(Fixtures.receiptData(scenario)).body
            let answer = try Fixtures.object(body)
            #expect(answer["status"] as? Int == 0)
            // Slashes unescaped, as in every other answer.
            #expect(String(buffer: body).contains(" America/Los_Angeles\""), "\(String(buffer: body))")
            #expect(!String(buffer: body).contains("\\/"))
            let receipt = try #require(answer["receipt"] as? [String: Any])
            #expect(receipt["request_date_ms"] is NSNumber && !(receipt["request_date_ms"] is String))
            let entries = Fixtures.objects(answer, "latest_receipt_info") + ((receipt["in_app"] as? [[String: Any]]) ?? [])
            #expect(entries.count == 2)
            for entry in entries {
                #expect((entry["purchase_date_ms"] as? NSNumber)?.int64Value == 1_700_000_000_000)
                #expect((entry["expires_date_ms"] as? NSNumber)?.int64Value == 1_702_592_000_000)
                #expect(entry["purchase_date"] as? String == "2023-11-14 22:13:20 Etc/GMT")
                #expect(entry["transaction_id"] as? String == "7")
            }
            let renewal = try #require(Fixtures.objects(answer, "pending_renewal_info").first)
            #expect((renewal["grace_period_expires_date_ms"] as? NSNumber)?.int64Value == 1_702_600_000_000)
        }
    }

    @Test("no subscription and no pending renewal: neither latest_receipt_info nor latest_receipt")
    func consumableOnly() async throws {
        try await Fixtures.makeApplication().test(.router) { client in
            let answer = try Fixtures.object(try await client.verify(Fixtures.receiptData(Fixtures.simpleScenario())).body)
            #expect(answer["status"] as? Int == 0)
            #expect(answer["latest_receipt_info"] == nil)
            #expect(answer["latest_receipt"] == nil)
        }
    }

    @Test("pending_renewal_info is rendered with Apple's names")
    func pendingRenewal() async throws {
        let scenario = Fixtures.simpleScenario(extra: #","pendingRenewalInfo":[{"productId":"sub.monthly","originalTransactionId":"9","autoRenewStatus":false,"gracePeriodExpiresDateMs":1702600000000}]"#)
        try await Fixtures.makeApplication().test(.router) { client in
            let answer = try Fixtures.object(try await client.verify(Fixtures.receiptData(scenario)).body)
            let renewals = Fixtures.objects(answer, "pending_renewal_info")
            try #require(renewals.count == 1)
            #expect(renewals[0]["auto_renew_product_id"] as? String == "sub.monthly")
            #expect(renewals[0]["product_id"] as? String == "sub.monthly")
            #expect(renewals[0]["original_transaction_id"] as? String == "9")
            #expect(renewals[0]["auto_renew_status"] as? String == "0")
            #expect(renewals[0]["grace_period_expires_date_ms"] as? String == "1702600000000")
            #expect(renewals[0]["grace_period_expires_date"] as? String == "2023-12-15 00:26:40 Etc/GMT")
            #expect(renewals[0]["grace_period_expires_date_pst"] as? String == "2023-12-14 16:26:40 America/Los_Angeles")
        }
    }

    @Test("a sandbox scenario answers 21007 on production and 0 on sandbox")
    func sandboxScenario() async throws {
        let receipt = Fixtures.receiptData(Fixtures.simpleScenario(environment: "Sandbox"))
        try await Fixtures.makeApplication().test(.router) { client in
            let production = try Fixtures.object(try await client.verify(receipt).body)
            #expect(production["status"] as? Int == 21007)
            #expect(production.count == 1)

            let sandbox = try Fixtures.object(try await client.verify(receipt, sandbox: true).body)
            #expect(sandbox["status"] as? Int == 0)
            #expect(sandbox["environment"] as? String == "Sandbox")
            #expect((sandbox["receipt"] as? [String: Any])?["receipt_type"] as? String == "ProductionSandbox")
        }
    }

    @Test("a production scenario answers 21008 on sandbox")
    func productionScenarioOnSandbox() async throws {
        try await Fixtures.makeApplication().test(.router) { client in
            let answer = try Fixtures.object(try await client.verify(Fixtures.receiptData(Fixtures.simpleScenario()), sandbox: true).body)
            #expect(answer["status"] as? Int == 21008)
        }
    }

    @Test("a forced 21007 or 21008 answers only its status, as Apple's redirects do", arguments: [21007, 21008])
    func forcedRedirectStatus(_ status: Int) async throws {
        let receipt = Fixtures.receiptData(#"{"bundleId":"a","status":\#(status)}"#)
        try await Fixtures.makeApplication().test(.router) { client in
            let answer = try Fixtures.object(try await client.verify(receipt).body)
            #expect(answer["status"] as? Int == status)
            #expect(answer.count == 1, "\(answer)")
        }
    }

    @Test("receipt data that is not base64 of a scenario answers 21002", arguments: [
        "not base64!",
        "",
        Data("not json".utf8).base64EncodedString(),
        Data("[1,2]".utf8).base64EncodedString(),
        Data(#"{"environment":"Sandbox"}"#.utf8).base64EncodedString(),
        Data(#"{"bundleId":"a","environment":"Staging"}"#.utf8).base64EncodedString(),
    ])
    func malformedReceipt(receiptData: String) async throws {
        try await Fixtures.makeApplication().test(.router) { client in
            let response = try await client.verify(receiptData)
            #expect(response.status == .ok)
            #expect(try Fixtures.object(response.body)["status"] as? Int == 21002)
        }
    }

    @Test("a body that is not Apple's request JSON answers 21000 with HTTP 200", arguments: [
        "", "not json", "[]", "{}", #"{"receipt-data":42}"#, #"{"password":"x"}"#,
    ])
    func badRequestBody(body: String) async throws {
        try await Fixtures.makeApplication().test(.router) { client in
            let response = try await client.verifyRaw(body)
            #expect(response.status == .ok)
            #expect(try Fixtures.object(response.body)["status"] as? Int == 21000)
        }
    }

    @Test("a forced 21100 carries the retry flag in the requested spelling", arguments: [
        (#""#, "is-retryable", "is_retryable"),
        (#","retryableKey":"is-retryable""#, "is-retryable", "is_retryable"),
        (#","retryableKey":"is_retryable""#, "is_retryable", "is-retryable"),
    ])
    func retryableSpellings(extra: String, present: String, absent: String) async throws {
        let scenario = #"{"bundleId":"com.example.app","status":21100,"isRetryable":true\#(extra)}"#
        try await Fixtures.makeApplication().test(.router) { client in
            let answer = try Fixtures.object(try await client.verify(Fixtures.receiptData(scenario)).body)
            #expect(answer["status"] as? Int == 21100)
            #expect(answer["environment"] as? String == "Production")
            #expect(answer[present] as? Bool == true)
            #expect(answer[absent] == nil)
            #expect(answer["receipt"] == nil)
        }
    }

    @Test("a forced 21199 without isRetryable says retryable; a forced 21003 carries no flag")
    func retryableDefaults() async throws {
        try await Fixtures.makeApplication().test(.router) { client in
            let retryable = try Fixtures.object(try await client.verify(Fixtures.receiptData(#"{"bundleId":"a","status":21199}"#)).body)
            #expect(retryable["is-retryable"] as? Bool == true)
            let invalid = try Fixtures.object(try await client.verify(Fixtures.receiptData(#"{"bundleId":"a","status":21003}"#)).body)
            #expect(invalid["status"] as? Int == 21003)
            #expect(invalid["is-retryable"] == nil)
            #expect(invalid["receipt"] == nil)
        }
    }

    @Test("a forced 21006 answers with the full receipt")
    func expiredSubscription() async throws {
        let scenario = #"{"bundleId":"a","status":21006,"inApp":[{"productId":"sub","transactionId":"1","purchaseDateMs":1,"expiresDateMs":2}]}"#
        try await Fixtures.makeApplication().test(.router) { client in
            let answer = try Fixtures.object(try await client.verify(Fixtures.receiptData(scenario)).body)
            #expect(answer["status"] as? Int == 21006)
            #expect(Fixtures.objects(answer["receipt"] as? [String: Any] ?? [:], "in_app").count == 1)
            #expect(Fixtures.objects(answer, "latest_receipt_info").count == 1)
        }
    }

    @Test("a shared secret mismatch answers 21004; the right password answers 0")
    func sharedSecret() async throws {
        let receipt = Fixtures.receiptData(Fixtures.simpleScenario(extra: #","sharedSecret":"s3cr3t""#))
        try await Fixtures.makeApplication().test(.router) { client in
            let missing = try Fixtures.object(try await client.verify(receipt).body)
            #expect(missing["status"] as? Int == 21004)
            let wrong = try Fixtures.object(try await client.verify(receipt, password: "guess").body)
            #expect(wrong["status"] as? Int == 21004)
            let right = try Fixtures.object(try await client.verify(receipt, password: "s3cr3t").body)
            #expect(right["status"] as? Int == 0)
        }
    }

    @Test("fail.count fails exactly the first N calls of that receipt, then answers", arguments: [
        ("http503", 503), ("http500", 500), ("http429", 429), ("status21005", 200),
    ])
    func scriptedFailures(mode: String, httpStatus: Int) async throws {
        let receipt = Fixtures.receiptData(Fixtures.simpleScenario(extra: #","fail":{"count":2,"mode":"\#(mode)"}"#))
        let other = Fixtures.receiptData(Fixtures.simpleScenario(extra: #","fail":{"count":2,"mode":"\#(mode)"},"latencyMs":0"#))
        try await Fixtures.makeApplication().test(.router) { client in
            for _ in 0..<2 {
                let failed = try await client.verify(receipt)
                #expect(failed.status.code == httpStatus)
                if mode == "status21005" {
                    #expect(try Fixtures.object(failed.body)["status"] as? Int == 21005)
                }
            }
            for _ in 0..<2 {
                let answered = try await client.verify(receipt)
                #expect(answered.status == .ok)
                #expect(try Fixtures.object(answered.body)["status"] as? Int == 0)
            }
            // Counted per exact receipt-data string: another receipt has its own count.
            #expect(try await client.verify(other).status.code == httpStatus)

            let stats = try Fixtures.object(try await client.execute(uri: "/emulator/stats", method: .get).body)
            #expect(stats["production"] as? Int == 5)
            #expect(stats["failuresInjected"] as? Int == 3)

            // Reset forgets the served failures: the receipt fails again.
            _ = try await client.execute(uri: "/emulator/reset", method: .post)
            #expect(try await client.verify(receipt).status.code == httpStatus)
        }
    }

    @Test("exclude-old-transactions keeps only the newest entry per original transaction")
    func excludeOldTransactions() async throws {
        let scenario = #"""
        {"bundleId":"a","inApp":[{"productId":"sub","transactionId":"10","purchaseDateMs":1000,"expiresDateMs":2000}],
         "latestReceiptInfo":[
           {"productId":"sub","transactionId":"10","purchaseDateMs":1000,"expiresDateMs":2000},
           {"productId":"sub","transactionId":"12","originalTransactionId":"10","purchaseDateMs":3000,"expiresDateMs":4000},
           {"productId":"other","transactionId":"20","purchaseDateMs":1500,"expiresDateMs":2500},
           {"productId":"sub","transactionId":"11","originalTransactionId":"10","purchaseDateMs":2000,"expiresDateMs":3000}]}
        """#
        let receipt = Fixtures.receiptData(scenario)
        try await Fixtures.makeApplication().test(.router) { client in
            let all = try Fixtures.object(try await client.verify(receipt).body)
            #expect(Fixtures.objects(all, "latest_receipt_info").map { $0["transaction_id"] as? String } == ["10", "12", "20", "11"])

            let newest = try Fixtures.object(try await client.verify(receipt, excludeOldTransactions: true).body)
            #expect(Fixtures.objects(newest, "latest_receipt_info").map { $0["transaction_id"] as? String } == ["12", "20"])
            // in_app is never filtered.
            #expect(Fixtures.objects(newest["receipt"] as? [String: Any] ?? [:], "in_app").count == 1)
        }
    }

    @Test("in_app keeps the scenario's order")
    func inAppOrder() async throws {
        let scenario = #"{"bundleId":"a","inApp":[{"productId":"p","transactionId":"3","purchaseDateMs":3},{"productId":"p","transactionId":"1","purchaseDateMs":1},{"productId":"p","transactionId":"2","purchaseDateMs":2}]}"#
        try await Fixtures.makeApplication().test(.router) { client in
            let answer = try Fixtures.object(try await client.verify(Fixtures.receiptData(scenario)).body)
            let inApp = Fixtures.objects(answer["receipt"] as? [String: Any] ?? [:], "in_app")
            #expect(inApp.map { $0["transaction_id"] as? String } == ["3", "1", "2"])
        }
    }

    @Test("a GET answers as Apple does: HTTP 200, status 21000 (not a POST), on both routes")
    func getAnswers21000() async throws {
        try await Fixtures.makeApplication().test(.router) { client in
            for path in ["/verifyReceipt", "/sandbox/verifyReceipt"] {
                let response = try await client.execute(uri: path, method: .get)
                #expect(response.status == .ok, "\(path)")
                #expect(try Fixtures.object(response.body)["status"] as? Int == 21000, "\(path)")
            }
        }
    }
}
