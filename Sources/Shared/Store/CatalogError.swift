/// Why a catalog change was refused.
public enum CatalogError: Error, Equatable, Sendable {
    /// No such publisher.
    case unknownPublisher
    /// No such product.
    case unknownProduct
    /// Another row already holds that unique value (named).
    case conflict(String)
}
