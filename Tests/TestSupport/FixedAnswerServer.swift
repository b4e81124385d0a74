import Foundation

/// An HTTP/1.1 server on 127.0.0.1 that reads each request whole and answers every one with the same status
/// and JSON body, then closes the connection: a proxy in front of the API answering 502 or 504.
///
/// Its accept loop runs on a thread of its own (blocking calls), never on Swift's cooperative pool.
public final class FixedAnswerServer: @unchecked Sendable {
    // @unchecked Sendable: `requests` is touched only under `lock`; the socket is closed once, by `deinit`.
    private let lock = NSLock()
    private let socket: Int32
    private var requests: [String] = []
    /// The port it listens on.
    public let port: Int

    /// Listens on a free port and answers `status` with `{"message": message}`.
    public init(status: Int, reason: String, message: String) throws {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw ManagedProcess.Failure("socket: errno \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(socket, pointer, length) == 0 && listen(socket, 16) == 0 && getsockname(socket, pointer, &length) == 0
            }
        }
        guard bound else {
            close(socket)
            throw ManagedProcess.Failure("cannot listen on 127.0.0.1: errno \(errno)")
        }
        self.socket = socket
        self.port = Int(UInt16(bigEndian: address.sin_port))
        let body = #"{"message":"\#(message)"}"#
        let answer = Array("HTTP/1.1 \(status) \(reason)\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)".utf8)
        let thread = Thread { [weak self] in
            while true {
                let connection = accept(socket, nil, nil)
                guard connection >= 0 else { return }  // the listening socket was shut down
                let request = Self.readRequest(connection)
                _ = answer.withUnsafeBytes { write(connection, $0.baseAddress, $0.count) }
                close(connection)
                guard let self else { return }
                self.lock.withLock { self.requests.append(request) }
            }
        }
        thread.start()
    }

    /// The request lines (`POST /admin/v1/publishers HTTP/1.1`) received so far, in order.
    public var requestLines: [String] { self.lock.withLock { self.requests } }

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

    deinit {
        Glibc.shutdown(self.socket, Int32(SHUT_RDWR))
        close(self.socket)
    }
}
