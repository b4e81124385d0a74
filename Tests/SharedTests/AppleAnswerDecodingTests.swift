import Foundation
import Testing
@testable import Shared

@Suite("AppleAnswer decoding")
struct AppleAnswerDecodingTests {
    static func decode(_ json: String) throws -> AppleAnswer {
        try #require(Self.read(json))
    }

    static func read(_ json: String) -> AppleAnswer? {
        Array(json.utf8).withUnsafeBytes { JSONValue.object($0, maxDepth: 32, maxValues: AppleVerdict.maxAnswerValues) }.flatMap { try? AppleAnswer(object: $0) }
    }

    @Test("millisecond values decode from strings")
    func millisecondsAsStrings() throws {
        let answer = try Self.decode("""
            {"status": 0, "environment": "Production", "receipt": {"bundle_id": "com.example", "in_app": [
              {"product_id": "sub", "transaction_id": "1000000000000002", "original_transaction_id": "1000000000000001",
               "purchase_date_ms": "1700000000000", "expires_date_ms": "1702592000123", "cancellation_date_ms": "1701000000456",
               "quantity": "3"}]}}
            """)
        #expect(answer.status == 0)
        #expect(answer.environment == "Production")
        let transaction = try #require(answer.receipt?.inApp.first)
        #expect(answer.receipt?.bundleId == "com.example")
        #expect(transaction.productId == "sub")
        #expect(transaction.transactionId == "1000000000000002")
        #expect(transaction.originalTransactionId == "1000000000000001")
        #expect(transaction.purchaseDateMilliseconds == 1_700_000_000_000)
        #expect(transaction.expiresDateMilliseconds == 1_702_592_000_123)
        #expect(transaction.cancellationDateMilliseconds == 1_701_000_000_456)
        #expect(transaction.isCancelled)
        #expect(transaction.quantity == 3)
    }

    @Test("millisecond values, identifiers and the status decode from numbers")
    func millisecondsAsNumbers() throws {
        let answer = try Self.decode("""
            {"status": "0", "latest_receipt_info": [
              {"product_id": "sub", "transaction_id": 1000000000000002, "original_transaction_id": 1000000000000001,
               "purchase_date_ms": 1700000000000, "expires_date_ms": 1702592000123, "quantity": 2}]}
            """)
        #expect(answer.status == 0)
        let transaction = try #require(answer.latestReceiptInfo.first)
        #expect(transaction.transactionId == "1000000000000002")
        #expect(transaction.originalTransactionId == "1000000000000001")
        #expect(transaction.purchaseDateMilliseconds == 1_700_000_000_000)
        #expect(transaction.expiresDateMilliseconds == 1_702_592_000_123)
        #expect(transaction.cancellationDateMilliseconds == nil)
        #expect(!transaction.isCancelled)
        #expect(transaction.quantity == 2)
    }

    @Test(
        "is-retryable and is_retryable are both read; a value that is neither true nor false reads as absent",
        arguments: [
            (#"{"status": 21100, "is-retryable": true}"#, true),
            (#"{"status": 21100, "is_retryable": true}"#, true),
            (#"{"status": 21100, "is-retryable": "true"}"#, true),
            (#"{"status": 21100, "is_retryable": 1}"#, true),
            (#"{"status": 21100, "is-retryable": false}"#, false),
            (#"{"status": 21100, "is_retryable": false}"#, false),
            (#"{"status": 21100, "is-retryable": "false"}"#, false),
            (#"{"status": 21100, "is-retryable": "0"}"#, false),
            (#"{"status": 21100}"#, nil),
            // A value that says neither is no answer: the 211xx is retried, not dead-lettered on a guess.
            (#"{"status": 21100, "is-retryable": ""}"#, nil),
            (#"{"status": 21100, "is-retryable": "maybe"}"#, nil),
            (#"{"status": 21100, "is-retryable": 0.5}"#, nil),
        ]
    )
    func retryableFlag(json: String, expected: Bool?) throws {
        let answer = try Self.decode(json)
        #expect(answer.isRetryable == expected)
        #expect(answer.status == 21100)
    }

    @Test("cancellation_date without cancellation_date_ms still marks the transaction cancelled; a null one does not")
    func cancellationDateWithoutMilliseconds() throws {
        let answer = try Self.decode("""
            {"status": 0, "receipt": {"bundle_id": "b", "in_app": [
              {"product_id": "p", "transaction_id": "7", "purchase_date_ms": "1700000000000",
               "cancellation_date": "2023-11-20 10:00:00 Etc/GMT"},
              {"product_id": "p", "transaction_id": "8", "purchase_date_ms": "1700000000000"},
              {"product_id": "p", "transaction_id": "9", "purchase_date_ms": "1700000000000",
               "cancellation_date": null, "cancellation_date_ms": null, "cancellation_reason": null}]}}
            """)
        let transactions = try #require(answer.receipt?.inApp)
        try #require(transactions.count == 3)
        #expect(transactions[0].isCancelled)
        // Its exact time is unknown: the revocation takes effect from the purchase.
        #expect(transactions[0].cancellationDateMilliseconds == 1_700_000_000_000)
        #expect(!transactions[1].isCancelled)
        // A null is no cancellation, as a null is "absent" for every other field.
        #expect(!transactions[2].isCancelled)
    }

    @Test("a missing original_transaction_id defaults to the transaction_id")
    func originalDefaultsToTransaction() throws {
        let answer = try Self.decode("""
            {"status": 0, "receipt": {"bundle_id": "b", "in_app": [{"product_id": "p", "transaction_id": "1000000000000042"}]}}
            """)
        let transaction = try #require(answer.receipt?.inApp.first)
        #expect(transaction.originalTransactionId == "1000000000000042")
        #expect(transaction.quantity == 1)
        #expect(AppleTransaction(productId: "p", transactionId: "9").originalTransactionId == "9")
    }

    @Test("unknown fields are ignored at every level")
    func unknownFieldsIgnored() throws {
        let answer = try Self.decode("""
            {"status": 0, "environment": "Sandbox", "brand_new_field": {"nested": [1, 2, 3]}, "latest_receipt": "AAAA",
             "receipt": {"bundle_id": "b", "adam_id": 0, "receipt_type": "ProductionSandbox", "future": null, "in_app": [
               {"product_id": "p", "transaction_id": "1", "in_app_ownership_type": "PURCHASED", "is_trial_period": "false",
                "web_order_line_item_id": "5", "something_new": [true]}]},
             "pending_renewal_info": [{"original_transaction_id": "1", "product_id": "p", "auto_renew_status": "1",
                "grace_period_expires_date_ms": "1700000000000", "new_thing": 1}]}
            """)
        #expect(answer.environment == "Sandbox")
        #expect(answer.receipt?.inApp.count == 1)
        #expect(answer.pendingRenewalInfo == [
            PendingRenewalInfo(originalTransactionId: "1", productId: "p", gracePeriodExpiresDateMilliseconds: 1_700_000_000_000)
        ])
    }

    @Test("a pending_renewal_info entry that cannot be read is left out; the answer and the other entries still read")
    func unreadableRenewalLeftOut() throws {
        let answer = try Self.decode("""
            {"status": 0, "receipt": {"bundle_id": "b", "in_app": [{"product_id": "p", "transaction_id": "1"}]},
             "pending_renewal_info": [{"grace_period_expires_date_ms": [1]}, 7,
               {"original_transaction_id": "1", "product_id": "p", "grace_period_expires_date_ms": "1700000000000"}]}
            """)
        #expect(answer.receipt?.inApp.count == 1)
        #expect(answer.pendingRenewalInfo == [
            PendingRenewalInfo(originalTransactionId: "1", productId: "p", gracePeriodExpiresDateMilliseconds: 1_700_000_000_000)
        ])
        #expect(try Self.decode(#"{"status": 0, "pending_renewal_info": {"not": "an array"}}"#).pendingRenewalInfo.isEmpty)
    }

    @Test("allTransactions merges in_app and latest_receipt_info")
    func allTransactionsMerges() throws {
        let answer = try Self.decode("""
            {"status": 0,
             "receipt": {"bundle_id": "b", "in_app": [
               {"product_id": "coins", "transaction_id": "10"},
               {"product_id": "sub", "transaction_id": "20", "original_transaction_id": "20", "expires_date_ms": "1"}]},
             "latest_receipt_info": [
               {"product_id": "sub", "transaction_id": "21", "original_transaction_id": "20", "expires_date_ms": "2"},
               {"product_id": "sub", "transaction_id": "22", "original_transaction_id": "20", "expires_date_ms": "3"}]}
            """)
        let ids = answer.allTransactions.map(\.transactionId)
        #expect(ids.sorted() == ["10", "20", "21", "22"])
        #expect(answer.allTransactions.filter { $0.originalTransactionId == "20" }.count == 3)

        let inAppOnly = try Self.decode(#"{"status": 0, "receipt": {"bundle_id": "b", "in_app": [{"product_id": "p", "transaction_id": "1"}]}}"#)
        #expect(inAppOnly.allTransactions.map(\.transactionId) == ["1"])
        let latestOnly = try Self.decode(#"{"status": 0, "latest_receipt_info": [{"product_id": "p", "transaction_id": "2"}]}"#)
        #expect(latestOnly.allTransactions.map(\.transactionId) == ["2"])
        #expect(try Self.decode(#"{"status": 21003}"#).allTransactions.isEmpty)
    }

    @Test(
        "an answer that is not one does not decode",
        arguments: [
            #"{"environment": "Production"}"#,
            #"{"status": null}"#,
            #"{"status": "zero"}"#,
            #"{"status": true}"#,
            #"[{"status": 0}]"#,
            #"{"status": 0"#,
            #"{"status": 0} trailing"#,
            #"{"status": 0, "receipt": {"in_app": []}}"#,
            #"{"status": 0, "receipt": {"bundle_id": 7}}"#,
            #"{"status": 0, "receipt": "b"}"#,
            #"{"status": 0, "receipt": {"bundle_id": "b", "in_app": {"product_id": "p", "transaction_id": "1"}}}"#,
            #"{"status": 0, "latest_receipt_info": [{"product_id": "p"}]}"#,
            #"{"status": 0, "latest_receipt_info": [{"transaction_id": "1"}]}"#,
            #"{"status": 0, "latest_receipt_info": [{"product_id": "p", "transaction_id": 1.5}]}"#,
            #"{"status": 0, "latest_receipt_info": [{"product_id": "p", "transaction_id": "1", "expires_date_ms": "soon"}]}"#,
            #"{"status": 0, "latest_receipt_info": [{"product_id": "p", "transaction_id": "1", "quantity": true}]}"#,
            // A quantity no purchase has: a consumable's coins must not be multiplied by it (an overflow).
            #"{"status": 0, "latest_receipt_info": [{"product_id": "p", "transaction_id": "1", "quantity": "9223372036854775807"}]}"#,
            #"{"status": 0, "latest_receipt_info": [{"product_id": "p", "transaction_id": "1", "quantity": 1001}]}"#,
            #"{"status": 0, "latest_receipt_info": [{"product_id": "p", "transaction_id": "1", "quantity": -1}]}"#,
            #"{"status": 0, "latest_receipt_info": [7]}"#,
            // Dates no purchase has: past year 9999 (their microseconds would overflow a grant's binding), or before 1970.
            #"{"status": 0, "latest_receipt_info": [{"product_id": "p", "transaction_id": "1", "expires_date_ms": "9300000000000000"}]}"#,
            #"{"status": 0, "latest_receipt_info": [{"product_id": "p", "transaction_id": "1", "purchase_date_ms": 253402300800000}]}"#,
            #"{"status": 0, "latest_receipt_info": [{"product_id": "p", "transaction_id": "1", "cancellation_date_ms": "-1"}]}"#,
        ]
    )
    func notAnAnswer(json: String) {
        #expect(Self.read(json) == nil)
    }

    @Test("numbers with fractions or exponents, nulls and spaces read as Apple means them")
    func lenientForms() throws {
        let answer = try Self.decode("""
            {"status": 0.0, "environment": 5, "receipt": null, "is-retryable": "YES", "latest_receipt_info": [
              {"product_id": 12, "transaction_id": "3", "original_transaction_id": null,
               "purchase_date_ms": 1.7e12, "expires_date_ms": " 1702592000123 ", "cancellation_date_ms": null, "quantity": 2.9}],
             "pending_renewal_info": null}
            """)
        #expect(answer.status == 0)
        #expect(answer.environment == nil)
        #expect(answer.receipt == nil)
        #expect(answer.isRetryable == true)
        #expect(answer.pendingRenewalInfo.isEmpty)
        let transaction = try #require(answer.latestReceiptInfo.first)
        #expect(transaction == AppleTransaction(
            productId: "12", transactionId: "3", originalTransactionId: "3", purchaseDateMilliseconds: 1_700_000_000_000,
            expiresDateMilliseconds: 1_702_592_000_123, quantity: 2
        ))
    }
}
