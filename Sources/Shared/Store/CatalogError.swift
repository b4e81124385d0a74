/// Why a catalog change was refused.
public enum CatalogError: Error, Equatable, Sendable {
    /// No such publisher.
    case unknownPublisher
    /// The publisher has no app with that bundle id.
    case unknownApp
    /// No such product.
    case unknownProduct
    /// Another row already holds that unique value (named).
    case conflict(String)
}
