import Hummingbird
import Logging
import ServiceLifecycle

/// A Hummingbird server of a test's own on a free loopback port: an Apple that misbehaves in ways the
/// emulator does not, or a proxy in front of it.
struct LoopbackServer: Sendable {
    /// `http://127.0.0.1:PORT`.
    let base: String
    private let group: ServiceGroup
    private let task: Task<Void, any Error>

    /// Starts serving `router`; returns once the port is bound.
    static func start(_ router: Router<BasicRequestContext>, label: String) async throws -> LoopbackServer {
        let (ports, bound) = AsyncStream<Int>.makeStream()
        var logger = Logger(label: label)
        logger.logLevel = .warning
        let app = Application(
            router: router, configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in
                bound.yield(channel.localAddress?.port ?? 0)
                bound.finish()
            },
            logger: logger
        )
        let group = ServiceGroup(services: [app], logger: logger)
        let task = Task {
            defer { bound.finish() }
            try await group.run()
        }
        var port = 0
        for await value in ports { port = value }
        guard port > 0 else {
            _ = try? await task.value
            throw Failure(description: "\(label) did not start")
        }
        return LoopbackServer(base: "http://127.0.0.1:\(port)", group: group, task: task)
    }

    /// Stops the server, after the requests in flight.
    func stop() async {
        await self.group.triggerGracefulShutdown()
        _ = try? await self.task.value
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }
}
