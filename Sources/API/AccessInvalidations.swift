import Logging
import ServiceLifecycle
import Shared

/// Keeps ``AccessCache`` exact: listens to the queue's access channel for as long as the API runs.
struct AccessInvalidations: Service, CustomStringConvertible {
    let cache: AccessCache
    let redis: RedisConfiguration
    let channel: String
    let logger: Logger

    // ServiceGroup logs its services: never print the Redis configuration (it may hold a password).
    var description: String { "AccessInvalidations" }

    func run() async throws {
        guard self.cache.isEnabled else {
            // A service that returns stops the whole server: with the cache off there is nothing to listen
            // to, so only wait for the shutdown.
            try? await gracefulShutdown()
            return
        }
        let cache = self.cache
        let logger = self.logger
        let subscriber = RedisSubscriber(configuration: self.redis, channel: self.channel) { event in
            switch event {
            case .subscribed: logger.info("access cache on: subscribed to access changes")
            case .lost: logger.warning("access cache off: the subscription to access changes was lost; reconnecting")
            case .unavailable(let reason):
                logger.warning("access cache off: cannot subscribe to access changes; retrying", metadata: ["error": "\(reason)"])
            case .message: break
            }
            cache.handle(event)
        }
        subscriber.start()
        // Until the server stops (graceful shutdown cancels this wait).
        try? await gracefulShutdown()
        await subscriber.shutdown()
    }
}
