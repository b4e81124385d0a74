import AsyncHTTPClient
import Foundation
import Shared
import Testing
import TestSupport

/// Issue #5, "secrets stay secret": recognisable secrets go in through every door — credentials, a
/// shared secret, the token key, customer tokens, receipts good, failing and malformed, wrong
/// credentials — and then everything the processes wrote (logs at trace level, error bodies, both
/// `/metrics`) is scanned for them.
@Suite("Secrets stay secret", .serialized)
struct SecretsTests {
    @Test("no receipt data, token, password, shared secret or key in any log line, error body or metric")
    func nothingLeaks() async throws {
        let tag = UUID().uuidString
        let tokenKey = "TOKEN-KEY-MARKER-\(tag)"
        let sharedSecret = "SHARED-SECRET-MARKER-\(tag)"
        let system = try await TollgateSystem(extraEnvironment: ["TOLLGATE_TOKEN_SECRET": tokenKey, "TOLLGATE_LOG_LEVEL": "trace"])
        do {
            try await Self.run(system, tag: tag, tokenKey: tokenKey, sharedSecret: sharedSecret)
        } catch {
            await system.shutdown()
            throw error
        }
        await system.shutdown()
    }

    static func run(_ system: TollgateSystem, tag: String, tokenKey: String, sharedSecret: String) async throws {
        try await system.startWorker(name: "secrets-\(tag.prefix(8))")
        var secrets = [system.adminToken, tokenKey, sharedSecret]
        var written: [(String, String)] = []  // (what, text) of every answer the processes gave

        // A publisher whose app has a shared secret, selling a subscription (the worker sends the secret to Apple).
        let bundleId = "com.example.secrets"
        let created = try await system.request(.POST, "/admin/v1/publishers", headers: system.admin, json: ["name": "Secrets"])
        let publisherId = try #require(created.json["id"] as? String)
        let publisherToken = try #require(created.json["publisherToken"] as? String)
        let basic = try #require(created.json["basicAuth"] as? [String: Any])
        let username = try #require(basic["username"] as? String)
        let password = try #require(basic["password"] as? String)
        let basicValue = "Basic " + Data("\(username):\(password)".utf8).base64EncodedString()
        secrets += [publisherToken, password, basicValue]
        let app = try await system.request(
            .POST, "/admin/v1/publishers/\(publisherId)/apps", headers: system.admin, json: ["bundleId": bundleId, "sharedSecret": sharedSecret]
        )
        written.append(("app creation", app.text))
        let product = try await system.request(.POST, "/admin/v1/products", headers: system.admin, json: [
            "publisherId": publisherId, "bundleId": bundleId, "productId": "sub.monthly", "offerId": "SUB_US", "kind": "auto_renewable",
            "title": "Monthly",
        ])
        #expect(product.status == 201)
        let productId = try #require(product.json["id"] as? String)
        let patched = try await system.request(.PATCH, "/admin/v1/products/\(productId)", headers: system.admin, json: ["description": "Renews monthly"])
        #expect(patched.status == 200)
        let publisher = TollgateSystem.Publisher(id: publisherId, headers: ["X-Publisher-Token": publisherToken, "Authorization": basicValue], bundleId: bundleId)

        // A good receipt (with a marker inside the receipt's content too), one Apple refuses for the
        // shared secret (21004), and one that is not base64.
        let future = Int64(Date().timeIntervalSince1970 * 1000) + 86_400_000
        let good = ScenarioReceipt.make(bundleId: bundleId, purchases: [
            .init(productId: "sub.monthly", transactionId: ScenarioReceipt.transactionId(), expiresDateMs: future),
        ], extra: ["sharedSecret": sharedSecret, "note": "RECEIPT-CONTENT-MARKER-\(tag)"])
        let mismatch = ScenarioReceipt.make(bundleId: bundleId, purchases: [
            .init(productId: "sub.monthly", transactionId: ScenarioReceipt.transactionId(), expiresDateMs: future),
        ], extra: ["sharedSecret": "OTHER-SECRET-MARKER-\(tag)"])
        let malformed = "NOT-BASE64-MARKER-\(tag)!"
        secrets += [good, mismatch, malformed, "RECEIPT-CONTENT-MARKER-\(tag)", "OTHER-SECRET-MARKER-\(tag)", String(good.prefix(48))]

        let accepted = try await system.submit(publisher, email: "viewer@example.com", offerId: "SUB_US", transactionId: nil, receipt: good)
        let goodJob = try #require(accepted.json["jobId"] as? String)
        let refused = try await system.submit(publisher, email: "other@example.com", offerId: "SUB_US", transactionId: nil, receipt: mismatch)
        let failedJob = try #require(refused.json["jobId"] as? String)
        let bad = try await system.submit(publisher, email: "viewer@example.com", offerId: "SUB_US", transactionId: nil, receipt: malformed)
        #expect(bad.status == 422)
        written.append(("malformed submission", bad.text))

        _ = try await system.waitForAccess(publisher, email: "viewer@example.com", offerId: "SUB_US")
        let failed = try await Poll.until(timeout: .seconds(60), interval: .milliseconds(250), "the 21004 job fails") {
            let job = try await system.job(publisher, failedJob)
            return job["status"] as? String == "failed" ? job : nil
        }
        #expect(failed["reason"] as? String == "shared_secret_mismatch")
        written.append(("failed job", try await system.request(.GET, "/v1/receipts/\(failedJob)", headers: publisher.headers).text))
        written.append(("dead letters", try await system.request(.GET, "/admin/v1/dead-letters", headers: system.admin).text))

        // Customer tokens: issued, used on both app routes; a forged one and wrong credentials refused.
        let issued = try await system.request(.POST, "/v1/customer-tokens", headers: publisher.headers, json: ["customerEmail": "viewer@example.com"])
        let customerToken = try #require(issued.json["customerToken"] as? String)
        let forged = "BAD-BEARER-MARKER-\(tag)"
        let wrongPassword = "WRONG-PASSWORD-MARKER-\(tag)"
        secrets += [customerToken, forged, wrongPassword]
        let viaToken = try await system.request(.GET, "/v1/access-status?offerId=SUB_US", headers: ["Authorization": "Bearer \(customerToken)"])
        #expect(viaToken.json["accessGranted"] as? Bool == true)
        let rpc = try await system.request(.POST, "/api/3.0/json", json: ["method": "getAccessStatus", "params": ["customerToken": customerToken, "offerId": "SUB_US"]])
        #expect((rpc.json["result"] as? [String: Any])?["accessGranted"] as? Bool == true)
        for (what, reply) in [
            ("forged bearer", try await system.request(.GET, "/v1/access-status?offerId=SUB_US", headers: ["Authorization": "Bearer \(forged)"])),
            ("forged rpc", try await system.request(.POST, "/api/3.0/json", json: ["method": "getAccessStatus", "params": ["customerToken": forged, "offerId": "SUB_US"]])),
            ("wrong password", try await system.request(.GET, "/v1/receipts/\(goodJob)", headers: [
                "X-Publisher-Token": publisherToken, "Authorization": "Basic " + Data("\(username):\(wrongPassword)".utf8).base64EncodedString(),
            ])),
            ("wrong admin token", try await system.request(.GET, "/admin/v1/queue", headers: ["Authorization": "Bearer \(wrongPassword)"])),
        ] {
            #expect(reply.status == 401, "\(what)")
            written.append((what, reply.text))
        }

        // Both /metrics.
        written.append(("API metrics", try await Self.text(system, system.apiBase + "/metrics")))
        for (name, port) in system.workerPorts {
            written.append(("metrics of \(name)", try await Self.text(system, "http://127.0.0.1:\(port)/metrics")))
        }

        // The logs are real and carry the job ids (so the scan below reads something)...
        let apiLog = system.api.log()
        let workerLog = system.workers.map { $0.log() }.joined()
        #expect(apiLog.contains(goodJob) && workerLog.contains(goodJob) && workerLog.contains(failedJob))
        // Every admin change is logged, saying what changed and not with what.
        let appId = try #require(app.json["id"] as? String)
        for (line, id) in [("publisher created", publisherId), ("app created", appId), ("product created", productId), ("product updated", productId)] {
            #expect(apiLog.split(separator: "\n").contains { $0.contains(line) && $0.contains(id) }, "no \"\(line)\" line for \(id)")
        }
        #expect(apiLog.split(separator: "\n").contains { $0.contains("product updated") && $0.contains("description") && !$0.contains("Renews monthly") })
        written.append(("API log", apiLog))
        written.append(("worker logs", workerLog))
        written.append(("emulator log", system.emulator.log()))

        // ...and hold none of the secrets.
        for (what, text) in written {
            for secret in secrets where text.contains(secret) {
                Issue.record("\(what) contains a secret (\(secret.prefix(12))…)")
            }
        }
    }

    static func text(_ system: TollgateSystem, _ url: String) async throws -> String {
        let response = try await system.http.execute(HTTPClientRequest(url: url), timeout: .seconds(10))
        return String(buffer: try await response.body.collect(upTo: 16 << 20))
    }
}
