import Foundation
import Synchronization

/// A Redis server of a test's own (the shared one must stay up for every other test), with AOF on, that
/// the test can stop and start again on the same port and data: a real outage.
public final class DedicatedRedis: @unchecked Sendable {
    // @unchecked Sendable: `server` is only replaced by the one test that owns this object, sequentially.
    public let port: Int
    private let directory: String
    private var server: ManagedProcess?
    private let arguments: [String]

    /// Starts a server on a free port in a folder under the test state directory; `arguments` add to
    /// its configuration (`--rename-command AUTH ""`, say).
    public init(arguments: [String] = []) async throws {
        self.arguments = arguments
        self.directory = "\(try TestEnvironment.stateDirectory())/redis-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: self.directory, withIntermediateDirectories: true)
        self.port = try Self.freePort()
        try await self.start()
    }

    /// `redis://127.0.0.1:<port>/0`.
    public var url: String { "redis://127.0.0.1:\(self.port)/0" }

    /// Starts (or restarts) the server on the same port and data.
    public func start() async throws {
        let server = try ManagedProcess(
            executable: "/usr/bin/redis-server",
            arguments: [
                "--bind", "127.0.0.1", "--port", String(self.port), "--dir", self.directory, "--appendonly", "yes",
                "--appendfsync", "everysec", "--save", "", "--maxmemory-policy", "noeviction",
            ] + self.arguments,
            environment: [:], portFileVariable: nil
        )
        self.server = server
        _ = try await Poll.until(timeout: .seconds(20), "redis-server on \(self.port)") {
            guard server.isRunning else { throw ManagedProcess.Failure("redis-server exited: \(server.logTail())") }
            return Self.accepts(port: self.port) ? true : nil
        }
    }

    /// Stops the server (SIGTERM: Redis flushes its AOF and exits).
    public func stop() async {
        await self.server?.stop()
        self.server = nil
    }

    /// Stops the server, for ``TestEnvironment/using(_:body:)``.
    public func shutdown() async {
        await self.stop()
    }

    /// Freezes the server (SIGSTOP): connections stay open and nothing answers, as from a stalled host.
    public func pause() {
        self.server?.signal(SIGSTOP)
    }

    /// Lets a paused server go on (SIGCONT).
    public func resume() {
        self.server?.signal(SIGCONT)
    }

    deinit {
        self.server?.signal(SIGKILL)
    }

    /// A free loopback port below the kernel's range for outgoing connections (as `tg_free_port` picks
    /// them): a server stopped and started again on it (an outage) finds it free, where a port of that
    /// range may meanwhile be the local end of any test's connection. Never the same one twice in a test run,
    /// so a port one test holds while its server is down is not another test's. The kernel's choice when
    /// none is found.
    public static func freePort() throws -> Int {
        let range = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8))?
            .split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) } ?? 32768
        if range > 10_001 {
            for _ in 0..<200 {
                let port = Int.random(in: 10_000..<range)
                guard Self.handedOut.withLock({ $0.insert(port).inserted }) else { continue }
                if try Self.bindable(port) != nil { return port }
            }
        }
        guard let port = try Self.bindable(0) else { throw ManagedProcess.Failure("bind() failed") }
        return port
    }

    /// A loopback port nothing listens on, nor will during the test run: one ``freePort()`` handed out to no
    /// one else, below the range the kernel picks from for a server bound to port 0.
    public static func closedPort() throws -> Int { try Self.freePort() }

    /// The ports ``freePort()`` has handed out in this test run.
    private static let handedOut = Mutex<Set<Int>>([])

    /// The port a loopback socket bound to `port` got (the kernel's choice for 0), or `nil` when it is taken.
    private static func bindable(_ port: Int) throws -> Int? {
        let socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw ManagedProcess.Failure("socket() failed") }
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0 }
        }
        return bound ? Int(UInt16(bigEndian: address.sin_port)) : nil
    }

    /// Whether something accepts TCP connections on the loopback port.
    public static func accepts(port: Int) -> Bool { LoopbackSocket(port: port) != nil }
}
