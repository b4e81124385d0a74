import Foundation

/// A blocking TCP connection to a port on 127.0.0.1, for tests that must speak below HTTP (a request cut
/// off half-way) or only need to know that something listens. Its waits (`read`, `closedByPeer`) run on a
/// thread of their own (``offThePool(_:)``): parked on Swift's cooperative pool, two of them would stall
/// every other task of the test process, its own helpers included.
public final class LoopbackSocket: Sendable {
    private let descriptor: Int32

    /// Connects, or returns nil when nothing accepts on the port.
    public init?(port: Int) {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard connected else {
            close(descriptor)
            return nil
        }
        self.descriptor = descriptor
    }

    deinit { close(self.descriptor) }

    /// Writes all of `text`; false when the connection refuses it.
    @discardableResult
    public func write(_ text: String) -> Bool {
        Array(text.utf8).withUnsafeBytes { bytes in
            var sent = 0
            while sent < bytes.count {
                let written = send(self.descriptor, bytes.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL))
                if written <= 0 { return false }
                sent += written
            }
            return true
        }
    }

    /// Reads until what was read contains `marker`, the peer closes, or `seconds` pass; returns what was read.
    public func read(until marker: String, seconds: Int32) async throws -> String {
        try await offThePool { self.readBlocking(until: marker, seconds: seconds) }
    }

    private func readBlocking(until marker: String, seconds: Int32) -> String {
        var received: [UInt8] = []
        let deadline = ContinuousClock.now + .seconds(Int(seconds))
        while !String(decoding: received, as: UTF8.self).contains(marker) {
            let left = deadline - ContinuousClock.now
            guard left > .zero else { break }
            var ready = pollfd(fd: self.descriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&ready, 1, Int32(left.components.seconds * 1000 + 1)) > 0 else { continue }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = recv(self.descriptor, &buffer, buffer.count, 0)
            if count <= 0 { break }
            received += buffer[..<count]
        }
        return String(decoding: received, as: UTF8.self)
    }

    /// Whether the other end has read everything sent to it so far: its socket's receive queue, in
    /// `/proc/net/tcp`, is empty. On loopback what `write` sent is in that queue when `write` returns, so
    /// polling this tells when the server has taken a request in, without waiting on the clock.
    public func peerReadEverything() -> Bool {
        func port(_ call: (Int32, UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> Int32) -> UInt16? {
            var address = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let result = withUnsafeMutablePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { call(self.descriptor, $0, &length) }
            }
            return result == 0 ? UInt16(bigEndian: address.sin_port) : nil
        }
        guard let mine = port(getsockname), let theirs = port(getpeername), let table = Self.procNetTCP() else { return false }
        let local = String(format: "0100007F:%04X", theirs)
        let remote = String(format: "0100007F:%04X", mine)
        for line in table.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count > 4, fields[1] == local, fields[2] == remote else { continue }
            return fields[4].split(separator: ":").last.flatMap { Int($0, radix: 16) } == 0
        }
        return false
    }

    /// `/proc/net/tcp`, read to its end: the kernel hands it out a page at a time, and Foundation's
    /// `String(contentsOfFile:)` stops after the first.
    private static func procNetTCP() -> String? {
        let descriptor = open("/proc/net/tcp", O_RDONLY)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = Glibc.read(descriptor, &buffer, buffer.count)
            if count < 0 { return nil }
            if count == 0 { break }
            bytes += buffer[..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Whether the peer closed the connection within `seconds` (reads past any data it sent first).
    public func closedByPeer(within seconds: Int32) async throws -> Bool {
        try await self.closedByPeer(within: .seconds(Int(seconds)))
    }

    /// Whether the peer closed the connection within `limit` (reads past any data it sent first).
    public func closedByPeer(within limit: Duration) async throws -> Bool {
        try await offThePool { self.closedByPeerBlocking(within: limit) }
    }

    private func closedByPeerBlocking(within limit: Duration) -> Bool {
        let deadline = ContinuousClock.now + limit
        var buffer = [UInt8](repeating: 0, count: 4096)
        while ContinuousClock.now < deadline {
            var ready = pollfd(fd: self.descriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&ready, 1, 100) > 0 else { continue }
            if recv(self.descriptor, &buffer, buffer.count, 0) <= 0 { return true }
        }
        return false
    }
}
