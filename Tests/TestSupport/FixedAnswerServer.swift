import Foundation
import Synchronization

/// An HTTP/1.1 server on 127.0.0.1 that reads each request whole and answers every one with the same status,
/// headers and JSON body, then closes the connection: a proxy in front of the API answering 502 or 504, or
/// redirecting.
///
/// Its accept loop runs on a thread of its own (blocking calls), never on Swift's cooperative pool. The
/// thread alone closes the listening socket, once `accept` fails after ``deinit`` shut it down, so the
/// descriptor's number is never reused under a loop still accepting on it.
public final class FixedAnswerServer: Sendable {
    private let requests = Requests()
    private let socket: Int32
    /// The port it listens on.
    public let port: Int

    /// Runs `body` with a server that answers until `body` returns.
    public static func with<T>(
        status: Int, reason: String, body: [String: String], headers: [String: String] = [:], _ use: (FixedAnswerServer) async throws -> T
    ) async throws -> T {
        let server = try FixedAnswerServer(status: status, reason: reason, body: body, headers: headers)
        defer { withExtendedLifetime(server) {} }
        return try await use(server)
    }

    /// Listens on a free port and answers `status` with `body` as a JSON object, and `headers`.
    public init(status: Int, reason: String, body: [String: String], headers: [String: String] = [:]) throws {
        let listener = try LoopbackListener(backlog: 16)
        self.socket = listener.descriptor
        self.port = listener.port
        let json = String(decoding: try JSONSerialization.data(withJSONObject: body, options: [.sortedKeys]), as: UTF8.self)
        let extra = headers.map { "\($0.key): \($0.value)\r\n" }.joined()
        let answer = Array(
            "HTTP/1.1 \(status) \(reason)\r\nContent-Type: application/json\r\nContent-Length: \(json.utf8.count)\r\n\(extra)Connection: close\r\n\r\n\(json)".utf8
        )
        let requests = self.requests, socket = self.socket
        Thread {
            while case let connection = accept(socket, nil, nil), connection >= 0 {
                // A client that stops sending mid-request holds this thread 5 s at most.
                var timeout = timeval(tv_sec: 5, tv_usec: 0)
                setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                // Recorded before the answer: a client that has its answer finds its request listed.
                requests.lines.withLock { $0.append(Self.readRequest(connection)) }
                Self.send(answer, to: connection)
                close(connection)
            }
            close(socket)  // shut down by deinit
        }.start()
    }

    /// The request lines (`POST /admin/v1/publishers HTTP/1.1`) received so far, in order.
    public var requestLines: [String] { self.requests.lines.withLock { $0 } }

    /// Reads the head, then as many body bytes as `Content-Length` says, so closing after the answer sends no
    /// reset ahead of it. Returns the request line.
    private static func readRequest(_ connection: Int32) -> String {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        let separator = Array("\r\n\r\n".utf8)
        var expected: Int?
        while expected.map({ received.count < $0 }) ?? true {
            let count = read(connection, &buffer, buffer.count)
            guard count > 0 else { break }
            received += buffer[0..<count]
            if expected == nil, let end = received.firstRange(of: separator)?.upperBound {
                let head = String(decoding: received[..<end], as: UTF8.self).lowercased()
                let length = head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                    .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
                expected = end + length
            }
        }
        return String(decoding: received.prefix { $0 != UInt8(ascii: "\r") }, as: UTF8.self)
    }

    /// Writes all of `bytes`, without SIGPIPE when the client has gone.
    private static func send(_ bytes: [UInt8], to connection: Int32) {
        var sent = 0
        while sent < bytes.count {
            let count = bytes.withUnsafeBytes { Glibc.send(connection, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            guard count > 0 else { return }
            sent += count
        }
    }

    private final class Requests: Sendable {
        let lines = Mutex<[String]>([])
    }

    deinit {
        // Wakes the thread's `accept`, which then fails and closes the socket.
        Glibc.shutdown(self.socket, Int32(SHUT_RDWR))
    }
}
