import AsyncHTTPClient
import Foundation
import Logging
import Shared
import TestSupport
@testable import Worker

/// The worker's own pieces (queue, fulfiller, processor) in-process, against the real Redis, a fresh
/// PostgreSQL database and a real emulator process.
final class WorkerHarness: @unchecked Sendable {
    // @unchecked Sendable: every stored property is immutable after init and itself thread-safe.
    let emulator: ManagedProcess
    let redis: RedisClient
    let database: PostgresClient
    let http: HTTPClient
    let queue: ReceiptQueue
    let catalog: CatalogStore
    let processor: JobProcessor
    let publisher: Publisher
    /// The emulator's base URL (`http://127.0.0.1:PORT`).
    let emulatorBase: String
    /// The policy the processor retries with.
    let retry: RetryPolicy
    /// One call to Apple, in milliseconds.
    let appleTimeoutMilliseconds: Int

    /// `appleBase` points the worker somewhere else than the emulator (a proxy, a closed port); the
    /// emulator still runs, so tests can use both. Whatever it started is stopped again when it throws.
    init(
        retry: RetryPolicy = RetryPolicy(baseMilliseconds: 10, maxDelayMilliseconds: 50, maxAttempts: 5, maxAgeSeconds: 3600),
        appleTimeoutMilliseconds: Int = 30_000, appleBase: String? = nil
    ) async throws {
        // The worker's own HTTP client (timeouts, no redirects), as Worker+build makes it.
        let http = VerifyReceiptClient.makeHTTPClient(
            configuration: try Configuration(environment: ["TOLLGATE_APPLE_TIMEOUT_MS": String(appleTimeoutMilliseconds)])
        )
        var emulator: ManagedProcess?
        var redis: RedisClient?
        var database: PostgresClient?
        do {
            let process = try ManagedProcess(
                executable: "appstore-emulator", arguments: ["--port", "0"], environment: [:], portFileVariable: "APPSTORE_EMULATOR_PORT_FILE"
            )
            emulator = process
            let emulatorBase = "http://127.0.0.1:\(try await process.port())"
            let base = appleBase ?? emulatorBase
            let redisClient = try TestEnvironment.redis()
            redis = redisClient
            let databaseClient = PostgresClient(url: try await TestEnvironment.freshDatabase(), connections: 4)
            database = databaseClient
            let queue = ReceiptQueue(redis: redisClient, prefix: TestEnvironment.uniquePrefix())
            try await queue.prepare()
            let catalog = CatalogStore(database: databaseClient)
            let fulfiller = Fulfiller(
                catalog: catalog, grants: GrantStore(database: databaseClient), queue: queue,
                apple: VerifyReceiptClient(
                    http: http, productionURL: "\(base)/verifyReceipt", sandboxURL: "\(base)/sandbox/verifyReceipt",
                    timeoutMilliseconds: appleTimeoutMilliseconds
                )
            )
            self.publisher = try await catalog.createPublisher(name: "Worker tests").0
            self.processor = JobProcessor(
                queue: queue, fulfiller: fulfiller, retry: retry, retentionSeconds: 86_400, recordPatience: .seconds(60),
                logger: Logger(label: "test.worker")
            )
            self.emulator = process
            self.emulatorBase = emulatorBase
            self.http = http
            self.redis = redisClient
            self.database = databaseClient
            self.queue = queue
            self.catalog = catalog
            self.retry = retry
            self.appleTimeoutMilliseconds = appleTimeoutMilliseconds
        } catch {
            await emulator?.stop()
            try? await http.shutdown()
            await redis?.shutdown()
            await database?.shutdown()
            throw error
        }
    }

    /// Harnesses alive at once: each holds an emulator process and PostgreSQL connections (the test
    /// server allows 100), and tests run in parallel.
    private static let slots = AsyncSemaphore(slots: 8)

    /// Runs `body` with a fresh harness and always shuts it down, on failure too.
    static func with(
        retry: RetryPolicy = RetryPolicy(baseMilliseconds: 10, maxDelayMilliseconds: 50, maxAttempts: 5, maxAgeSeconds: 3600),
        appleTimeoutMilliseconds: Int = 30_000, appleBase: String? = nil,
        _ body: (WorkerHarness) async throws -> Void
    ) async throws {
        await Self.slots.acquire()
        defer { Self.slots.release() }
        let harness = try await WorkerHarness(retry: retry, appleTimeoutMilliseconds: appleTimeoutMilliseconds, appleBase: appleBase)
        do {
            try await body(harness)
        } catch {
            await harness.shutdown()
            throw error
        }
        await harness.shutdown()
    }

    func shutdown() async {
        await self.emulator.stop()
        try? await self.http.shutdown()
        await self.redis.shutdown()
        await self.database.shutdown()
    }

    @discardableResult
    func app(_ bundleId: String, sharedSecret: String? = nil, allowSandbox: Bool = true) async throws -> App {
        try await self.catalog.createApp(publisherId: self.publisher.id, bundleId: bundleId, sharedSecret: sharedSecret, allowSandbox: allowSandbox)
    }

    @discardableResult
    func product(_ bundleId: String, productId: String, offerId: String, kind: ProductKind, coins: Int? = nil, days: Int? = nil) async throws -> Product {
        try await self.catalog.createProduct(ProductDraft(
            publisherId: self.publisher.id, bundleId: bundleId, productId: productId, offerId: offerId, kind: kind, title: productId,
            description: nil, coins: coins, durationDays: days, enabled: true
        ))
    }

    /// A fulfiller of this harness' catalog and database that asks the emulator, whatever `appleBase` the
    /// harness' own worker uses; it announces access changes through `queue` (the harness' by default).
    func emulatorFulfiller(queue: ReceiptQueue? = nil) -> Fulfiller {
        Fulfiller(
            catalog: self.catalog, grants: GrantStore(database: self.database), queue: queue ?? self.queue,
            apple: VerifyReceiptClient(
                http: self.http, productionURL: "\(self.emulatorBase)/verifyReceipt", sandboxURL: "\(self.emulatorBase)/sandbox/verifyReceipt",
                timeoutMilliseconds: 30_000
            )
        )
    }

    /// Enqueues a submission and returns its job id.
    func submit(email: String = "buyer@example.com", offerId: String, transactionId: String?, receipt: String) async throws -> String {
        let job = ReceiptJob(
            jobId: UUID().uuidString.lowercased(), publisherId: self.publisher.id, customerEmail: email, offerId: offerId,
            transactionId: transactionId, receiptData: receipt, appType: .ios, ipAddress: nil, acceptedAtMilliseconds: WallClock.nowMilliseconds()
        )
        guard case .created(let id) = try await self.queue.enqueue(job, keyTTLSeconds: 3600) else { throw ManagedProcess.Failure("not created") }
        return id
    }

    /// Submits a receipt of one new purchase of `productId` (its transaction id given), with the scenario's
    /// `extra` fields, and works it to its final record.
    func purchase(
        _ bundleId: String, productId: String, offerId: String, email: String = "buyer@example.com", extra: [String: Any] = [:]
    ) async throws -> JobRecord {
        let transaction = ScenarioReceipt.transactionId()
        let receipt = ScenarioReceipt.make(bundleId: bundleId, purchases: [.init(productId: productId, transactionId: transaction)], extra: extra)
        return try await self.workUntilFinal(try await self.submit(email: email, offerId: offerId, transactionId: transaction, receipt: receipt))
    }

    /// Reads what the stream offers and processes it, as the consumer does; returns how many it processed.
    @discardableResult
    func work() async throws -> Int {
        let deliveries = try await self.queue.readNew(consumer: "test", count: 100, blockMilliseconds: 100, blockingClient: self.redis)
        for delivery in deliveries { await self.processor.process(delivery) }
        return deliveries.count
    }

    /// Works (promoting due retries) until the job is final.
    func workUntilFinal(_ jobId: String, timeout: Duration = .seconds(30)) async throws -> JobRecord {
        try await Poll.until(timeout: timeout, interval: .milliseconds(20), "job \(jobId) final") {
            try await self.queue.promoteDue(now: WallClock.nowMilliseconds())
            try await self.work()
            let record = try await self.queue.record(jobId: jobId)
            return record?.status.isFinal == true ? record : nil
        }
    }
}
