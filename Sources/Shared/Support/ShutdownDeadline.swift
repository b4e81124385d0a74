import Dispatch
import Foundation
import Logging
import Synchronization

/// Bounds a process' stop. From the first SIGTERM or SIGINT, a process still running after `seconds`
/// says so and exits 1.
///
/// The service group cancels what is still running when its grace period ends (a worker's jobs in
/// flight, which park themselves in Redis at once; the API's requests in progress, whose connections
/// close); but a task inside a call that cannot be interrupted (a PostgreSQL statement, a Redis reply
/// from a server that stopped answering) ends only with that call's own timeout. The service group's
/// own bound on cancellation traps (a crash, not a shutdown); this one leaves a line in the log and a
/// plain exit code. What a worker still held stays pending in Redis under its name, and a peer claims it
/// after `TOLLGATE_CLAIM_MIN_IDLE_MS`.
public final class ShutdownDeadline: Sendable {
    private let sources: Mutex<[any DispatchSourceSignal]>

    /// Watches SIGTERM and SIGINT; `consequence` ends the line logged at the deadline.
    public init(seconds: Int, process: String, consequence: String, logger: Logger) {
        let queue = DispatchQueue(label: "tollgate.shutdown-deadline")
        let armed = Atomic<Bool>(false)
        var sources: [any DispatchSourceSignal] = []
        for signalNumber in [SIGTERM, SIGINT] {
            // The service group ignores these signals too, and watches them the same way.
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: queue)
            source.setEventHandler {
                guard !armed.exchange(true, ordering: .relaxed) else { return }
                queue.asyncAfter(deadline: .now() + .seconds(seconds)) {
                    logger.error(
                        "the \(process) did not stop within \(seconds) s of the signal (a call to Redis or PostgreSQL ignored the cancellation); exiting\(consequence)"
                    )
                    exit(1)
                }
            }
            source.resume()
            sources.append(source)
        }
        self.sources = Mutex(sources)
    }

    /// Stops watching the signals.
    public func cancel() {
        self.sources.withLock { sources in
            for source in sources { source.cancel() }
        }
    }
}
