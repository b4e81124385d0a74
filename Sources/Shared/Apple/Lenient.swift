import Foundation

/// Apple sends most numbers as strings ("1700000000000") but not always; these accept both.
struct LenientInt: Decodable, Sendable {
    let value: Int64

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let number = try? container.decode(Int64.self) {
            self.value = number
        } else if let double = try? container.decode(Double.self), double.isFinite, abs(double) < 9e18 {
            self.value = Int64(double)
        } else if let text = try? container.decode(String.self), let number = Int64(text.trimmingCharacters(in: .whitespaces)) {
            self.value = number
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected an integer or a string holding one")
        }
    }
}

/// A string Apple may also send as a number (identifiers).
struct LenientString: Decodable, Sendable {
    let value: String

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let text = try? container.decode(String.self) {
            self.value = text
        } else if let number = try? container.decode(Int64.self) {
            self.value = String(number)
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected a string")
        }
    }
}

/// A flag sent as `true`, `"true"`, `1` or `"1"`.
struct LenientBool: Decodable, Sendable {
    let value: Bool

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let flag = try? container.decode(Bool.self) {
            self.value = flag
        } else if let number = try? container.decode(Int.self) {
            self.value = number != 0
        } else if let text = try? container.decode(String.self) {
            self.value = ["true", "1", "yes"].contains(text.lowercased())
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected a boolean")
        }
    }
}
