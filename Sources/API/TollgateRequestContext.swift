import Hummingbird
import Shared

/// The per-request context: Hummingbird's core plus the publisher that authenticated, if any.
struct TollgateRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    /// Set by ``PublisherAuthMiddleware`` on publisher routes.
    var publisher: Publisher?
    /// Set by ``PublisherAuthMiddleware`` when an app presented a customer token: the only customer it may ask about.
    var customerEmail: String?

    init(source: Source) {
        self.coreContext = .init(source: source)
    }

    /// CONTRACT.md: bodies above 1 MiB are refused with 413.
    var maxUploadSize: Int { APILimits.maxBodyBytes }

    /// The authenticated publisher; routes behind ``PublisherAuthMiddleware`` always have one.
    func requirePublisher() throws -> Publisher {
        guard let publisher else { throw APIError.unauthorized }
        return publisher
    }
}

/// Request limits.
enum APILimits {
    /// Largest request body (CONTRACT.md).
    static let maxBodyBytes = 1 << 20
}
