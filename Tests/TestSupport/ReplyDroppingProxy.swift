import Foundation

/// A TCP proxy in front of a Redis server that, once armed, closes the client's connection instead of passing
/// on the next answer holding `pattern`: Redis ran the command, and the client lost only its answer, as when a
/// Redis restart, a proxy or `CLIENT KILL` cuts a connection at that moment. Python, a thread per connection.
public final class ReplyDroppingProxy: AsyncShutdown {
    private let process: ManagedProcess
    public let port: Int

    /// Starts a proxy in front of the Redis on 127.0.0.1:`upstreamPort`.
    public init(upstreamPort: Int, pattern: String) async throws {
        let directory = "\(try TestEnvironment.stateDirectory())/reply-proxy-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        (self.process, self.port) = try await PythonProxy.start(Self.script, in: directory, arguments: [String(upstreamPort), pattern])
    }

    /// Drops the next answer that holds the pattern; returns once the proxy says it is armed.
    public func arm() async throws {
        let before = self.count("armed")
        self.process.signal(SIGUSR1)
        _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(10), "the proxy to arm") { () async throws -> Bool? in
            self.count("armed") > before ? true : nil
        }
    }

    /// How many answers it dropped.
    public var dropped: Int { self.count("dropped") }

    /// How many lines of its output are `line`.
    private func count(_ line: String) -> Int { self.process.log().split(separator: "\n").filter { $0 == line }.count }

    public func shutdown() async { await self.process.stop() }

    private static let script = #"""
        import os, select, signal, socket, sys, threading

        upstream_port, pattern = int(sys.argv[1]), sys.argv[2].encode()
        lock = threading.Lock()
        armed = [False]

        def arm(*_):
            with lock:
                armed[0] = True
            print("armed", flush=True)

        signal.signal(signal.SIGUSR1, arm)

        def serve(client):
            upstream = socket.create_connection(("127.0.0.1", upstream_port))
            try:
                while True:
                    for side in select.select([client, upstream], [], [])[0]:
                        data = side.recv(65536)
                        if not data:
                            return
                        if side is client:
                            upstream.sendall(data)
                            continue
                        with lock:
                            drop = armed[0] and pattern in data
                            if drop:
                                armed[0] = False
                        if drop:
                            print("dropped", flush=True)
                            return
                        client.sendall(data)
            except OSError:
                pass
            finally:
                client.close()
                upstream.close()

        """#
}

/// The tests' TCP proxies, in Python: each script defines `serve(client)`, run on a thread per connection.
enum PythonProxy {
    /// Starts `script` from `directory` on a free loopback port (written to the port file once it listens).
    static func start(_ script: String, in directory: String, arguments: [String]) async throws -> (process: ManagedProcess, port: Int) {
        try (script + Self.serveForever).write(toFile: "\(directory)/proxy.py", atomically: true, encoding: .utf8)
        let process = try ManagedProcess(
            executable: "/usr/bin/python3", arguments: ["-u", "\(directory)/proxy.py"] + arguments, environment: [:], portFileVariable: "PROXY_PORT_FILE"
        )
        return (process, try await process.port(timeout: .seconds(30)))
    }

    private static let serveForever = #"""

        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with open(os.environ["PROXY_PORT_FILE"] + ".tmp", "w") as f:
            f.write(str(listener.getsockname()[1]))
        os.rename(os.environ["PROXY_PORT_FILE"] + ".tmp", os.environ["PROXY_PORT_FILE"])
        while True:
            connection, _ = listener.accept()
            threading.Thread(target=serve, args=(connection,), daemon=True).start()
        """#
}
