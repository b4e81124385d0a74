import AsyncHTTPClient
import Foundation
import Hummingbird
import NIOCore
import Synchronization

/// An HTTP proxy in front of the emulator that turns every millisecond value of its answers (`…_ms`,
/// which the emulator, like Apple usually, sends as strings) into a JSON number, so the worker can be
/// shown Apple's other spelling of the same answer. Everything else passes through untouched.
final class NumericAnswerProxy: Sendable {
    /// What the routes share: where to forward, and how many values were rewritten.
    private final class State: Sendable {
        let upstream = Mutex<String?>(nil)
        let rewritten = Atomic<Int>(0)
        let http = HTTPClient(eventLoopGroupProvider: .singleton)

        func forward(_ request: Request, path: String) async throws -> Response {
            guard let upstream = self.upstream.withLock({ $0 }) else { return Response(status: .serviceUnavailable) }
            var outgoing = HTTPClientRequest(url: "\(upstream)/\(path)")
            outgoing.method = .POST
            outgoing.headers.add(name: "Content-Type", value: "application/json")
            outgoing.body = .bytes(try await request.body.collect(upTo: 16 << 20))
            let response = try await self.http.execute(outgoing, timeout: .seconds(30))
            let bytes = try await response.body.collect(upTo: 16 << 20)
            guard response.status == .ok, let object = try? JSONSerialization.jsonObject(with: Data(bytes.readableBytesView)) else {
                return Response(status: .init(code: Int(response.status.code)), body: .init(byteBuffer: bytes))
            }
            var count = 0
            let converted = Self.numbers(object, count: &count)
            self.rewritten.add(count, ordering: .relaxed)
            let data = try JSONSerialization.data(withJSONObject: converted)
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
        }

        /// Rewrites `"…_ms": "digits"` to `"…_ms": digits`, recursively.
        static func numbers(_ value: Any, count: inout Int) -> Any {
            if let object = value as? [String: Any] {
                var result: [String: Any] = [:]
                for (key, field) in object {
                    if key.hasSuffix("_ms"), let text = field as? String, let number = Int64(text) {
                        result[key] = NSNumber(value: number)
                        count += 1
                    } else {
                        result[key] = Self.numbers(field, count: &count)
                    }
                }
                return result
            }
            if let array = value as? [Any] { return array.map { Self.numbers($0, count: &count) } }
            return value
        }
    }

    private let state: State
    private let server: LoopbackServer
    /// `http://127.0.0.1:PORT`.
    var base: String { self.server.base }

    private init(state: State, server: LoopbackServer) {
        self.state = state
        self.server = server
    }

    /// Starts the proxy on a free loopback port.
    static func start() async throws -> NumericAnswerProxy {
        let state = State()
        let router = Router()
        router.post("verifyReceipt") { request, _ in try await state.forward(request, path: "verifyReceipt") }
        router.post("sandbox/verifyReceipt") { request, _ in try await state.forward(request, path: "sandbox/verifyReceipt") }
        do {
            return NumericAnswerProxy(state: state, server: try await LoopbackServer.start(router, label: "test.numeric-proxy"))
        } catch {
            try? await state.http.shutdown()
            throw error
        }
    }

    /// Where answers come from (the harness's emulator).
    func forward(to upstream: String) {
        self.state.upstream.withLock { $0 = upstream }
    }

    /// How many millisecond values were turned into numbers so far.
    var rewritten: Int { self.state.rewritten.load(ordering: .relaxed) }

    func stop() async {
        await self.server.stop()
        try? await self.state.http.shutdown()
    }
}
