import Foundation

/// One of a publisher's App Store apps, identified by its bundle id.
public struct App: Sendable, Equatable {
    /// Its id.
    public var id: UUID
    /// The publisher that owns it.
    public var publisherId: UUID
    /// `receipt.bundle_id` that Apple reports for its receipts.
    public var bundleId: String
    /// The App Store shared secret sent as `password`; never returned by the API or logged.
    public var sharedSecret: String?
    /// Whether sandbox receipts (TestFlight, review) may grant.
    public var allowSandbox: Bool

    /// Creates an app.
    public init(id: UUID, publisherId: UUID, bundleId: String, sharedSecret: String?, allowSandbox: Bool) {
        self.id = id
        self.publisherId = publisherId
        self.bundleId = bundleId
        self.sharedSecret = sharedSecret
        self.allowSandbox = allowSandbox
    }
}
