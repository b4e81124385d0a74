import Logging
import ServiceLifecycle
import Shared

/// Listens to the queue's access channel for as long as the API runs: it keeps ``AccessCache`` exact, and
/// hands publishers whose credentials were taken away through another API process to ``PublisherDirectory``.
struct AccessInvalidations: Service, CustomStringConvertible {
    let cache: AccessCache
    let directory: PublisherDirectory
    let redis: RedisConfiguration
    let keys: QueueKeys
    let logger: Logger

    // ServiceGroup logs its services: never print the Redis configuration (it may hold a password).
    var description: String { "AccessInvalidations" }

    func run() async throws {
        let cache = self.cache
        let directory = self.directory
        let keys = self.keys
        let logger = self.logger
        // With the cache off only revocations are listened for; losing them leaves each process its reloads.
        let what = cache.isEnabled ? "access cache" : "credential revocations"
        let subscriber = RedisSubscriber(configuration: self.redis, channel: self.keys.accessChannel) { event in
            switch event {
            case .subscribed: logger.info("\(what) on: subscribed to access changes")
            case .lost: logger.warning("\(what) off: the subscription to access changes was lost; reconnecting")
            case .unavailable(let reason):
                logger.warning("\(what) off: cannot subscribe to access changes; retrying", metadata: ["error": "\(reason)"])
            case .message(let message):
                if let publisherId = keys.revokedPublisher(message) {
                    directory.revoke(publisherId)
                    return
                }
            }
            cache.handle(event)
        }
        subscriber.start()
        // Until the server stops (graceful shutdown cancels this wait).
        try? await gracefulShutdown()
        await subscriber.shutdown()
    }
}
