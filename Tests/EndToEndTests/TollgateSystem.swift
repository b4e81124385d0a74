import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Shared
import TestSupport

/// A whole Tollgate running as real processes — emulator, API, workers — on the test Redis and a fresh
/// PostgreSQL database, driven over HTTP like a publisher's middleware would.
final class TollgateSystem: @unchecked Sendable {
    // @unchecked Sendable: the mutable `workers`, `moreAPIs` and `emulator` are only touched by the single test that
    // owns the system, sequentially.
    var emulator: ManagedProcess
    let emulatorPort: Int
    let api: ManagedProcess
    var workers: [ManagedProcess] = []
    /// API processes started after the first (``startAPI()``).
    private var moreAPIs: [ManagedProcess] = []
    var workerPorts: [String: Int] = [:]
    let apiBase: String
    let emulatorBase: String
    let databaseURL: String
    let prefix: String
    let adminToken = "e2e-admin-token-" + UUID().uuidString
    let http = HTTPClient(eventLoopGroupProvider: .singleton)
    let database: PostgresClient
    let workerEnvironment: [String: String]

    /// Starts the emulator and the API; workers start with ``startWorker(name:)``.
    /// `redisURL`/`databaseURL` point the system at servers of the test's own (for outages); by default it
    /// uses the shared test Redis and a fresh database on the shared PostgreSQL.
    init(extraEnvironment: [String: String] = [:], redisURL: String? = nil, databaseURL: String? = nil) async throws {
        if let databaseURL {
            self.databaseURL = databaseURL
        } else {
            self.databaseURL = try await TestEnvironment.freshDatabase()
        }
        self.prefix = TestEnvironment.uniquePrefix()
        self.database = PostgresClient(url: self.databaseURL, connections: 2)
        // A port outside the kernel's range for outgoing connections: tests stop the emulator and start it
        // again on the same port (``startEmulator()``).
        self.emulator = try ManagedProcess(
            executable: "appstore-emulator", arguments: ["--host", "127.0.0.1", "--port", String(try DedicatedRedis.freePort())], environment: [:],
            portFileVariable: "APPSTORE_EMULATOR_PORT_FILE"
        )
        self.emulatorPort = try await self.emulator.port()
        self.emulatorBase = "http://127.0.0.1:\(self.emulatorPort)"
        var environment = [
            "TOLLGATE_DATABASE_URL": self.databaseURL,
            "TOLLGATE_REDIS_URL": try redisURL ?? TestEnvironment.redisURL(),
            "TOLLGATE_QUEUE_PREFIX": self.prefix,
            "TOLLGATE_ADMIN_TOKEN": self.adminToken,
            "TOLLGATE_HTTP_HOST": "127.0.0.1",
            "TOLLGATE_HTTP_PORT": "0",
            "TOLLGATE_METRICS_PORT": "0",
            "TOLLGATE_APPLE_PRODUCTION_URL": "\(self.emulatorBase)/verifyReceipt",
            "TOLLGATE_APPLE_SANDBOX_URL": "\(self.emulatorBase)/sandbox/verifyReceipt",
            "TOLLGATE_LOG_LEVEL": "info",
        ]
        for (key, value) in extraEnvironment { environment[key] = value }
        self.workerEnvironment = environment
        self.api = try ManagedProcess(executable: "tollgate-api", arguments: ["serve"], environment: environment, portFileVariable: "TOLLGATE_HTTP_PORT_FILE")
        self.apiBase = "http://127.0.0.1:\(try await self.api.port())"
    }

    /// Starts one worker process.
    @discardableResult
    func startWorker(name: String) async throws -> ManagedProcess {
        var environment = self.workerEnvironment
        environment["TOLLGATE_WORKER_NAME"] = name
        let worker = try ManagedProcess(executable: "tollgate-worker", environment: environment, portFileVariable: "TOLLGATE_METRICS_PORT_FILE")
        self.workerPorts[name] = try await worker.port()
        self.workers.append(worker)
        return worker
    }

    /// Starts another API process on the same Redis, database and prefix (stopped by ``shutdown()``); returns
    /// its base URL.
    func startAPI() async throws -> String {
        let api = try ManagedProcess(executable: "tollgate-api", arguments: ["serve"], environment: self.workerEnvironment, portFileVariable: "TOLLGATE_HTTP_PORT_FILE")
        self.moreAPIs.append(api)
        return "http://127.0.0.1:\(try await api.port())"
    }

    /// Stops the emulator: Apple is down.
    func stopEmulator() async {
        await self.emulator.stop()
    }

    /// Starts the emulator again on the same port: Apple is back.
    func startEmulator() async throws {
        self.emulator = try ManagedProcess(
            executable: "appstore-emulator", arguments: ["--port", String(self.emulatorPort)], environment: [:],
            portFileVariable: "APPSTORE_EMULATOR_PORT_FILE"
        )
        _ = try await self.emulator.port()
    }

    /// Makes the emulator hold each verifyReceipt call for `milliseconds` from its admission (its runtime latency,
    /// which calls already waiting out a latency take too: lowered to 0, they answer within 250 ms), and returns the
    /// production calls admitted until then: a count above it later means a call that holds.
    @discardableResult
    func setAppleLatency(milliseconds: Int) async throws -> Int {
        let reply = try await self.request(.POST, "/emulator/config", json: ["latencyMs": milliseconds], base: self.emulatorBase)
        guard reply.status == 200 else { throw ManagedProcess.Failure("the emulator refused latencyMs \(milliseconds): \(reply.status) \(reply.text)") }
        return try await self.appleCalls()
    }

    /// The production verifyReceipt calls the emulator has admitted.
    func appleCalls() async throws -> Int {
        let reply = try await self.request(.GET, "/emulator/stats", base: self.emulatorBase)
        guard let calls = reply.json["production"] as? Int else { throw ManagedProcess.Failure("the emulator's stats: \(reply.status) \(reply.text)") }
        return calls
    }

    /// Holds Apple (see ``setAppleLatency(milliseconds:)``) and has `post` submit more jobs meanwhile, then waits
    /// until a call admitted since is held: from then on a worker holds a job it cannot finish, however slow
    /// the machine, so a kill lands mid-burst. `post`'s jobs guarantee such a call even if every earlier one
    /// had started. Returns them.
    func holdApple(posting post: () async throws -> [String]) async throws -> [String] {
        let admitted = try await self.setAppleLatency(milliseconds: 3_600_000)
        let posted = try await post()
        _ = try await Poll.until(timeout: .seconds(60), "a verifyReceipt call admitted while Apple holds") {
            try await self.appleCalls() > admitted ? true : nil
        }
        return posted
    }

    /// The job's record as the API shows it.
    func job(_ publisher: Publisher, _ jobId: String) async throws -> [String: Any] {
        try await self.request(.GET, "/v1/receipts/\(jobId)", headers: publisher.headers).json
    }

    /// Stops everything and drops the clients.
    func shutdown() async {
        // Apple answers again first (a test that failed while holding it): no worker's stop waits for a held call.
        _ = try? await self.setAppleLatency(milliseconds: 0)
        for worker in self.workers { await worker.stop() }
        for api in self.moreAPIs { await api.stop() }
        await self.api.stop()
        await self.emulator.stop()
        try? await self.http.shutdown()
        await self.database.shutdown()
    }

    // MARK: HTTP

    struct Reply {
        let status: Int
        let headers: [String: String]
        let json: [String: Any]
        /// The body as text.
        let text: String
    }

    func request(_ method: HTTPMethod, _ path: String, headers: [String: String] = [:], json: Any? = nil, base: String? = nil) async throws -> Reply {
        var request = HTTPClientRequest(url: (base ?? self.apiBase) + path)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let json {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: json)))
        }
        let response = try await self.http.execute(request, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 16 << 20)
        let object = (try? JSONSerialization.jsonObject(with: Data(body.readableBytesView))) as? [String: Any] ?? [:]
        var replyHeaders: [String: String] = [:]
        for header in response.headers { replyHeaders[header.name.lowercased()] = header.value }
        return Reply(status: Int(response.status.code), headers: replyHeaders, json: object, text: String(buffer: body))
    }

    var admin: [String: String] { ["Authorization": "Bearer \(self.adminToken)"] }

    /// A publisher with one app and the given products (`productId` → kind, coins/durationDays).
    struct Publisher {
        let id: String
        let headers: [String: String]
        let bundleId: String
    }

    func createPublisher(bundleId: String = "com.example.e2e", products: [[String: Any]]) async throws -> Publisher {
        let created = try await self.request(.POST, "/admin/v1/publishers", headers: self.admin, json: ["name": "E2E"])
        guard created.status == 201, let id = created.json["id"] as? String, let token = created.json["publisherToken"] as? String,
            let basic = created.json["basicAuth"] as? [String: Any], let username = basic["username"] as? String,
            let password = basic["password"] as? String
        else { throw ManagedProcess.Failure("publisher creation failed: \(created.status) \(created.json)") }
        let app = try await self.request(.POST, "/admin/v1/publishers/\(id)/apps", headers: self.admin, json: ["bundleId": bundleId])
        guard app.status == 201 else { throw ManagedProcess.Failure("app creation failed: \(app.status) \(app.json)") }
        for product in products {
            var body = product
            body["publisherId"] = id
            body["bundleId"] = bundleId
            let reply = try await self.request(.POST, "/admin/v1/products", headers: self.admin, json: body)
            guard reply.status == 201 else { throw ManagedProcess.Failure("product creation failed: \(reply.status) \(reply.json)") }
        }
        let basicValue = Data("\(username):\(password)".utf8).base64EncodedString()
        return Publisher(id: id, headers: ["X-Publisher-Token": token, "Authorization": "Basic \(basicValue)"], bundleId: bundleId)
    }

    /// Posts a receipt; returns the reply.
    func submit(_ publisher: Publisher, email: String, offerId: String, transactionId: String?, receipt: String) async throws -> Reply {
        var receiptObject: [String: Any] = ["receiptData": receipt]
        if let transactionId { receiptObject["transactionId"] = transactionId }
        return try await self.request(
            .POST, "/apple/payment", headers: publisher.headers,
            json: ["customerEmail": email, "offerId": offerId, "receipt": receiptObject, "appType": "ios"]
        )
    }

    /// Polls access status every 250 ms (clients poll every 5 s; tests need not wait that long) until granted
    /// and no longer pending: the worker commits the grant, then finishes the job in Redis, so for one round
    /// trip in between the answer is both granted and pending.
    func waitForAccess(_ publisher: Publisher, email: String, offerId: String, timeout: Duration = .seconds(60)) async throws -> [String: Any] {
        let query = "customerEmail=\(email.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? email)&offerId=\(offerId)"
        return try await Poll.until(timeout: timeout, interval: .milliseconds(250), "access for \(email)") {
            let reply = try await self.request(.GET, "/v1/access-status?\(query)", headers: publisher.headers)
            return reply.json["accessGranted"] as? Bool == true && reply.json["pending"] as? Bool == false ? reply.json : nil
        }
    }

    /// `SELECT count(*)` helper.
    func count(_ sql: String) async throws -> Int {
        try await self.database.query(sql).first?.decode(Int.self, at: 0) ?? -1
    }
}

extension TollgateSystem: AsyncShutdown {}
