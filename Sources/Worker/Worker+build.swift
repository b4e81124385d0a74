import ArgumentParser
import AsyncHTTPClient
import Foundation
import Hummingbird
import Logging
import NIOCore
import Prometheus
import ServiceLifecycle
import Shared

/// Wires the worker: clients, the consumer, the retry promoter and the metrics/health server, run as one
/// service group that shuts down gracefully on SIGTERM/SIGINT within `TOLLGATE_SHUTDOWN_GRACE_S`.
func runWorker(configuration: Configuration, logger: Logger) async throws {
    let registry = MetricsSetup.bootstrap(durationBuckets: WorkerMetrics.durationBuckets)
    WorkerMetrics.register()
    let redis = RedisClient(configuration: configuration.redis, connections: configuration.redisPoolSize)
    // Blocking reads hold their connection, so they get a client of their own.
    let reader = RedisClient(configuration: configuration.redis, connections: 1)
    let database = PostgresClient(url: configuration.databaseURL, connections: configuration.workerDatabasePoolSize)
    let http = VerifyReceiptClient.makeHTTPClient(configuration: configuration)

    let queue = ReceiptQueue(redis: redis, prefix: configuration.queuePrefix)

    let catalog = CatalogStore(database: database)
    let fulfiller = Fulfiller(
        catalog: catalog, grants: GrantStore(database: database), queue: queue,
        apple: VerifyReceiptClient(
            http: http, productionURL: configuration.appleProductionURL, sandboxURL: configuration.appleSandboxURL,
            timeoutMilliseconds: configuration.appleTimeoutMilliseconds
        )
    )
    let processor = JobProcessor(
        queue: queue, fulfiller: fulfiller, retry: configuration.retry, retentionSeconds: configuration.jobRetentionSeconds,
        recordPatience: .milliseconds(configuration.claimMinIdleMilliseconds), logger: logger
    )
    let schema = SchemaCheck(database: database)
    let consumer = Consumer(
        queue: queue, reader: reader, database: database, schema: schema, processor: processor, name: configuration.workerName,
        concurrency: configuration.workerConcurrency, claimMinIdleMilliseconds: configuration.claimMinIdleMilliseconds,
        logger: logger
    )
    let promoter = Promoter(
        queue: queue, lostAfterMilliseconds: configuration.claimMinIdleMilliseconds, retentionSeconds: configuration.jobRetentionSeconds,
        logger: logger
    )

    let router = Router(options: .autoGenerateHeadEndpoints)
    router.add(middleware: HeadRequestMiddleware())
    let unmatched = UnmatchedRouteMiddleware<BasicRequestContext>()
    router.add(middleware: unmatched)
    OperationsRoutes<BasicRequestContext>(registry: registry, queue: queue, redis: redis, database: database, schema: schema).register(on: router)
    unmatched.learnRoutes(of: router)
    let portFile = configuration.portFile
    let operations = Application(
        router: router,
        server: .tollgate(idleTimeoutSeconds: configuration.httpIdleTimeoutSeconds, logger: logger),
        configuration: .init(address: .hostname(configuration.httpHost, port: configuration.metricsPort), serverName: "tollgate-worker"),
        onServerRunning: { channel in
            let port = channel.localAddress?.port ?? configuration.metricsPort
            logger.info("serving metrics and health", metadata: ["port": "\(port)"])
            if let portFile { PortFile.publish(port, to: portFile, logger: logger) }
        },
        logger: logger
    )

    // Services stop in reverse order: the consumer first (it drains), the metrics server last.
    var groupConfiguration = ServiceGroupConfiguration(
        services: [
            .init(service: operations),
            .init(service: promoter),
            .init(service: QueueGauges(queue: queue, logger: logger)),
            .init(service: QueueClockSync(queue: queue, logger: logger)),
            .init(service: consumer),
        ],
        gracefulShutdownSignals: [.sigterm, .sigint],
        logger: logger
    )
    // Past the grace period the jobs still in flight are cancelled and parked for peers to take at once.
    groupConfiguration.maximumGracefulShutdownDuration = .seconds(configuration.shutdownGraceSeconds)
    // Then at most 5 s for the cancelled jobs to park: past that the worker exits 1 (the service group's own
    // bound would trap instead).
    let deadline = ShutdownDeadline(
        seconds: configuration.shutdownGraceSeconds + 5, process: "worker", consequence: ", what it still held stays pending for a peer to claim",
        logger: logger
    )
    defer { deadline.cancel() }
    logger.info("worker started", metadata: [
        "concurrency": "\(configuration.workerConcurrency)", "database_connections": "\(configuration.workerDatabasePoolSize)",
        "redis_connections": "\(configuration.redisPoolSize)",
    ])
    var failure: (any Error)?
    do {
        try await ServiceGroup(configuration: groupConfiguration).run()
    } catch {
        // e.g. the metrics port is taken: every service is cancelled, then the process exits non-zero.
        failure = error
    }
    try? await http.shutdown()
    await reader.shutdown()
    await redis.shutdown()
    await database.shutdown()
    if let failure {
        logger.error("worker stopped with an error", metadata: ["error": "\(failure)"])
        let refusedListen = ConfigurationError.refusedListen(
            failure, host: configuration.httpHost, port: configuration.metricsPort, hostVariable: "TOLLGATE_HTTP_HOST", portVariable: "TOLLGATE_METRICS_PORT"
        )
        if let refused = failure as? ConfigurationError ?? refusedListen {
            // Found once a dependency answered (Redis refused the URL's credentials or database), or the
            // metrics server's address is not one this machine can take.
            refused.report(as: "tollgate-worker")
            throw ExitCode(2)
        }
        throw ExitCode.failure
    }
    logger.info("worker stopped")
}

