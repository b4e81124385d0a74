/// A JSON value, parsed strictly by RFC 8259: request bodies, job payloads and Apple's answers.
///
/// Parsed here rather than by Foundation: `JSONSerialization`'s bridging to `[String: Any]` and the
/// casts back were a tenth of the API's CPU per accepted receipt, and `JSONDecoder` 7 % of a draining
/// worker's. Numbers keep their literal text, so a whole number is read exactly, however many digits it has.
public enum JSONValue: Equatable, Sendable {
    case null
    case bool(Bool)
    /// A number's literal, as written (grammar checked).
    case number(String)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// Why a text is not JSON.
    public enum ParseError: Error, Equatable {
        /// Not one JSON value (RFC 8259), or not UTF-8.
        case malformed
        /// Arrays and objects nested deeper than allowed.
        case tooDeep
        /// More values than allowed. A parsed value takes 13 to 25 times the bytes of a text of tiny ones
        /// (`[0,0,…]`: 1 MiB became 13 MB), so the bytes alone do not bound the memory.
        case tooManyValues
        /// An object names the same member twice. RFC 8259 leaves what that means to the reader, so two
        /// readers of one text may see two values (a publisher's middleware one offer, Tollgate another; an
        /// answer from Apple two statuses): refused rather than guessed (I-JSON, RFC 7493 §2.3).
        case duplicateKey(String)
    }

    /// Parses one JSON text: a value with optional whitespace around it, in UTF-8.
    ///
    /// An object that names a member twice is refused (``ParseError/duplicateKey(_:)``). Nesting deeper than `maxDepth` arrays and objects is
    /// refused as soon as it is reached, so a hostile body cannot make the parser recurse deeply, and so is a
    /// text holding more than `maxValues` values (every member, element and the text's own value count), so it
    /// cannot make the parser build a tree many times its size.
    public static func parse(_ bytes: UnsafeRawBufferPointer, maxDepth: Int, maxValues: Int) throws(ParseError) -> JSONValue {
        var parser = Parser(bytes: bytes, maxDepth: maxDepth, maxValues: maxValues)
        parser.skipWhitespace()
        let value = try parser.value(depth: 0)
        parser.skipWhitespace()
        guard parser.position == bytes.count else { throw .malformed }
        return value
    }

    /// The members of one JSON object in `bytes`, or `nil` when they are not one (or nest deeper than
    /// `maxDepth`, or hold more than `maxValues` values).
    public static func object(_ bytes: UnsafeRawBufferPointer, maxDepth: Int, maxValues: Int) -> [String: JSONValue]? {
        guard case .object(let members)? = try? Self.parse(bytes, maxDepth: maxDepth, maxValues: maxValues) else { return nil }
        return members
    }
}

extension [String: JSONValue] {
    /// The member `key`, or `nil` when it is absent or `null`.
    public func present(_ key: String) -> JSONValue? {
        guard let value = self[key], value != .null else { return nil }
        return value
    }
}

private struct Parser {
    let bytes: UnsafeRawBufferPointer
    let maxDepth: Int
    var position = 0
    /// Values still allowed.
    var valuesLeft: Int

    init(bytes: UnsafeRawBufferPointer, maxDepth: Int, maxValues: Int) {
        self.bytes = bytes
        self.maxDepth = maxDepth
        self.valuesLeft = maxValues
    }

    private var current: UInt8? { self.position < self.bytes.count ? self.bytes[self.position] : nil }

    mutating func skipWhitespace() {
        while let byte = self.current, byte == 0x20 || byte == 0x0a || byte == 0x0d || byte == 0x09 {
            self.position += 1
        }
    }

    mutating func value(depth: Int) throws(JSONValue.ParseError) -> JSONValue {
        guard self.valuesLeft > 0 else { throw .tooManyValues }
        self.valuesLeft -= 1
        guard let byte = self.current else { throw .malformed }
        switch byte {
        case UInt8(ascii: "{"): return try self.object(depth: depth + 1)
        case UInt8(ascii: "["): return try self.array(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try self.string())
        case UInt8(ascii: "t"): try self.literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try self.literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try self.literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try self.number())
        default: throw .malformed
        }
    }

    private mutating func literal(_ word: StaticString) throws(JSONValue.ParseError) {
        let count = word.utf8CodeUnitCount
        guard self.bytes.count - self.position >= count else { throw .malformed }
        for index in 0..<count where self.bytes[self.position + index] != word.utf8Start[index] { throw .malformed }
        self.position += count
    }

    private mutating func object(depth: Int) throws(JSONValue.ParseError) -> JSONValue {
        guard depth <= self.maxDepth else { throw .tooDeep }
        self.position += 1
        var members: [String: JSONValue] = [:]
        self.skipWhitespace()
        if self.current == UInt8(ascii: "}") {
            self.position += 1
            return .object(members)
        }
        while true {
            guard self.current == UInt8(ascii: "\"") else { throw .malformed }
            let key = try self.string()
            self.skipWhitespace()
            guard self.current == UInt8(ascii: ":") else { throw .malformed }
            self.position += 1
            self.skipWhitespace()
            guard members.updateValue(try self.value(depth: depth), forKey: key) == nil else { throw .duplicateKey(key) }
            if try self.closes(UInt8(ascii: "}")) { return .object(members) }
        }
    }

    private mutating func array(depth: Int) throws(JSONValue.ParseError) -> JSONValue {
        guard depth <= self.maxDepth else { throw .tooDeep }
        self.position += 1
        var elements: [JSONValue] = []
        self.skipWhitespace()
        if self.current == UInt8(ascii: "]") {
            self.position += 1
            return .array(elements)
        }
        while true {
            elements.append(try self.value(depth: depth))
            if try self.closes(UInt8(ascii: "]")) { return .array(elements) }
        }
    }

    /// After a member or element: `true` past the closing bracket, `false` past a comma (and the
    /// whitespace after it); anything else is malformed.
    private mutating func closes(_ closing: UInt8) throws(JSONValue.ParseError) -> Bool {
        self.skipWhitespace()
        switch self.current {
        case UInt8(ascii: ","):
            self.position += 1
            self.skipWhitespace()
            return false
        case closing:
            self.position += 1
            return true
        default:
            throw .malformed
        }
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    private mutating func number() throws(JSONValue.ParseError) -> String {
        let start = self.position
        if self.current == UInt8(ascii: "-") { self.position += 1 }
        if self.current == UInt8(ascii: "0") {
            self.position += 1
        } else {
            guard try self.digits() > 0 else { throw .malformed }
        }
        if self.current == UInt8(ascii: ".") {
            self.position += 1
            guard try self.digits() > 0 else { throw .malformed }
        }
        if self.current == UInt8(ascii: "e") || self.current == UInt8(ascii: "E") {
            self.position += 1
            if self.current == UInt8(ascii: "+") || self.current == UInt8(ascii: "-") { self.position += 1 }
            guard try self.digits() > 0 else { throw .malformed }
        }
        return String(decoding: UnsafeRawBufferPointer(rebasing: self.bytes[start..<self.position]), as: UTF8.self)
    }

    private mutating func digits() throws(JSONValue.ParseError) -> Int {
        let start = self.position
        while let byte = self.current, byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") { self.position += 1 }
        return self.position - start
    }

    /// A string literal starting at its opening quote. Unescaped text is copied whole; it must be UTF-8
    /// without control characters.
    mutating func string() throws(JSONValue.ParseError) -> String {
        self.position += 1
        let start = self.position
        var ascii = true
        while let byte = self.current, byte != UInt8(ascii: "\""), byte != UInt8(ascii: "\\") {
            guard byte >= 0x20 else { throw .malformed }
            ascii = ascii && byte < 0x80
            self.position += 1
        }
        guard let stop = self.current else { throw .malformed }
        if stop == UInt8(ascii: "\"") {
            let raw = UnsafeRawBufferPointer(rebasing: self.bytes[start..<self.position])
            // ASCII is valid UTF-8 as it is: the common case skips the generic validation.
            let text = ascii ? String(decoding: raw, as: UTF8.self) : String(validating: raw, as: UTF8.self)
            self.position += 1
            guard let text else { throw .malformed }
            return text
        }
        var utf8 = Array(UnsafeRawBufferPointer(rebasing: self.bytes[start..<self.position]))
        while true {
            guard let byte = self.current else { throw .malformed }
            self.position += 1
            switch byte {
            case UInt8(ascii: "\""):
                guard let text = String(validating: utf8, as: UTF8.self) else { throw .malformed }
                return text
            case UInt8(ascii: "\\"):
                try self.escape(into: &utf8)
            case 0..<0x20:
                throw .malformed
            default:
                utf8.append(byte)
            }
        }
    }

    /// One escape after its backslash: `"` `\` `/` `b` `f` `n` `r` `t`, or `u` with four hex digits (a
    /// surrogate pair for characters beyond the BMP; a lone surrogate is not text).
    private mutating func escape(into utf8: inout [UInt8]) throws(JSONValue.ParseError) {
        guard let byte = self.current else { throw .malformed }
        self.position += 1
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): utf8.append(byte)
        case UInt8(ascii: "b"): utf8.append(0x08)
        case UInt8(ascii: "f"): utf8.append(0x0c)
        case UInt8(ascii: "n"): utf8.append(0x0a)
        case UInt8(ascii: "r"): utf8.append(0x0d)
        case UInt8(ascii: "t"): utf8.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = try self.hex4()
            if (0xd800...0xdbff).contains(scalar) {
                guard self.current == UInt8(ascii: "\\") else { throw .malformed }
                self.position += 1
                guard self.current == UInt8(ascii: "u") else { throw .malformed }
                self.position += 1
                let low = try self.hex4()
                guard (0xdc00...0xdfff).contains(low) else { throw .malformed }
                scalar = 0x10000 + ((scalar - 0xd800) << 10) + (low - 0xdc00)
            }
            guard let unicode = Unicode.Scalar(scalar) else { throw .malformed }
            utf8.append(contentsOf: UTF8.encode(unicode)!)
        default:
            throw .malformed
        }
    }

    private mutating func hex4() throws(JSONValue.ParseError) -> UInt32 {
        guard self.bytes.count - self.position >= 4 else { throw .malformed }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = Hex.value(self.bytes[self.position]) else { throw .malformed }
            value = value << 4 | UInt32(digit)
            self.position += 1
        }
        return value
    }
}
