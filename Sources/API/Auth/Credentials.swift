import Foundation

/// Parses the credentials of an `Authorization` header.
enum Credentials {
    /// The token of `Bearer <token>`.
    static func bearer(_ header: String?) -> String? {
        guard let header, header.count > 7, header.prefix(7).lowercased() == "bearer " else { return nil }
        let token = FieldRules.trimmingSpaces(String(header.dropFirst(7)))
        return token.isEmpty ? nil : token
    }

    /// The user name and password of `Basic <base64(user:password)>`.
    static func basic(_ header: String?) -> (username: String, password: String)? {
        guard let header, header.count > 6, header.prefix(6).lowercased() == "basic " else { return nil }
        let encoded = FieldRules.trimmingSpaces(String(header.dropFirst(6)))
        guard let data = Data(base64Encoded: encoded), let text = String(data: data, encoding: .utf8),
            let colon = text.firstIndex(of: ":")
        else { return nil }
        return (String(text[..<colon]), String(text[text.index(after: colon)...]))
    }
}
