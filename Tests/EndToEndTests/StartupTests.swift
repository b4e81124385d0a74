import AsyncHTTPClient
import Foundation
import Shared
import Testing
import TestSupport

/// CONTRACT.md: a bad configuration value, from a variable or the flag that overrides it, stops a process
/// at start with one line naming the variable and exit code 2.
@Suite("Start-up configuration")
struct StartupTests {
    @Test(
        "a bad value exits 2 at once with one line naming the variable",
        arguments: [
            ("tollgate-api", ["serve", "--port", "abc"], [:], "TOLLGATE_HTTP_PORT"),
            ("tollgate-api", ["serve"], ["TOLLGATE_HTTP_HOST": "not a host"], "TOLLGATE_HTTP_HOST"),
            ("tollgate-api", ["serve"], ["TOLLGATE_DATABASE_URL": "postgres://tollgate@127.0.0.1:1/tollgate?sslmode=bogus"], "TOLLGATE_DATABASE_URL"),
            ("tollgate-api", ["migrate"], ["TOLLGATE_DATABASE_URL": "postgres://tollgate@127.0.0.1:1/tollgate?no_such_option=1"], "TOLLGATE_DATABASE_URL"),
            ("tollgate-worker", ["--metrics-port", "99999"], [:], "TOLLGATE_METRICS_PORT"),
            ("tollgate-worker", ["--concurrency", "lots"], [:], "TOLLGATE_WORKER_CONCURRENCY"),
            // An address that cannot be bound is refused like a bad value (the host, here, does not resolve).
            ("appstore-emulator", ["--host", "127.0.0.1:9090", "--port", "0"], [:], "APPSTORE_EMULATOR_HOST"),
            ("appstore-emulator", ["--port", "0", "--port-file", NSTemporaryDirectory()], [:], "APPSTORE_EMULATOR_PORT_FILE"),
        ] as [(String, [String], [String: String], String)]
    )
    func badValueExits2(executable: String, arguments: [String], environment: [String: String], variable: String) async throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "\(try TestEnvironment.binDirectory())/\(executable)")
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        let stderr = Pipe()
        process.standardError = stderr
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        do {
            _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(20), "\(executable) to exit") { process.isRunning ? nil : true }
        } catch {
            // It started instead of refusing the value: stop it, and let the expectations below say so.
            process.terminate()
            process.waitUntilExit()
        }
        let error = String(decoding: stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let status = process.terminationStatus
        #expect(status == 2, "\(executable) \(arguments): \(error)")
        let lines = error.split(separator: "\n")
        #expect(lines.count == 1, "one line: \(error)")
        #expect(error.contains(variable))
    }

    @Test("a worker started while Redis is away answers live (not ready) at once, and stops on SIGTERM with exit 0")
    func workerWaitingForRedis() async throws {
        let worker = try ManagedProcess(
            executable: "tollgate-worker",
            environment: [
                "TOLLGATE_REDIS_URL": "redis://127.0.0.1:1/0", "TOLLGATE_DATABASE_URL": try TestEnvironment.databaseURL(),
                "TOLLGATE_METRICS_PORT": "0", "TOLLGATE_HTTP_HOST": "127.0.0.1",
            ],
            portFileVariable: "TOLLGATE_METRICS_PORT_FILE"
        )
        let http = HTTPClient(eventLoopGroupProvider: .singleton)
        do {
            let port = try await worker.port(timeout: .seconds(30))
            func status(_ path: String) async throws -> UInt {
                try await http.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)\(path)"), timeout: .seconds(10)).status.code
            }
            #expect(try await status("/health/live") == 200)
            #expect(try await status("/health/ready") == 503)
            // Every error is JSON, on the worker's port too.
            let unknown = try await http.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)/nope"), timeout: .seconds(10))
            #expect(unknown.status == .notFound)
            #expect(String(buffer: try await unknown.body.collect(upTo: 1 << 16)).contains(#""code":"not_found""#))
            var post = HTTPClientRequest(url: "http://127.0.0.1:\(port)/metrics")
            post.method = .POST
            let wrongMethod = try await http.execute(post, timeout: .seconds(10))
            #expect(wrongMethod.status == .methodNotAllowed)
            #expect(wrongMethod.headers.first(name: "Allow") == "GET, HEAD")
            #expect(String(buffer: try await wrongMethod.body.collect(upTo: 1 << 16)).contains(#""code":"method_not_allowed""#))
            // HEAD answers what GET would, without a body, on one connection (a body would corrupt the next answer).
            for path in ["/health/live", "/health/ready", "/metrics", "/nope"] {
                var head = HTTPClientRequest(url: "http://127.0.0.1:\(port)\(path)")
                head.method = .HEAD
                let answer = try await http.execute(head, timeout: .seconds(10))
                #expect(answer.status.code == (try await status(path)), "\(path)")
                #expect(try await answer.body.collect(upTo: 1 << 16).readableBytes == 0, "\(path)")
            }
            // The consumer's first try runs alongside the server's start: wait for its line, do not bet on it.
            _ = try await Poll.until(timeout: .seconds(30), "the worker's 'Redis not ready' line") {
                worker.log().contains("Redis not ready; retrying") ? true : nil
            }
            worker.signal(SIGTERM)
            #expect(try await worker.waitForExit(timeout: .seconds(30)) == 0, "\(worker.logTail())")
        } catch {
            worker.signal(SIGKILL)
            _ = try? await worker.waitForExit(timeout: .seconds(10))
            try? await http.shutdown()
            throw error
        }
        try await http.shutdown()
    }

    @Test("a worker whose database PostgreSQL refuses says so in its log at once, not at debug level")
    func workerWithRefusedDatabase() async throws {
        let database = try #require(URLComponents(string: try TestEnvironment.databaseURL()))
        var missing = database
        missing.path = "/no_such_database_\(UUID().uuidString.prefix(8).lowercased())"
        let worker = try ManagedProcess(
            executable: "tollgate-worker",
            environment: [
                "TOLLGATE_REDIS_URL": try TestEnvironment.redisURL(), "TOLLGATE_DATABASE_URL": try #require(missing.string),
                "TOLLGATE_QUEUE_PREFIX": TestEnvironment.uniquePrefix(), "TOLLGATE_METRICS_PORT": "0", "TOLLGATE_HTTP_HOST": "127.0.0.1",
            ],
            portFileVariable: "TOLLGATE_METRICS_PORT_FILE"
        )
        do {
            let line = try await Poll.until(timeout: .seconds(30), "the worker's line about the database") {
                worker.log().split(separator: "\n").first { $0.contains("cannot read the database schema") }
            }
            #expect(line.contains(#""level":"error""#), "\(line)")
            #expect(line.contains("does not exist"), "\(line)")
            worker.signal(SIGTERM)
            #expect(try await worker.waitForExit(timeout: .seconds(30)) == 0, "\(worker.logTail())")
        } catch {
            await worker.stop()
            throw error
        }
    }

    /// The API and the worker as serving processes: executable, arguments, the variable that picks any free
    /// port, and the one naming the file it writes that port to.
    static let servingProcesses: [(String, [String], [String: String], String)] = [
        ("tollgate-api", ["serve"], ["TOLLGATE_HTTP_PORT": "0"], "TOLLGATE_HTTP_PORT_FILE"),
        ("tollgate-worker", [], ["TOLLGATE_METRICS_PORT": "0"], "TOLLGATE_METRICS_PORT_FILE"),
    ]

    /// What Redis refuses of a `TOLLGATE_REDIS_URL`.
    enum RedisRefusal: CaseIterable {
        /// A database number it does not have.
        case database
        /// A password, where it has none.
        case password
        /// An ACL user without the access channel (Redis 7 gives new users no channel unless told).
        case channel
    }

    @Test(
        "Redis refusing the URL's database, password or user's channel stops a process with exit 2, its last line naming the variable",
        arguments: ["tollgate-api", "tollgate-worker"], RedisRefusal.allCases
    )
    func refusedRedisURLExits2(executable: String, refusal: RedisRefusal) async throws {
        let password = "secret-\(UInt64.random(in: 1...UInt64.max))"
        let user = "tg_test_\(UInt32.random(in: 0...UInt32.max))"
        let admin = try TestEnvironment.redis(connections: 1)
        let url: String
        switch refusal {
        // Redis has 16 databases unless configured otherwise.
        case .database: url = try TestEnvironment.redisURL(database: 9999)
        // The test Redis has no password, so any is refused.
        case .password: url = try TestEnvironment.redisURL(password: password, database: 0)
        case .channel:
            try await admin.send("ACL", "SETUSER", user, "on", ">\(password)", "~*", "+@all", "resetchannels")
            url = try TestEnvironment.redisURL(user: user, password: password, database: 0)
        }
        let api = executable == "tollgate-api"
        let process = try ManagedProcess(
            executable: executable, arguments: api ? ["serve"] : [],
            environment: [
                "TOLLGATE_REDIS_URL": url, "TOLLGATE_DATABASE_URL": try TestEnvironment.databaseURL(), "TOLLGATE_HTTP_HOST": "127.0.0.1",
                api ? "TOLLGATE_HTTP_PORT" : "TOLLGATE_METRICS_PORT": "0", "TOLLGATE_QUEUE_PREFIX": TestEnvironment.uniquePrefix(),
            ],
            portFileVariable: api ? "TOLLGATE_HTTP_PORT_FILE" : "TOLLGATE_METRICS_PORT_FILE"
        )
        let exit: Int32
        do {
            exit = try await process.waitForExit(timeout: .seconds(30))
        } catch {
            // It kept retrying instead of stopping.
            await process.stop()
            _ = try? await admin.send("ACL", "DELUSER", user)
            await admin.shutdown()
            throw error
        }
        _ = try? await admin.send("ACL", "DELUSER", user)
        await admin.shutdown()
        #expect(exit == 2, "\(process.logTail())")
        let log = process.log()
        let last = log.split(separator: "\n").last.map(String.init) ?? ""
        #expect(last.hasPrefix("\(executable): invalid TOLLGATE_REDIS_URL: Redis refused it"), "\(process.logTail())")
        let expected = switch refusal {
        case .database: "DB index"
        case .password: "AUTH"
        case .channel: "NOPERM"
        }
        #expect(last.contains(expected), "\(last)")
        #expect(!log.contains(password))
        #expect(!log.contains("Redis not ready"), "no retry makes a refused value right: \(process.logTail())")
    }

    @Test(
        "a process whose database lacks a migration is not ready, and a worker takes no job, until the migration runs",
        arguments: Self.servingProcesses
    )
    func schemaBehind(executable: String, arguments: [String], environment: [String: String], portFileVariable: String) async throws {
        let latest = try #require(Migrations.all.last)
        let databaseURL = try await TestEnvironment.freshDatabase(migrations: Array(Migrations.all.dropLast()))
        let prefix = TestEnvironment.uniquePrefix()
        let redis = try TestEnvironment.redis()
        let queue = ReceiptQueue(redis: redis, prefix: prefix)
        let process = try ManagedProcess(
            executable: executable, arguments: arguments,
            environment: environment.merging([
                "TOLLGATE_REDIS_URL": try TestEnvironment.redisURL(), "TOLLGATE_DATABASE_URL": databaseURL,
                "TOLLGATE_HTTP_HOST": "127.0.0.1", "TOLLGATE_QUEUE_PREFIX": prefix,
            ]) { _, new in new },
            portFileVariable: portFileVariable
        )
        let http = HTTPClient(eventLoopGroupProvider: .singleton)
        let database = PostgresClient(url: databaseURL, connections: 1)
        do {
            try await queue.prepare()
            // A job waiting in the queue: a worker that ran ahead of the schema would spend its attempts.
            let job = ReceiptJob(
                jobId: UUID().uuidString.lowercased(), publisherId: UUID(), customerEmail: "schema@example.com", offerId: "S123456789_ZZ",
                transactionId: nil, receiptData: "AAAA", appType: .ios, ipAddress: nil, acceptedAtMilliseconds: WallClock.nowMilliseconds()
            )
            guard case .created = try await queue.enqueue(job, keyTTLSeconds: 3600) else { throw ManagedProcess.Failure("not created") }
            let port = try await process.port(timeout: .seconds(30))
            func ready() async throws -> (UInt, String) {
                let answer = try await http.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)/health/ready"), timeout: .seconds(10))
                return (answer.status.code, String(buffer: try await answer.body.collect(upTo: 1 << 16)))
            }
            // Redis and PostgreSQL both answer: what keeps it unready is the schema, and it says so.
            let behind = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(50), "readiness to name the schema") {
                let (status, body) = try await ready()
                return status == 503 && body.contains("migration \(latest.version) not applied") ? body : nil
            }
            #expect(behind.contains("tollgate-api migrate"), "\(behind)")
            if executable == "tollgate-worker" {
                _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(50), "the worker to say what it waits for") {
                    process.log().contains("waiting for the database schema") ? true : nil
                }
                #expect(try await queue.record(jobId: job.jobId)?.status == .queued)
            }
            try await Migrator(database: database, logger: TestEnvironment.migrationLogger).migrate()
            _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(50), "readiness once migrated") {
                try await ready().0 == 200 ? true : nil
            }
            if executable == "tollgate-worker" {
                // Taken now: its publisher does not exist, so it ends; what matters is that it left the queue.
                _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(50), "the worker to take the job") {
                    try await queue.record(jobId: job.jobId).map { $0.status != .queued ? true : nil } ?? nil
                }
            }
            process.signal(SIGTERM)
            #expect(try await process.waitForExit(timeout: .seconds(30)) == 0, "\(process.logTail())")
        } catch {
            await process.stop()
            try? await http.shutdown()
            await redis.shutdown()
            await database.shutdown()
            throw error
        }
        try await http.shutdown()
        await redis.shutdown()
        await database.shutdown()
    }

    /// Runs `body` with an API on a free port against the tests' Redis and PostgreSQL, with `settings` besides;
    /// stops the API if `body` throws (a body that passes has stopped it itself).
    static func withAPI(_ settings: [String: String], _ body: (ManagedProcess) async throws -> Void) async throws {
        let process = try ManagedProcess(
            executable: "tollgate-api", arguments: ["serve"],
            environment: [
                "TOLLGATE_REDIS_URL": try TestEnvironment.redisURL(), "TOLLGATE_DATABASE_URL": try TestEnvironment.databaseURL(),
                "TOLLGATE_HTTP_HOST": "127.0.0.1", "TOLLGATE_HTTP_PORT": "0",
            ].merging(settings) { _, new in new },
            portFileVariable: "TOLLGATE_HTTP_PORT_FILE"
        )
        do { try await body(process) } catch {
            await process.stop()
            throw error
        }
    }

    @Test("the emulator's stop waits for a request in progress at most 10 s, then closes it and exits 0", .timeLimit(.minutes(2)))
    func emulatorStalledRequestDoesNotHoldTheStop() async throws {
        let emulator = try ManagedProcess(
            executable: "appstore-emulator", arguments: ["--port", "0"], environment: [:], portFileVariable: "APPSTORE_EMULATOR_PORT_FILE"
        )
        do {
            // 10 s for the request, then the connection is closed; the rest, short of the 30 s the wait for the
            // exit allows, is a loaded machine's room.
            try await Self.expectStopDespiteStalledRequest(
                emulator, live: "/health", answeredBy: "\r\n\r\nok", stalled: "/verifyReceipt", within: .seconds(25)
            )
        } catch {
            await emulator.stop()
            throw error
        }
    }

    @Test(
        "the API's stop waits for a request in progress no longer than TOLLGATE_SHUTDOWN_GRACE_S, then closes it and exits 0",
        .timeLimit(.minutes(2))
    )
    func stalledRequestDoesNotHoldTheStop() async throws {
        try await Self.withAPI(["TOLLGATE_SHUTDOWN_GRACE_S": "1"]) { process in
            // 1 s of grace for the request. Held past it, the API would exit 1 at its own deadline (grace + 5 s; the
            // body's deadline is the default 75 s): its exit 0 is the bound, measured by the API itself, not by a
            // clock in this process that a loaded machine may hold back.
            try await Self.expectStopDespiteStalledRequest(process, live: "/health/live", answeredBy: "\"ok\"}", stalled: "/api/3.0/json", within: nil)
        }
    }

    @Test(
        "a request still waiting for a PostgreSQL connection when the API's grace runs out is cut off with nothing written and no error line, not a 500",
        .timeLimit(.minutes(2))
    )
    func requestCutOffByTheStop() async throws {
        try await Self.withListingHoldingTheConnection { process, listing, first, release in
            let second = try #require(LoopbackSocket(port: try await process.port()))
            #expect(second.write(listing))
            _ = try await Poll.until(timeout: .seconds(30), "the API to read B's request") { second.peerReadEverything() ? true : nil }

            let signalled = ContinuousClock.now
            process.signal(SIGTERM)
            // The grace over, the server closes its connections as it cancels their handlers: B's wait ends with
            // CancellationError, which is the shutdown's doing, not a fault (an answer, if one could still be
            // written, would be 503 shutting_down).
            let cut = try await second.read(until: "}", seconds: 30)
            #expect(cut.isEmpty || cut.hasPrefix("HTTP/1.1 503"), "\(cut)")
            #expect(try await second.closedByPeer(within: 10))
            try await release()
            let releasedAfter = ContinuousClock.now - signalled
            // A held the connection in its query, which cancellation cannot reach: the stop waits for it, up to
            // its deadline (grace + 5 s = 6 s from the signal). Released about 1 s after the signal, A ends well
            // before: exit 0. Only a test held back for seconds by a loaded machine may release it so late
            // that the deadline comes first, and then the process must say so and exit 1.
            #expect(try await first.closedByPeer(within: 10))
            let status = try await process.waitForExit(timeout: .seconds(30))
            let log = process.logTail(lines: 1000)
            if releasedAfter > .seconds(2), status == 1 {
                #expect(log.contains("the API did not stop within 6 s of the signal"), "released \(releasedAfter) after the signal: \(process.logTail())")
            } else {
                #expect(status == 0, "released \(releasedAfter) after the signal: \(process.logTail())")
            }
            #expect(!log.contains("request failed"), "\(process.logTail())")
        }
    }

    @Test(
        "an API whose stop is held past TOLLGATE_SHUTDOWN_GRACE_S + 5 s by a PostgreSQL call that ignores cancellation says so and exits 1",
        .timeLimit(.minutes(2))
    )
    func stuckStopExits1() async throws {
        try await Self.withListingHoldingTheConnection { process, _, _, _ in
            process.signal(SIGTERM)
            // The lock is held until the process has gone: A's query (statement timeout 15 s) outlasts 1 + 5 s. The
            // deadline's line says the deadline, not the statement timeout, ended it.
            let status = try await process.waitForExit(timeout: .seconds(30))
            #expect(status == 1, "\(process.logTail())")
            #expect(process.logTail(lines: 1000).contains("the API did not stop within 6 s of the signal"), "\(process.logTail())")
        }
    }

    /// Starts the API on a fresh database with one PostgreSQL connection and a grace of 1 s, and takes that
    /// connection: a listing of products (request A, written on `first`) waits on a lock the test holds on
    /// `products` until `release` has given it back (it returns then) or `body` returns. `listing` is that
    /// request, to send again.
    static func withListingHoldingTheConnection(
        _ body: (_ process: ManagedProcess, _ listing: String, _ first: LoopbackSocket, _ release: @escaping @Sendable () async throws -> Void) async throws -> Void
    ) async throws {
        let url = try await TestEnvironment.freshDatabase()
        let database = PostgresClient(url: url, connections: 2)
        let token = "admin-" + TestEnvironment.uniquePrefix()
        let settings = ["TOLLGATE_DATABASE_URL": url, "TOLLGATE_DATABASE_POOL_SIZE": "1", "TOLLGATE_SHUTDOWN_GRACE_S": "1", "TOLLGATE_ADMIN_TOKEN": token]
        try await TestEnvironment.using(database) {
            try await Self.withAPI(settings) { process in
                let port = try await process.port()
                func request(_ method: String, _ path: String, body: String = "") -> String {
                    "\(method) \(path) HTTP/1.1\r\nHost: tollgate\r\nAuthorization: Bearer \(token)\r\nContent-Type: application/json\r\n"
                        + "Content-Length: \(body.utf8.count)\r\n\r\n\(body)"
                }
                let admin = try #require(LoopbackSocket(port: port))
                #expect(admin.write(request("POST", "/admin/v1/publishers", body: #"{"name":"held"}"#)))
                let created = try await admin.read(until: "\"basicAuth\"", seconds: 30)
                let publisherId = try #require(created.firstMatch(of: /"id":"([0-9a-f-]{36})"/)?.1, "\(created)")
                let listing = request("GET", "/admin/v1/products?publisherId=\(publisherId)")

                let (released, release) = AsyncStream<Void>.makeStream()
                let (locked, locking) = AsyncStream<Void>.makeStream()
                let holder = Task {
                    try await database.withConnection { session in
                        try await session.query("BEGIN")
                        try await session.query("LOCK TABLE products IN ACCESS EXCLUSIVE MODE")
                        locking.yield()
                        for await _ in released { break }
                        try await session.query("ROLLBACK")
                    }
                }
                for await _ in locked { break }
                do {
                    let first = try #require(LoopbackSocket(port: port))
                    #expect(first.write(listing))
                    _ = try await Poll.until(timeout: .seconds(30), "the listing to wait on the lock") {
                        try await database.query(
                            "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%FROM products%'"
                        ).first
                    }
                    try await body(process, listing, first) {
                        release.finish()
                        try await holder.value
                    }
                } catch {
                    release.finish()
                    _ = try? await holder.value
                    throw error
                }
                release.finish()
                try await holder.value
            }
        }
    }

    /// One write: a whole request (`GET live`, whose answer ends with `marker`), then the head of a POST to `stalled`
    /// and 1 byte of its 100. Once the first one's answer is back, the server has read the second one's head too,
    /// and waits for its body. A SIGTERM then must end the process with exit 0 (within `limit`, when given), closing
    /// the connection.
    static func expectStopDespiteStalledRequest(
        _ process: ManagedProcess, live: String, answeredBy marker: String, stalled: String, within limit: Duration?
    ) async throws {
        let client = try #require(LoopbackSocket(port: try await process.port()))
        let head = "POST \(stalled) HTTP/1.1\r\nHost: tollgate\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
        #expect(client.write("GET \(live) HTTP/1.1\r\nHost: tollgate\r\n\r\n" + head))
        let first = try await client.read(until: marker, seconds: 30)
        #expect(first.hasPrefix("HTTP/1.1 200"), "\(first)")
        let signalled = ContinuousClock.now
        process.signal(SIGTERM)
        #expect(try await process.waitForExit(timeout: .seconds(30)) == 0, "\(process.logTail())")
        let took = ContinuousClock.now - signalled
        if let limit { #expect(took < limit, "stopped \(took) after SIGTERM") }
        #expect(try await client.closedByPeer(within: 5))
    }

    @Test(
        "the API and a worker's metrics port close a connection that goes quiet half-way through a request, or idle between requests, or whose body trickles in for longer than TOLLGATE_HTTP_IDLE_TIMEOUT_S",
        .timeLimit(.minutes(2)), arguments: Self.servingProcesses
    )
    func quietConnectionsClosed(executable: String, arguments: [String], environment: [String: String], portFileVariable: String) async throws {
        let process = try ManagedProcess(
            executable: executable, arguments: arguments,
            environment: environment.merging([
                "TOLLGATE_REDIS_URL": try TestEnvironment.redisURL(), "TOLLGATE_DATABASE_URL": try TestEnvironment.databaseURL(),
                "TOLLGATE_HTTP_HOST": "127.0.0.1", "TOLLGATE_HTTP_IDLE_TIMEOUT_S": "1", "TOLLGATE_QUEUE_PREFIX": TestEnvironment.uniquePrefix(),
            ]) { _, new in new },
            portFileVariable: portFileVariable
        )
        do {
            let port = try await process.port()
            // The API reads this route's body; the worker answers it without reading, and then drains the body.
            let post = "POST \(executable == "tollgate-api" ? "/api/3.0/json" : "/metrics") HTTP/1.1\r\nHost: tollgate\r\n"
                + "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
            let halfHead = try #require(LoopbackSocket(port: port))
            #expect(halfHead.write("GET /health/live HTTP/1.1\r\nHost: tollgate\r\n"))
            let halfBody = try #require(LoopbackSocket(port: port))
            #expect(halfBody.write(post))
            let idle = try #require(LoopbackSocket(port: port))
            #expect(idle.write("GET /health/live HTTP/1.1\r\nHost: tollgate\r\n\r\n"))
            #expect(try await idle.read(until: "\"ok\"}", seconds: 30).hasPrefix("HTTP/1.1 200"))
            #expect(try await halfHead.closedByPeer(within: 30))
            #expect(try await halfBody.closedByPeer(within: 30))
            #expect(try await idle.closedByPeer(within: 30))

            // A byte every 250 ms never leaves the connection quiet for the idle timeout: the body's own deadline
            // (the same 1 s from the head) closes it.
            let trickle = try #require(LoopbackSocket(port: port))
            let started = ContinuousClock.now
            #expect(trickle.write(post))
            var closed = false
            while !closed, ContinuousClock.now - started < .seconds(30) {
                closed = try await trickle.closedByPeer(within: .milliseconds(250))
                if !closed { _ = trickle.write(" ") }
            }
            let took = ContinuousClock.now - started
            #expect(closed, "a trickled body held its connection for \(took)")
            // Closed at all: a byte every 250 ms keeps the idle timeout from ever closing it, so only the body's deadline can.
            #expect(took >= .milliseconds(900), "closed \(took) after the head")

            process.signal(SIGTERM)
            #expect(try await process.waitForExit(timeout: .seconds(30)) == 0, "\(process.logTail())")
            // A body cut off is the client's doing, not a fault: no error line an anonymous client could repeat.
            #expect(!process.log().contains(#""msg":"request failed""#), "\(process.logTail())")
        } catch {
            await process.stop()
            throw error
        }
    }

    @Test(
        "Redis refusing a running process's credentials (a password rotated in Redis first) makes it unready, never stops it, and it is ready again once they are accepted",
        .timeLimit(.minutes(2)), arguments: Self.servingProcesses
    )
    func credentialsRefusedWhileRunning(executable: String, arguments: [String], environment: [String: String], portFileVariable: String) async throws {
        let user = "tg_test_\(UInt32.random(in: 0...UInt32.max))"
        let password = "secret-\(UInt64.random(in: 1...UInt64.max))"
        let admin = try TestEnvironment.redis(connections: 1)
        try await admin.send("ACL", "SETUSER", user, "on", ">\(password)", "~*", "&*", "+@all")
        let process = try ManagedProcess(
            executable: executable, arguments: arguments,
            environment: environment.merging([
                "TOLLGATE_REDIS_URL": try TestEnvironment.redisURL(user: user, password: password, database: 0),
                "TOLLGATE_DATABASE_URL": try await TestEnvironment.freshDatabase(), "TOLLGATE_HTTP_HOST": "127.0.0.1",
                "TOLLGATE_QUEUE_PREFIX": TestEnvironment.uniquePrefix(),
            ]) { _, new in new },
            portFileVariable: portFileVariable
        )
        let http = HTTPClient(eventLoopGroupProvider: .singleton)
        do {
            let port = try await process.port()
            // The last answer (or why there was none), for a failure's message.
            var last = ""
            func ready() async -> UInt? {
                do {
                    let response = try await http.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)/health/ready"), timeout: .seconds(10))
                    last = "\(response.status.code) \(String(buffer: try await response.body.collect(upTo: 1 << 16)))"
                    return response.status.code
                } catch {
                    last = "\(error)"
                    return nil
                }
            }
            func poll(_ what: String, until status: UInt, timeout: Duration = .seconds(30)) async throws {
                do {
                    _ = try await Poll.until(timeout: timeout, "\(executable) \(what)") { await ready() == status ? true : nil }
                } catch {
                    Issue.record("\(executable) not \(what): it last answered \(last); its log ends: \(process.logTail())")
                    throw error
                }
            }
            try await poll("ready", until: 200)
            // Rotated in Redis first, and its connections cut: every new one is refused.
            try await admin.send("ACL", "SETUSER", user, "resetpass", ">another-\(password)")
            _ = try await admin.send("CLIENT", "KILL", "USER", user)
            try await poll("unready", until: 503)
            if executable == "tollgate-worker" {
                _ = try await Poll.until(timeout: .seconds(30), "the refusal logged") {
                    process.log().contains("check TOLLGATE_REDIS_URL") ? true : nil
                }
            }
            #expect(process.isRunning, "a refusal while running must not stop it (exit 2 is never restarted): \(process.logTail())")
            // Put right: ready again, without a restart.
            try await admin.send("ACL", "SETUSER", user, "resetpass", ">\(password)")
            try await poll("ready again", until: 200, timeout: .seconds(60))
            process.signal(SIGTERM)
            #expect(try await process.waitForExit(timeout: .seconds(30)) == 0, "\(process.logTail())")
            #expect(!process.log().contains(password), "the password is never logged")
        } catch {
            await process.stop()
            try? await http.shutdown()
            _ = try? await admin.send("ACL", "DELUSER", user)
            await admin.shutdown()
            throw error
        }
        try await http.shutdown()
        _ = try? await admin.send("ACL", "DELUSER", user)
        await admin.shutdown()
    }

    @Test(
        "a Redis that could lose accepted receipts (AOF off, eviction allowed) is named in two warnings when the API or a worker starts",
        .timeLimit(.minutes(2)), arguments: Self.servingProcesses
    )
    func unsafeRedisWarned(executable: String, arguments: [String], environment: [String: String], portFileVariable: String) async throws {
        let redis = try await DedicatedRedis(arguments: ["--appendonly", "no", "--maxmemory-policy", "allkeys-lru"])
        let process = try ManagedProcess(
            executable: executable, arguments: arguments,
            environment: environment.merging([
                "TOLLGATE_REDIS_URL": redis.url, "TOLLGATE_DATABASE_URL": try TestEnvironment.databaseURL(), "TOLLGATE_HTTP_HOST": "127.0.0.1",
            ]) { _, new in new },
            portFileVariable: portFileVariable
        )
        do {
            _ = try await Poll.until(timeout: .seconds(30), "both warnings logged") {
                let log = process.log()
                return log.contains("Redis runs with appendonly=no") && log.contains(#""maxmemory-policy":"allkeys-lru""#) ? true : nil
            }
            process.signal(SIGTERM)
            #expect(try await process.waitForExit(timeout: .seconds(30)) == 0, "\(process.logTail())")
        } catch {
            await process.stop()
            await redis.shutdown()
            throw error
        }
        await redis.shutdown()
    }

    @Test("`tollgate-api migrate` applies what a database lacks and exits 0, says it is up to date the second time, and exits 1 (not 2: systemd retries) while PostgreSQL is unreachable")
    func migrateCommand() async throws {
        let latest = try #require(Migrations.all.last)
        let behind = try await TestEnvironment.freshDatabase(migrations: Array(Migrations.all.dropLast()))
        func migrate(_ url: String) async throws -> (exit: Int32, log: String) {
            let process = try ManagedProcess(executable: "tollgate-api", arguments: ["migrate"], environment: ["TOLLGATE_DATABASE_URL": url], portFileVariable: nil)
            let exit = try await process.waitForExit(timeout: .seconds(60))
            return (exit, process.log())
        }
        let first = try await migrate(behind)
        #expect(first.exit == 0, "\(first.log)")
        #expect(first.log.contains("applied migrations \(latest.version)"), "\(first.log)")
        let second = try await migrate(behind)
        #expect(second.exit == 0, "\(second.log)")
        #expect(second.log.contains("schema is up to date"), "\(second.log)")
        // Rolled back to an older build: nothing to apply, and it says a newer build migrated the database.
        let database = PostgresClient(url: behind, connections: 1)
        try await TestEnvironment.using(database) {
            try await database.query("INSERT INTO schema_migrations (version, name) VALUES (9999, 'next')")
        }
        let older = try await migrate(behind)
        #expect(older.exit == 0, "\(older.log)")
        #expect(older.log.contains("the database has migrations this build does not know (9999)"), "\(older.log)")
        let unreachable = try await migrate("postgres://tollgate@127.0.0.1:1/tollgate")
        #expect(unreachable.exit == 1, "\(unreachable.log)")
        #expect(unreachable.log.contains("tollgate-api migrate:"), "\(unreachable.log)")
    }

    @Test(
        "a listen address that is no address of this machine stops the API and the worker with exit 2 and one line naming TOLLGATE_HTTP_HOST",
        arguments: Self.servingProcesses
    )
    func foreignListenAddress(executable: String, arguments: [String], environment: [String: String], portFileVariable: String) async throws {
        let process = try ManagedProcess(
            executable: executable, arguments: arguments,
            environment: environment.merging([
                "TOLLGATE_REDIS_URL": try TestEnvironment.redisURL(), "TOLLGATE_DATABASE_URL": try TestEnvironment.databaseURL(),
                // TEST-NET-1 (RFC 5737): never an address of this machine.
                "TOLLGATE_HTTP_HOST": "192.0.2.1", "TOLLGATE_QUEUE_PREFIX": TestEnvironment.uniquePrefix(),
            ]) { _, new in new },
            portFileVariable: nil
        )
        let exit: Int32
        do { exit = try await process.waitForExit(timeout: .seconds(30)) } catch {
            await process.stop()
            throw error
        }
        #expect(exit == 2, "\(process.logTail())")
        let last = process.log().split(separator: "\n").last.map(String.init) ?? ""
        #expect(last.hasPrefix("\(executable): invalid TOLLGATE_HTTP_HOST: cannot listen on 192.0.2.1"), "\(process.logTail())")
    }

    @Test(
        "a process whose Redis takes connections and never answers stops on SIGTERM with exit 0",
        arguments: Self.servingProcesses
    )
    func stopWhileRedisHangs(executable: String, arguments: [String], environment: [String: String], portFileVariable: String) async throws {
        // The listener holds the connections open until the process has exited.
        try await SilentListener.with { redis in
            let process = try ManagedProcess(
                executable: executable, arguments: arguments,
                environment: environment.merging([
                    "TOLLGATE_REDIS_URL": "redis://127.0.0.1:\(redis.port)/0", "TOLLGATE_DATABASE_URL": try TestEnvironment.databaseURL(),
                    "TOLLGATE_HTTP_HOST": "127.0.0.1",
                ]) { _, new in new },
                portFileVariable: portFileVariable
            )
            do {
                // Its first command to Redis now waits for an answer that never comes (10 s, then a retry): a
                // SIGTERM from here on must stop it gracefully, not kill it.
                _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(20), "\(executable) to send Redis a command") {
                    redis.bytesReceived() > 0 ? true : nil
                }
                process.signal(SIGTERM)
                #expect(try await process.waitForExit(timeout: .seconds(30)) == 0, "\(process.logTail())")
            } catch {
                await process.stop()
                throw error
            }
        }
    }
}
