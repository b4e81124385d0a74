/// The platform the purchase was made on.
public enum AppType: String, Sendable, Codable, CaseIterable {
    case ios
    case tvos
}
