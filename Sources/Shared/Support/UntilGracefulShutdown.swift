import ServiceLifecycle

/// Runs `work` until it finishes or the calling service is asked to shut down gracefully (or cancelled),
/// whichever comes first, and returns its result, or nil when the shutdown came first. `work` is then
/// cancelled, not awaited: a Redis call that waits out its reply timeout while Redis hangs must not hold
/// up a SIGTERM. So `work` may still be in such a call after this returns, until the client it calls is
/// shut down (which fails the call).
public func untilGracefulShutdown<T: Sendable>(_ work: @escaping @Sendable () async -> T) async -> T? {
    let (results, finished) = AsyncStream.makeStream(of: T.self)
    let task = Task {
        finished.yield(await work())
        finished.finish()
    }
    let result = await withGracefulShutdownHandler {
        await results.first { _ in true }
    } onGracefulShutdown: {
        finished.finish()
    }
    task.cancel()
    return result
}
