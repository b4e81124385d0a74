import Foundation

/// Lower-case hexadecimal, for digests and `bytea`.
public enum Hex {
    static let digits = Array("0123456789abcdef".utf8)

    /// Encodes bytes as lower-case hex.
    public static func encode<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for byte in bytes {
            out.append(Self.digits[Int(byte >> 4)])
            out.append(Self.digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes hex (either case); `nil` for odd length or a non-hex character.
    public static func decode<Text: StringProtocol>(_ text: Text) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count / 2)
        var index = 0
        while index < utf8.count {
            guard let high = Self.value(utf8[index]), let low = Self.value(utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }

    /// The value of one hex digit (either case).
    public static func value(_ character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): character - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): character - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): character - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

extension UUID {
    /// The canonical lower-case text (`56d0907b-d8f4-4af8-b440-01a1847ccd2e`), the form keys, logs and
    /// PostgreSQL use.
    ///
    /// Built from the bytes: `uuidString` formats each byte with `sprintf`, and an accepted receipt needs
    /// its publisher's id as text several times.
    public var lowercasedString: String {
        withUnsafeBytes(of: self.uuid) { Hex.uuidText(UnsafeRawBufferPointer($0)) }
    }

    /// A random (version 4) UUID from the system's generator (`getrandom`).
    ///
    /// Foundation's `UUID()` opens, reads and closes `/dev/urandom` on every call on Linux.
    public static func random() -> UUID {
        var generator = SystemRandomNumberGenerator()
        var bytes = (generator.next() as UInt64, generator.next() as UInt64)
        return withUnsafeMutableBytes(of: &bytes) { raw in
            raw[6] = (raw[6] & 0x0f) | 0x40
            raw[8] = (raw[8] & 0x3f) | 0x80
            return UUID(uuid: raw.load(as: uuid_t.self))
        }
    }
}

extension Hex {
    /// 16 bytes as `8-4-4-4-12` lower-case hex.
    static func uuidText(_ bytes: UnsafeRawBufferPointer) -> String {
        precondition(bytes.count == 16)
        return String(unsafeUninitializedCapacity: 36) { out in
            var position = 0
            for index in 0..<16 {
                if index == 4 || index == 6 || index == 8 || index == 10 {
                    out[position] = UInt8(ascii: "-")
                    position += 1
                }
                out[position] = Self.digits[Int(bytes[index] >> 4)]
                out[position + 1] = Self.digits[Int(bytes[index] & 0x0f)]
                position += 2
            }
            return position
        }
    }
}
