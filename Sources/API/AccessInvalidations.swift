import ServiceLifecycle
import Shared

/// Keeps ``AccessCache`` exact: listens to the queue's access channel for as long as the API runs.
struct AccessInvalidations: Service, CustomStringConvertible {
    let cache: AccessCache
    let redis: RedisConfiguration
    let channel: String

    // ServiceGroup logs its services: never print the Redis configuration (it may hold a password).
    var description: String { "AccessInvalidations" }

    func run() async throws {
        guard self.cache.isEnabled else { return }
        let cache = self.cache
        let subscriber = RedisSubscriber(configuration: self.redis, channel: self.channel) { event in cache.handle(event) }
        subscriber.start()
        // Until the server stops (graceful shutdown cancels this wait).
        try? await gracefulShutdown()
        await subscriber.shutdown()
    }
}
