import Logging
import ServiceLifecycle
import Shared

/// Prepares the queue once Redis answers (``ReceiptQueue/prepareWhenReachable(logger:)``), beside the
/// server rather than before it: the API listens at once (live, and ready once Redis answers), and a
/// SIGTERM while Redis is slow or unreachable at start is a graceful stop, not a kill.
///
/// Redis refusing Tollgate's credentials or database is a bad `TOLLGATE_REDIS_URL`: this service throws
/// the ``ConfigurationError``, which stops the server, and the process exits 2 naming the variable.
struct QueuePreparation: Service, CustomStringConvertible {
    let queue: ReceiptQueue
    let logger: Logger

    var description: String { "QueuePreparation" }

    func run() async throws {
        if case .refused(let error)? = await untilGracefulShutdown({ await self.queue.prepareWhenReachable(logger: self.logger) }) {
            throw error
        }
        // A service that returns stops the server: wait for the shutdown.
        try? await gracefulShutdown()
    }
}
