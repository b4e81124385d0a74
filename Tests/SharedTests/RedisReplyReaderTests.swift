import NIOCore
import Testing
@testable import Shared

@Suite("RESP encoding and hiredis' reply reader")
struct RedisReplyReaderTests {
    /// Feeds `bytes` in pieces of `piece` bytes and collects every reply the reader hands out.
    static func read(_ bytes: [UInt8], piece: Int) -> [RedisReplyReader.Next] {
        let reader = RedisReplyReader()
        var found: [RedisReplyReader.Next] = []
        var offset = 0
        while offset < bytes.count {
            let end = min(bytes.count, offset + piece)
            #expect(bytes[offset..<end].withUnsafeBytes { reader.feed($0) })
            offset = end
            while true {
                let next = reader.next()
                if case .incomplete = next { break }
                found.append(next)
                if case .failed = next { return found }
            }
        }
        return found
    }

    static func values(_ found: [RedisReplyReader.Next]) -> [RedisValue] {
        found.compactMap { if case .reply(.success(let value)) = $0 { value } else { nil } }
    }

    @Test("replies split at every possible byte come out whole and in order", arguments: [1, 2, 3, 7, 1000])
    func split(piece: Int) {
        let wire = Array("+OK\r\n:42\r\n$4\r\na\r\nb\r\n$-1\r\n*3\r\n$7\r\ncreated\r\n*1\r\n:-1\r\n$0\r\n\r\n-ERR boom\r\n".utf8)
        let found = Self.read(wire, piece: piece)
        #expect(found.count == 6)
        #expect(Self.values(found) == [
            .status("OK"), .integer(42), .bulk(Array("a\r\nb".utf8)), .null,
            .array([.bulk(Array("created".utf8)), .array([.integer(-1)]), .bulk([])]),
        ])
        guard case .reply(.failure(let error))? = found.last else {
            Issue.record("the error reply was not the last: \(found)")
            return
        }
        #expect(error.code == .server)
        #expect(error.message == "ERR boom")
    }

    @Test("bytes that are not the Redis protocol fail the reader")
    func garbage() {
        let found = Self.read(Array("HTTP/1.1 200 OK\r\n".utf8), piece: 100)
        guard case .failed(let error)? = found.last else {
            Issue.record("expected a protocol failure, got \(found)")
            return
        }
        #expect(error.code == .protocolViolation)
    }

    @Test("a command encodes as an array of bulk strings, byte for byte")
    func encode() {
        var buffer = ByteBuffer()
        RESP.encode(["SET", "k\r\n", "é", ""], into: &buffer)
        #expect(String(buffer: buffer) == "*4\r\n$3\r\nSET\r\n$3\r\nk\r\n\r\n$2\r\né\r\n$0\r\n\r\n")
    }
}
