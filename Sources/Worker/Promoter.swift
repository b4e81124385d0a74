import Logging
import ServiceLifecycle
import Shared

/// Moves due retries from the delayed set back to the stream. Every worker runs one; the move is one
/// atomic script, so a job is never promoted twice.
struct Promoter: Service {
    let queue: ReceiptQueue
    let logger: Logger

    func run() async throws {
        while !Task.isCancelled, !Task.isShuttingDownGracefully {
            do {
                let moved = try await self.queue.promoteDue(now: WallClock.nowMilliseconds())
                if moved > 0 { self.logger.debug("promoted due retries", metadata: ["count": "\(moved)"]) }
                // A full batch means more are due right now.
                if moved >= 500 { continue }
            } catch {
                self.logger.warning("cannot promote retries", metadata: ["error": "\(error)"])
            }
            try? await Task.sleep(for: .milliseconds(250))
        }
    }
}
