import Dispatch

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Releases the holds (`timeout` mode, latency) as soon as SIGTERM or SIGINT arrives.
///
/// Hummingbird's `runService` performs the graceful shutdown itself, and that shutdown waits for requests
/// in flight; a request parked by the `timeout` mode would keep the process alive for the whole hold
/// (30 s by default), and a call delayed by latency for its whole delay, past `docker stop`'s patience. Watching the same signals lets those requests
/// answer at once. Dispatch signal sources coexist with the ones swift-service-lifecycle installs.
final class StopSignalWatcher: Sendable {
    // Dispatch sources are thread-safe; the array is immutable after init.
    private nonisolated(unsafe) let sources: [any DispatchSourceSignal]

    /// Starts watching; holds are released on the first SIGTERM or SIGINT.
    init(releasing state: EmulatorState) {
        sources = [SIGTERM, SIGINT].map { signalNumber in
            // The default action would kill the process before the source sees the signal.
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            source.setEventHandler {
                state.releaseHolds()
            }
            source.resume()
            return source
        }
    }

    deinit {
        sources.forEach { $0.cancel() }
    }
}
