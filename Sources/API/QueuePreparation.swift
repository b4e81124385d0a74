import Logging
import ServiceLifecycle
import Shared

/// Prepares the queue once Redis answers (``ReceiptQueue/prepareWhenReachable(logger:)``), beside the
/// server rather than before it: the API listens at once (live, and ready once Redis answers), and a
/// SIGTERM while Redis is slow or unreachable at start is a graceful stop, not a kill.
struct QueuePreparation: Service, CustomStringConvertible {
    let queue: ReceiptQueue
    let logger: Logger

    var description: String { "QueuePreparation" }

    func run() async {
        _ = await untilGracefulShutdown { await self.queue.prepareWhenReachable(logger: self.logger) }
        // A service that returns stops the server: wait for the shutdown.
        try? await gracefulShutdown()
    }
}
