import Foundation
import Shared
import Testing
import TestSupport

/// Issue #7: `tollgate-api admin …` runs the admin API's actions against a running API.
@Suite("Admin CLI", .serialized)
struct AdminCLITests {
    struct Run {
        let status: Int32
        let output: String
        let error: String

        /// The output as a JSON object.
        var json: [String: Any] {
            (try? JSONSerialization.jsonObject(with: Data(self.output.utf8))) as? [String: Any] ?? [:]
        }
    }

    /// Runs `tollgate-api admin <arguments>` with `token` as TOLLGATE_ADMIN_TOKEN (unset when `nil`).
    static func admin(_ system: TollgateSystem, _ arguments: [String], token: String?, stdin: String? = nil) async throws -> Run {
        try await Self.admin(system.apiBase, arguments, token: token, stdin: stdin)
    }

    /// Runs `tollgate-api admin <arguments>` against the API (or whatever answers) at `apiBase`.
    static func admin(_ apiBase: String, _ arguments: [String], token: String?, stdin: String? = nil) async throws -> Run {
        let executable = "\(try TestEnvironment.binDirectory())/tollgate-api"
        return try await offThePool { try Self.run(executable, arguments, token: token, apiBase: apiBase, stdin: stdin) }
    }

    /// Runs the command to its end, blocking the calling thread.
    private static func run(_ executable: String, _ arguments: [String], token: String?, apiBase: String, stdin: String?) throws -> Run {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["admin"] + arguments
        var environment = ProcessInfo.processInfo.environment
        environment["TOLLGATE_ADMIN_TOKEN"] = token
        environment["TOLLGATE_ADMIN_URL"] = apiBase
        process.environment = environment
        let output = Pipe()
        let error = Pipe()
        let input = Pipe()
        process.standardOutput = output
        process.standardError = error
        process.standardInput = input
        try process.run()
        input.fileHandleForWriting.write(Data((stdin ?? "").utf8))
        try input.fileHandleForWriting.close()
        let out = output.fileHandleForReading.readDataToEndOfFile()
        let err = error.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Run(status: process.terminationStatus, output: String(decoding: out, as: UTF8.self), error: String(decoding: err, as: UTF8.self))
    }

    @Test(
        "a proxy's 502, 504 or 503 exits 75 for a read or a PATCH, and 1 with a hint for a create, a rotation or a requeue, which may have been applied",
        arguments: [(502, "Bad Gateway"), (504, "Gateway Timeout"), (503, "Service Unavailable")]
    )
    func answersOfAProxy(status: Int, reason: String) async throws {
        // A 503 without the API's code in its body: an Envoy-style "upstream reset", sent after passing the request on.
        try await FixedAnswerServer.with(status: status, reason: reason, body: ["message": "upstream"]) { proxy in
            let base = "http://127.0.0.1:\(proxy.port)"
            let token = "proxy-admin-token-0123456789"
            let read = try await Self.admin(base, ["queue"], token: token)
            #expect(read.status == 75)
            #expect(read.error == "tollgate-api admin: \(status): upstream\n")
            let id = UUID().uuidString.lowercased()
            let patch = try await Self.admin(base, ["publishers", "disable", id], token: token)
            #expect(patch.status == 75, "a PATCH sets what it sets however often it runs")
            #expect(patch.error == "tollgate-api admin: \(status): upstream\n")
            for arguments in [["publishers", "create", "--name", "P"], ["publishers", "rotate-credentials", id], ["requeue", id]] {
                let change = try await Self.admin(base, arguments, token: token)
                #expect(change.status == 1, "\(arguments): a second run could create a second publisher or rotate away unseen credentials")
                #expect(change.error == "tollgate-api admin: \(status): upstream; the API may have applied it: list what it changes before running it again\n")
            }
            #expect(proxy.requestLines == [
                "GET /admin/v1/queue HTTP/1.1", "PATCH /admin/v1/publishers/\(id) HTTP/1.1", "POST /admin/v1/publishers HTTP/1.1",
                "POST /admin/v1/publishers/\(id)/credentials HTTP/1.1", "POST /admin/v1/dead-letters/\(id)/requeue HTTP/1.1",
            ], "each sent once")
        }
    }

    @Test("the API's own 503 and a proxy's 429 exit 75 for a create too; a redirect is not followed, and exits 1 naming where it pointed")
    func refusalsBeforeTheAPI() async throws {
        let token = "proxy-admin-token-0123456789"
        let create = ["publishers", "create", "--name", "P"]
        try await FixedAnswerServer.with(status: 503, reason: "Service Unavailable", body: ["message": "redis unavailable", "code": "dependency_unavailable"]) { api in
            let refused = try await Self.admin("http://127.0.0.1:\(api.port)", create, token: token)
            #expect(refused.status == 75, "the API's own 503 wrote nothing")
            #expect(refused.error == "tollgate-api admin: 503: redis unavailable\n")
        }
        try await FixedAnswerServer.with(status: 429, reason: "Too Many Requests", body: ["message": "slow down"]) { proxy in
            let limited = try await Self.admin("http://127.0.0.1:\(proxy.port)", create, token: token)
            #expect(limited.status == 75)
            #expect(limited.error == "tollgate-api admin: 429: slow down\n")
        }
        let target = "https://admin.example/admin/v1/publishers"
        try await FixedAnswerServer.with(status: 302, reason: "Found", body: ["message": "moved"], headers: ["Location": target]) { proxy in
            let redirected = try await Self.admin("http://127.0.0.1:\(proxy.port)", create, token: token)
            #expect(redirected.status == 1)
            #expect(redirected.error == "tollgate-api admin: 302: moved; redirected to \(target): point --url at the API itself\n")
            #expect(proxy.requestLines == ["POST /admin/v1/publishers HTTP/1.1"], "not followed")
        }
    }

    @Test(
        "a create whose commit PostgreSQL never confirmed (its backend terminated while it waited for a synchronous standby) answers 503 outcome_unknown, and the CLI exits 1 and says to look first: the publisher was made; so it is when the API gives the wait up at its answer deadline"
    )
    func unconfirmedCreate() async throws {
        let postgres = try await DedicatedPostgres()
        let system = try await TollgateSystem(databaseURL: postgres.url + "?options=-c%20statement_timeout%3D10s")
        try await TestEnvironment.using(system, postgres) {
            let database = system.database
            // Every commit now waits for a standby that does not exist, as with synchronous replication and its standby down.
            try await database.withConnection { try await $0.runScript("ALTER SYSTEM SET synchronous_standby_names = 'ghost'") }
            try await database.query("SELECT pg_reload_conf()")
            _ = try await Poll.until(timeout: .seconds(20), "the setting to take effect") { () async throws -> Bool? in
                try await database.query("SHOW synchronous_standby_names").first?.decode(String.self, "synchronous_standby_names") == "ghost" ? true : nil
            }
            // A failover tool (or an operator) terminates the backend waiting for the standby: the commit is kept locally, its answer lost.
            @Sendable func terminateWaitingCommit() async throws {
                _ = try await Poll.until(timeout: .seconds(20), interval: .milliseconds(20), "a commit waiting for the standby") { () async throws -> Bool? in
                    try await database.query(
                        "SELECT pg_terminate_backend(pid) AS done FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND application_name = 'tollgate'"
                    ).first?.decode(Bool.self, "done")
                }
            }
            // The API gives a commit up at its answer deadline (10 s + 5 s): an answer before it came from the terminate.
            let clock = ContinuousClock()
            var asked = clock.now
            async let answer = system.request(.POST, "/admin/v1/publishers", headers: system.admin, json: ["name": "unconfirmed-http"])
            try await terminateWaitingCommit()
            let reply = try await answer
            #expect(clock.now - asked < .seconds(15))
            #expect(reply.status == 503)
            #expect(reply.json["code"] as? String == "outcome_unknown", "\(reply.text)")
            #expect(reply.headers["retry-after"] == "5")
            // Logged before the answer went out, by the log's writer thread: read once it has written it.
            _ = try await Poll.until(timeout: .seconds(10), "the API's log line") {
                system.api.log().contains("PostgreSQL was lost before it confirmed a change") ? true : nil
            }

            asked = clock.now
            async let run = Self.admin(system, ["publishers", "create", "--name", "unconfirmed-cli"], token: system.adminToken)
            try await terminateWaitingCommit()
            let cli = try await run
            #expect(clock.now - asked < .seconds(15))
            #expect(cli.status == 1, "running it again would make a second publisher")
            #expect(
                cli.error.hasSuffix(
                    "; the API may have applied it: list what it changes before running it again (a change PostgreSQL is still committing shows only once it is done: ops/OPERATIONS.md, PostgreSQL)\n"
                ), "\(cli.error)"
            )

            // Left alone, the commit waits for the standby past the statement timeout (PostgreSQL does not time a
            // commit), so the API gives the connection up at its answer deadline: the same answer.
            asked = clock.now
            let slow = try await system.request(.POST, "/admin/v1/publishers", headers: system.admin, json: ["name": "standby-timeout"])
            let waited = clock.now - asked
            #expect(slow.status == 503 && slow.json["code"] as? String == "outcome_unknown", "\(slow.text)")
            #expect(waited >= .seconds(15) && waited < .seconds(28), "answered after \(waited)")

            @Sendable func names() async throws -> Set<String> {
                let listed = try await system.request(.GET, "/admin/v1/publishers", headers: system.admin)
                return Set((listed.json["publishers"] as? [[String: Any]] ?? []).compactMap { $0["name"] as? String })
            }
            // The terminated commits show; the one still waiting for the standby does not, until the standby answers.
            #expect(try await names() == ["unconfirmed-http", "unconfirmed-cli"])
            try await database.withConnection { try await $0.runScript("ALTER SYSTEM RESET synchronous_standby_names") }
            try await database.query("SELECT pg_reload_conf()")
            _ = try await Poll.until(timeout: .seconds(20), "the waiting commit to show once no standby is awaited") { () async throws -> Bool? in
                try await names() == ["unconfirmed-http", "unconfirmed-cli", "standby-timeout"] ? true : nil
            }
        }
        withExtendedLifetime(postgres) {}
    }

    @Test("publishers, apps, products, queue and dead letters from the command line; refusals exit non-zero with the API's message")
    func operatorSession() async throws {
        let system = try await TollgateSystem()
        do {
            let token = system.adminToken
            let created = try await Self.admin(system, ["publishers", "create", "--name", "CLI Publisher"], token: token)
            #expect(created.status == 0, "\(created.error)")
            let publisherId = try #require(created.json["id"] as? String)
            #expect(created.json["publisherToken"] is String)

            let app = try await Self.admin(
                system, ["apps", "create", "--publisher-id", publisherId, "--bundle-id", "com.example.cli", "--shared-secret-file", "-"],
                token: token, stdin: "cli-shared-secret\n"
            )
            #expect(app.status == 0, "\(app.error)")
            #expect(app.json["bundleId"] as? String == "com.example.cli")
            #expect(!app.output.contains("cli-shared-secret"))
            let updated = try await Self.admin(
                system, ["apps", "update", "--publisher-id", publisherId, "--bundle-id", "com.example.CLI", "--shared-secret-file", "-", "--allow-sandbox", "false"],
                token: token, stdin: "cli-right-secret\n"
            )
            #expect(updated.status == 0, "\(updated.error)")
            #expect(updated.json["allowSandbox"] as? Bool == false)
            #expect(!updated.output.contains("cli-right-secret"))
            let nothing = try await Self.admin(system, ["apps", "update", "--publisher-id", publisherId, "--bundle-id", "com.example.cli"], token: token)
            #expect(nothing.status == 64 && nothing.error.contains("nothing to change"), "\(nothing.error)")
            let removed = try await Self.admin(
                system, ["apps", "update", "--publisher-id", publisherId, "--bundle-id", "com.example.cli", "--remove-shared-secret"], token: token
            )
            #expect(removed.status == 0, "\(removed.error)")

            let product = try await Self.admin(system, [
                "products", "create", "--publisher-id", publisherId, "--bundle-id", "com.example.cli", "--product-id", "cli.coins",
                "--kind", "consumable", "--title", "Coins", "--coins", "50",
            ], token: token)
            #expect(product.status == 0, "\(product.error)")
            #expect(product.json["offerId"] as? String == "cli.coins")
            #expect(product.json["coins"] as? Int == 50)
            let productId = try #require(product.json["id"] as? String)

            let disabled = try await Self.admin(system, ["products", "disable", productId], token: token)
            #expect(disabled.json["enabled"] as? Bool == false)
            let second = try await Self.admin(system, [
                "products", "create", "--publisher-id", publisherId, "--bundle-id", "com.example.cli", "--product-id", "cli.pass",
                "--kind", "non_consumable", "--title", "Pass",
            ], token: token)
            #expect(second.status == 0, "\(second.error)")
            let listed = try await Self.admin(system, ["products", "list", "--publisher-id", publisherId], token: token)
            #expect((listed.json["products"] as? [[String: Any]])?.count == 2)
            let page = try await Self.admin(system, ["products", "list", "--publisher-id", publisherId, "--limit", "1"], token: token)
            #expect((page.json["products"] as? [[String: Any]])?.count == 1)
            let next = try #require(page.json["next"] as? String)
            let rest = try await Self.admin(system, ["products", "list", "--publisher-id", publisherId, "--limit", "1", "--after", next], token: token)
            #expect((rest.json["products"] as? [[String: Any]])?.count == 1)
            #expect(rest.json["next"] == nil)

            let publishers = try await Self.admin(system, ["publishers", "list"], token: token)
            #expect((publishers.json["publishers"] as? [[String: Any]])?.first?["name"] as? String == "CLI Publisher")
            let rotated = try await Self.admin(system, ["publishers", "rotate-credentials", publisherId], token: token)
            #expect(rotated.status == 0 && rotated.json["publisherToken"] as? String != created.json["publisherToken"] as? String)
            #expect(try await Self.admin(system, ["publishers", "disable", publisherId], token: token).json["enabled"] as? Bool == false)

            let queue = try await Self.admin(system, ["queue"], token: token)
            #expect(Set(queue.json.keys) == ["queued", "processing", "retrying", "dead"])
            #expect(try await Self.admin(system, ["dead-letters"], token: token).json["deadLetters"] is [Any])
            let paged = try await Self.admin(system, ["dead-letters", "--limit", "5", "--after", "1-0"], token: token)
            #expect(paged.status == 0 && paged.json["deadLetters"] is [Any], "\(paged.error)")
            let notCursor = try await Self.admin(system, ["dead-letters", "--after", "1-0&limit=1000"], token: token)
            #expect(notCursor.status != 0 && notCursor.error.contains("is not a page's next"), "\(notCursor.error)")

            // Refusals (4xx): the API's message on stderr, exit 1; no token or an unusable URL: one line naming it and exit 2
            // (CONTRACT.md, as for every process's configuration); a bad id: exit 64 (usage). No request made for these.
            let unknown = try await Self.admin(system, ["requeue", "00000000-0000-0000-0000-000000000000"], token: token)
            #expect(unknown.status == 1)
            #expect(unknown.error.contains("404"))
            let wrong = try await Self.admin(system, ["queue"], token: "wrong-admin-token-0123456789")
            #expect(wrong.status == 1)
            #expect(wrong.error.contains("401"))
            // What can be tried again later exits 75: no answer, or a 503 from an API whose Redis is down.
            let closed = try DedicatedRedis.freePort()
            let unreachable = try await Self.admin(system, ["queue", "--url", "http://127.0.0.1:\(closed)"], token: token)
            #expect(unreachable.status == 75, "\(unreachable.error)")
            #expect(unreachable.error.contains("cannot reach"))
            // A create without an answer may have been applied: not to be run again blindly.
            let unanswered = try await Self.admin(system, ["publishers", "create", "--name", "P", "--url", "http://127.0.0.1:\(closed)"], token: token)
            #expect(unanswered.status == 1, "\(unanswered.error)")
            #expect(unanswered.error.contains("it may have been applied"))
            try await StartupTests.withAPI(["TOLLGATE_REDIS_URL": "redis://127.0.0.1:\(closed)/0", "TOLLGATE_ADMIN_TOKEN": token]) { api in
                let unavailable = try await Self.admin(system, ["queue", "--url", "http://127.0.0.1:\(try await api.port())"], token: token)
                #expect(unavailable.status == 75, "\(unavailable.error)")
                #expect(unavailable.error.contains("503"))
                await api.stop()
            }
            let missing = try await Self.admin(system, ["queue"], token: nil)
            #expect(missing.status == 2)
            #expect(missing.error == "tollgate-api admin: invalid TOLLGATE_ADMIN_TOKEN: is not set\n")
            // Blank is unset, as the API reads it.
            let blank = try await Self.admin(system, ["queue"], token: "   ")
            #expect(blank.status == 2)
            #expect(blank.error == "tollgate-api admin: invalid TOLLGATE_ADMIN_TOKEN: is not set\n")
            for url in ["127.0.0.1:8080", "ftp://127.0.0.1:8080", "http://", "http://admin:secret@127.0.0.1:8080", "http://127.0.0.1:8080/?x=1", "http://127.0.0.1:99999", "http://127.0.0.1:0"] {
                let unusable = try await Self.admin(system, ["queue", "--url", url], token: token)
                #expect(unusable.status == 2, "\(url): \(unusable.error)")
                #expect(unusable.error.hasPrefix("tollgate-api admin: invalid --url: expected http(s)://"), "\(url)")
                #expect(!unusable.error.contains("secret"))
            }
            let proxied = try await Self.admin(system, ["queue", "--url", " " + system.apiBase + "/ "], token: token)
            #expect(proxied.status == 0, "\(proxied.error)")
            // An empty --url is unset, as an empty variable is: TOLLGATE_ADMIN_URL (the test's API) answers.
            let empty = try await Self.admin(system, ["queue", "--url", ""], token: token)
            #expect(empty.status == 0, "\(empty.error)")
            let hostile = try await Self.admin(system, ["requeue", "../publishers"], token: token)
            #expect(hostile.status != 0)
            #expect(hostile.error.contains("is not an id"))
        } catch {
            await system.shutdown()
            throw error
        }
        await system.shutdown()
    }
}
