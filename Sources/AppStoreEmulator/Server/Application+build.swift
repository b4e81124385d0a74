import Hummingbird
import Logging

/// Wires the emulator: shared state, routes, and the start-up announcement.
///
/// - Parameters:
///   - configuration: the process configuration.
///   - state: the shared state; tests pass their own to inspect it, the process lets one be made from
///     `configuration.faults`.
///   - onListening: called once the server listens.
func buildApplication(
    _ configuration: EmulatorConfiguration, state: EmulatorState? = nil, onListening: @escaping @Sendable () -> Void = {}
) -> some ApplicationProtocol {
    var logger = Logger(label: "appstore-emulator")
    logger.logLevel = configuration.logLevel
    let state = state ?? EmulatorState(settings: configuration.faults)
    let router = buildRouter(state: state, logLevel: configuration.logLevel)
    let host = configuration.host
    let portFile = configuration.portFile
    let requestedPort = configuration.port

    return Application(
        router: router,
        configuration: ApplicationConfiguration(
            address: .hostname(host, port: requestedPort),
            serverName: "appstore-emulator"
        ),
        onServerRunning: { [logger] channel in
            // With port 0 only the bound channel knows the port; scripts learn it from the file or the line.
            let port = channel.localAddress?.port ?? requestedPort
            onListening()
            if let portFile {
                do {
                    try PortFileWriter.write(port: port, to: portFile)
                } catch {
                    logger.error("cannot write the port file", metadata: ["path": "\(portFile)", "error": "\(error)"])
                }
            }
            let shownHost = host.contains(":") ? "[\(host)]" : host
            ConsoleOutput.standardOutput("appstore-emulator listening on http://\(shownHost):\(port)")
        },
        logger: logger
    )
}

/// The emulator's routes.
func buildRouter(state: EmulatorState, logLevel: Logger.Level = .info) -> Router<BasicRequestContext> {
    let router = Router(context: BasicRequestContext.self)
    // Per-request logs only when asked for: at benchmark rates they would cost more than the answers.
    if logLevel <= .debug {
        router.add(middleware: LogRequestsMiddleware(.debug))
    }
    VerifyReceiptController(state: state).addRoutes(to: router)
    EmulatorControlController(state: state).addRoutes(to: router)
    return router
}
