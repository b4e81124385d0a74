import HummingbirdCore
import Logging
import NIOCore
import NIOHTTPTypes

extension HTTPServerBuilder {
    /// HTTP/1.1 as the API and the worker serve it. A connection that goes quiet is closed after
    /// `idleTimeoutSeconds` (`TOLLGATE_HTTP_IDLE_TIMEOUT_S`): one left open by a client that vanished, or one
    /// stalled half-way through a request head or body, would otherwise hold its file descriptor for good. A
    /// request's body must also arrive whole within that time of its head (``RequestDeadlineHandler``). A
    /// request read whole is never cut while the server works on it.
    public static func tollgate(idleTimeoutSeconds: Int, logger: Logger) -> HTTPServerBuilder {
        let timeout = TimeAmount.seconds(Int64(idleTimeoutSeconds))
        return .http1(configuration: .init(
            additionalChannelHandlers: [RequestDeadlineHandler(timeout: timeout, logger: logger)],
            idleTimeout: .seconds(Int64(idleTimeoutSeconds))
        ))
    }
}

/// Closes a connection whose request has not arrived whole `timeout` after its head did.
///
/// Hummingbird's idle timeout counts from the last part read, and every piece of a body is a part: a client
/// that sends a body a byte a minute would hold its connection, and the body read so far (up to 1 MiB), for
/// good, and a few thousand such clients need no credentials. With this handler a request's body must follow
/// its head within the timeout. Only the client's delay counts: while the server is not reading (its handler
/// has not got to the body yet, and the channel holds reads back), the deadline waits. A request read whole
/// is never cut while the server works on it, and a keep-alive connection between requests is left to the
/// idle timeout.
///
/// Add one per connection, after the HTTP codec (Hummingbird's `additionalChannelHandlers`).
public final class RequestDeadlineHandler: ChannelDuplexHandler, RemovableChannelHandler {
    public typealias InboundIn = HTTPRequestPart
    public typealias InboundOut = HTTPRequestPart
    public typealias OutboundIn = HTTPResponsePart
    public typealias OutboundOut = HTTPResponsePart

    private let timeout: TimeAmount
    private let logger: Logger
    private var deadline: Scheduled<Void>?
    /// A read asked for and not yet answered: the server waits on the client.
    private var reading = false

    public init(timeout: TimeAmount, logger: Logger) {
        self.timeout = timeout
        self.logger = logger
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head:
            self.cancel()
            self.schedule(context: context, in: self.timeout)
        case .body:
            break
        case .end:
            self.cancel()
        }
        context.fireChannelRead(data)
    }

    public func channelReadComplete(context: ChannelHandlerContext) {
        self.reading = false
        context.fireChannelReadComplete()
    }

    public func read(context: ChannelHandlerContext) {
        self.reading = true
        context.read()
    }

    public func channelInactive(context: ChannelHandlerContext) {
        self.cancel()
        context.fireChannelInactive()
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        self.cancel()
    }

    private func schedule(context: ChannelHandlerContext, in delay: TimeAmount) {
        self.deadline = context.eventLoop.assumeIsolated().scheduleTask(in: delay) { [self] in
            self.deadline = nil
            guard self.reading else {
                // The server holds reads back: the delay is its own. Look again shortly.
                self.schedule(context: context, in: .milliseconds(100))
                return
            }
            // The peer's address only: what it sent may be a receipt.
            self.logger.info("request body not received whole in time, connection closed", metadata: [
                "timeout_s": "\(self.timeout.nanoseconds / 1_000_000_000)",
                "peer": "\(context.channel.remoteAddress?.description ?? "?")",
            ])
            context.close(promise: nil)
        }
    }

    private func cancel() {
        self.deadline?.cancel()
        self.deadline = nil
    }
}
