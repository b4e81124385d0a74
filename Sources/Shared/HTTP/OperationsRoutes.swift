import Hummingbird
import Metrics
import NIOCore
import Prometheus

/// `/health/live`, `/health/ready` and `/metrics`, served the same way by the API and the worker.
public struct OperationsRoutes<Context: RequestContext>: Sendable {
    /// Names the dependencies that are not reachable or not ready; an empty list means ready.
    public typealias ReadinessCheck = @Sendable () async -> [String]

    private let registry: PrometheusCollectorRegistry
    private let readiness: ReadinessCheck

    /// Creates the routes.
    public init(registry: PrometheusCollectorRegistry, readiness: @escaping ReadinessCheck) {
        self.registry = registry
        self.readiness = readiness
    }

    /// Creates the routes with the readiness of Tollgate's two dependencies: both reachable, the queue
    /// prepared in Redis by this process (until then a start-up step still runs), and the database's schema
    /// current for this build.
    public init(registry: PrometheusCollectorRegistry, queue: ReceiptQueue, redis: RedisClient, database: PostgresClient, schema: SchemaCheck) {
        self.init(registry: registry) {
            async let redisUp = redis.ping()
            async let databaseUp = database.ping()
            var down: [String] = []
            if await !redisUp {
                down.append("redis")
            } else if !queue.isPrepared {
                down.append("redis (the queue is being prepared)")
            }
            if await !databaseUp {
                down.append("postgresql")
            } else if let problem = await schema.readinessProblem() {
                down.append(problem)
            }
            return down
        }
    }

    /// Adds the routes to a router.
    public func register(on router: Router<Context>) {
        router.get("/health/live") { _, _ in
            JSONBody.response(.ok, ["status": "ok"])
        }
        router.get("/health/ready") { _, _ in
            let down = await self.readiness()
            if down.isEmpty { return JSONBody.response(.ok, ["status": "ready"]) }
            var response = JSONBody.response(
                .serviceUnavailable,
                ["status": "unavailable", "message": "not ready: \(down.joined(separator: ", "))", "code": "dependency_unavailable"]
            )
            response.headers[.retryAfter] = "5"
            return response
        }
        router.get("/metrics") { _, _ in
            var text: [UInt8] = []
            self.registry.emit(into: &text)
            return Response(
                status: .ok,
                headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(bytes: text))
            )
        }
    }
}
