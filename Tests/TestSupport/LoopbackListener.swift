import Foundation

/// A TCP socket listening on 127.0.0.1 at a port the kernel picked: what ``SilentListener`` and
/// ``FixedAnswerServer`` stand on. Its owner closes `descriptor`.
struct LoopbackListener {
    let descriptor: Int32
    let port: Int

    init(backlog: Int32 = 64) throws {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw ManagedProcess.Failure("socket: errno \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(socket, pointer, length) == 0 && listen(socket, backlog) == 0 && getsockname(socket, pointer, &length) == 0
            }
        }
        guard bound else {
            close(socket)
            throw ManagedProcess.Failure("cannot listen on 127.0.0.1: errno \(errno)")
        }
        self.descriptor = socket
        self.port = Int(UInt16(bigEndian: address.sin_port))
    }
}
