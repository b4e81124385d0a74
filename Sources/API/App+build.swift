import Foundation
import Hummingbird
import Logging
import Metrics
import NIOCore
import Prometheus
import ServiceLifecycle
import Shared

/// The running API: the Hummingbird application plus the clients it must close after it stops.
struct APIApplication {
    let application: Application<RouterResponder<TollgateRequestContext>>
    let services: APIServices

    /// Serves until SIGTERM/SIGINT, lets the requests in progress finish for up to `TOLLGATE_SHUTDOWN_GRACE_S`
    /// (then closes their connections: a client that stalls mid-request must not hold the stop until the
    /// supervisor kills the process), then closes the clients.
    func run() async throws {
        let grace = self.services.configuration.shutdownGraceSeconds
        var group = ServiceGroupConfiguration(services: [self.application], gracefulShutdownSignals: [.sigterm, .sigint], logger: self.application.logger)
        group.maximumGracefulShutdownDuration = .seconds(grace)
        let deadline = ShutdownDeadline(seconds: grace + 5, process: "API", consequence: "", logger: self.application.logger)
        defer { deadline.cancel() }
        do {
            try await ServiceGroup(configuration: group).run()
        } catch {
            await self.services.redis.shutdown()
            await self.services.database.shutdown()
            throw error
        }
        await self.services.redis.shutdown()
        await self.services.database.shutdown()
    }
}

/// Wires configuration, clients, routes and middleware into an application.
func buildApplication(configuration: Configuration, logger: Logger, registry: PrometheusCollectorRegistry = MetricsSetup.bootstrap()) async throws -> APIApplication {
    let redis = RedisClient(configuration: configuration.redis, connections: configuration.redisPoolSize)
    let database = PostgresClient(url: configuration.databaseURL, connections: configuration.databasePoolSize)
    let services = await APIServices(configuration: configuration, redis: redis, database: database, logger: logger)

    let router = buildRouter(services: services, registry: registry)
    let portFile = configuration.portFile
    let application = Application(
        router: router,
        server: .tollgate(idleTimeoutSeconds: configuration.httpIdleTimeoutSeconds, logger: logger),
        configuration: .init(address: .hostname(configuration.httpHost, port: configuration.httpPort), serverName: "tollgate-api"),
        services: [
            // Until Redis answers and the queue is prepared, readiness says 503; requests that need Redis answer
            // 503 until it answers.
            QueuePreparation(queue: services.queue, logger: logger),
            QueueGauges(queue: services.queue, logger: logger),
            QueueClockSync(queue: services.queue, logger: logger),
            AccessInvalidations(
                cache: services.accessCache, directory: services.authenticator.directory, redis: configuration.redis, keys: services.queue.keys,
                logger: logger
            ),
            PublisherDirectoryRefresher(directory: services.authenticator.directory),
        ],
        onServerRunning: { channel in
            let port = channel.localAddress?.port ?? configuration.httpPort
            logger.info("listening", metadata: [
                "host": "\(configuration.httpHost)", "port": "\(port)",
                "database_connections": "\(configuration.databasePoolSize)", "redis_connections": "\(configuration.redisPoolSize)",
            ])
            if let portFile { PortFile.publish(port, to: portFile, logger: logger) }
        },
        logger: logger
    )
    return APIApplication(application: application, services: services)
}

/// The routes: operations, publisher API, admin API.
func buildRouter(services: APIServices, registry: PrometheusCollectorRegistry) -> Router<TollgateRequestContext> {
    let router = Router(context: TollgateRequestContext.self, options: .autoGenerateHeadEndpoints)
    router.add(middleware: HeadRequestMiddleware())
    // The metrics outside the error middleware, so they count the status the client got (a 503, not
    // the error behind it).
    router.add(middleware: RequestMetricsMiddleware())
    let schema = SchemaCheck(database: services.database)
    router.add(middleware: ErrorMiddleware(schema: schema))
    let unmatched = UnmatchedRouteMiddleware<TollgateRequestContext>()
    router.add(middleware: unmatched)

    OperationsRoutes<TollgateRequestContext>(
        registry: registry, queue: services.queue, redis: services.redis, database: services.database, schema: schema
    ).register(on: router)

    router.get("/openapi.yaml") { _, _ in
        Response(
            status: .ok, headers: [.contentType: "application/yaml; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: PackageResources.openapi_yaml))
        )
    }

    let publisherRoutes = router.group().add(middleware: PublisherAuthMiddleware(authenticator: services.authenticator, rateLimiter: services.rateLimiter))
    let accessRoutes = router.group().add(middleware: PublisherAuthMiddleware(
        authenticator: services.authenticator, rateLimiter: services.rateLimiter, acceptsCustomerTokens: true
    ))
    PaymentController(services: services).register(on: publisherRoutes)
    CustomerTokenController(services: services).register(on: publisherRoutes)
    AccessController(services: services).register(publisherRoutes: publisherRoutes, accessRoutes: accessRoutes)
    JSONRPCController(services: services).register(on: router)

    let adminRoutes = router.group("/admin/v1").add(middleware: AdminAuthMiddleware(token: services.configuration.adminToken))
    AdminController(services: services).register(on: adminRoutes)
    // Without an admin token the admin routes do not exist, under any method.
    unmatched.learnRoutes(of: router, excludingPathsWithPrefix: services.configuration.adminToken == nil ? "/admin/" : nil)
    return router
}
