import HTTPTypes
import Logging
import NIOCore
import NIOEmbedded
import NIOHTTPTypes
import Shared
import Testing

/// The handler on an embedded channel, whose clock moves only when told: a request's body must follow its
/// head within 2 s of the client's time.
@Suite("Request body deadline")
struct RequestDeadlineHandlerTests {
    private static let head = HTTPRequestPart.head(HTTPRequest(method: .post, scheme: nil, authority: "tollgate", path: "/api/3.0/json"))
    private static let byte = HTTPRequestPart.body(ByteBuffer(string: " "))

    private static func connected() throws -> EmbeddedChannel {
        let channel = EmbeddedChannel(handler: RequestDeadlineHandler(timeout: .seconds(2), logger: Logger(label: "test")))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 8080)).wait()
        return channel
    }

    /// A connection whose request head has arrived, and whose server reads on.
    private static func readingBody() throws -> EmbeddedChannel {
        let channel = try Self.connected()
        try Self.headRead(channel)
        return channel
    }

    /// One more byte of the body arrives `after` from now, and the server reads on.
    private static func byteArrives(_ channel: EmbeddedChannel, after: TimeAmount) throws {
        channel.embeddedEventLoop.advanceTime(by: after)
        try channel.writeInbound(Self.byte)
        Self.serverReads(channel)
    }

    /// A request head arrives and the server reads on.
    private static func headRead(_ channel: EmbeddedChannel) throws {
        try channel.writeInbound(Self.head)
        Self.serverReads(channel)
    }

    /// A connection whose request head arrived 10 s ago, while the server held reads back (its handler had not
    /// got to the body: authentication waiting on Redis), and whose server now reads; still open.
    private static func readingAfterHoldingBack() throws -> EmbeddedChannel {
        let channel = try Self.connected()
        try channel.writeInbound(Self.head)
        channel.embeddedEventLoop.advanceTime(by: .seconds(10))
        #expect(channel.isActive)
        Self.serverReads(channel)
        return channel
    }

    /// The server asks for more, as the channel does while its handler reads the body.
    private static func serverReads(_ channel: EmbeddedChannel) {
        channel.pipeline.read()
    }

    /// The channel is still open 100 ms before `left` from now has passed, and closed once it has.
    private static func expectClosed(_ channel: EmbeddedChannel, in left: TimeAmount, sourceLocation: SourceLocation = #_sourceLocation) {
        channel.embeddedEventLoop.advanceTime(by: left - .milliseconds(100))
        #expect(channel.isActive, sourceLocation: sourceLocation)
        channel.embeddedEventLoop.advanceTime(by: .milliseconds(100))
        #expect(!channel.isActive, sourceLocation: sourceLocation)
    }

    /// The server writes a whole response.
    private static func serverAnswers(_ channel: EmbeddedChannel, _ status: HTTPResponse.Status) throws {
        try channel.writeOutbound(HTTPResponsePart.head(HTTPResponse(status: status)))
        try channel.writeOutbound(HTTPResponsePart.end(nil))
    }

    @Test("a body trickled a byte every 100 ms closes the connection 2 s after its head, not before")
    func trickledBody() throws {
        let channel = try Self.readingBody()
        for _ in 0..<18 { try Self.byteArrives(channel, after: .milliseconds(100)) }
        Self.expectClosed(channel, in: .milliseconds(200))
    }

    @Test("a request read whole is never cut, however long the server then takes, and the next head starts its own 2 s")
    func wholeRequests() throws {
        let channel = try Self.readingBody()
        channel.embeddedEventLoop.advanceTime(by: .milliseconds(1900))
        try channel.writeInbound(HTTPRequestPart.end(nil))
        Self.serverReads(channel)
        channel.embeddedEventLoop.advanceTime(by: .seconds(60))
        #expect(channel.isActive)
        try Self.serverAnswers(channel, .ok)

        try Self.headRead(channel)
        Self.expectClosed(channel, in: .seconds(2))
    }

    @Test("while the server holds reads back the deadline moves on by as long: the client still has its 2 s once the server reads again")
    func serverHoldsReadsBack() throws {
        let channel = try Self.readingAfterHoldingBack()
        Self.expectClosed(channel, in: .seconds(2))
    }

    @Test("a pipelined request's deadline closes the connection only once the response to the request before it is written")
    func pipelined() throws {
        let channel = try Self.readingBody()
        try channel.writeInbound(HTTPRequestPart.end(nil))
        try Self.headRead(channel)
        channel.embeddedEventLoop.advanceTime(by: .seconds(3))
        #expect(channel.isActive, "the first request, read whole, is still being answered")
        try channel.writeOutbound(HTTPResponsePart.head(HTTPResponse(status: .ok)))
        try? channel.writeOutbound(HTTPResponsePart.end(nil))
        #expect(!channel.isActive)
        #expect(try channel.readOutbound(as: HTTPResponsePart.self) == .head(HTTPResponse(status: .ok)))
        #expect(try channel.readOutbound(as: HTTPResponsePart.self) == .end(nil), "the response was written before the close")
    }

    @Test("a request answered before its body (a 401), whose body then trickles, is closed at its deadline")
    func answeredEarly() throws {
        let channel = try Self.readingBody()
        try Self.serverAnswers(channel, .unauthorized)
        try Self.byteArrives(channel, after: .milliseconds(1800))
        Self.expectClosed(channel, in: .milliseconds(200))
    }

    @Test("a body that the server reads at once after holding reads back is not cut")
    func bodyReadAfterHoldingBack() throws {
        let channel = try Self.readingAfterHoldingBack()
        try channel.writeInbound(Self.byte)
        try channel.writeInbound(HTTPRequestPart.end(nil))
        channel.embeddedEventLoop.advanceTime(by: .seconds(10))
        #expect(channel.isActive)
    }
}
