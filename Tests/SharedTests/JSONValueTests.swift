import Foundation
import PropertyBased
import Testing

@testable import Shared

/// `JSONValue.parse`: RFC 8259, strictly, checked against Foundation's `JSONSerialization` as an oracle.
@Suite("JSONValue")
struct JSONValueTests {
    static func parse(_ bytes: [UInt8], maxDepth: Int = 32, maxValues: Int = .max) throws(JSONValue.ParseError) -> JSONValue {
        try bytes.withUnsafeBytes { raw in
            Result { () throws(JSONValue.ParseError) in try JSONValue.parse(raw, maxDepth: maxDepth, maxValues: maxValues) }
        }.get()
    }

    static func parse(_ text: String, maxDepth: Int = 32, maxValues: Int = .max) throws(JSONValue.ParseError) -> JSONValue {
        try Self.parse(Array(text.utf8), maxDepth: maxDepth, maxValues: maxValues)
    }

    @Test("values of every kind, with whitespace, escapes and surrogate pairs")
    func values() throws {
        let text = " {\"s\" : \"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00é😀\", \"n\":[0,-0,12,-3.5,1e3,2E-2,1.5e+10],\n\t\"b\":[true,false,null],\"o\":{},\"a\":[]}\r\n"
        let value = try Self.parse(text)
        #expect(value == .object([
            "s": .string("a\"b\\c/d\u{8}\u{c}\n\r\té😀é😀"),
            "n": .array([.number("0"), .number("-0"), .number("12"), .number("-3.5"), .number("1e3"), .number("2E-2"), .number("1.5e+10")]),
            "b": .array([.bool(true), .bool(false), .null]),
            "o": .object([:]),
            "a": .array([]),
        ]))
        #expect(try Self.parse("\"\"") == .string(""))
        #expect(try Self.parse("\"\\u0000\"") == .string("\u{0}"), "NUL is text; fields refuse it later")
        #expect(try Self.parse("[1e400,-1E+999]") == .array([.number("1e400"), .number("-1E+999")]), "the literal is kept; a field that reads it refuses it")
    }

    @Test("an object naming a member twice is refused, at any depth, whatever the values")
    func duplicateKeys() throws {
        #expect(throws: JSONValue.ParseError.duplicateKey("k")) { try Self.parse(#"{"k":1,"k":2}"#) }
        #expect(throws: JSONValue.ParseError.duplicateKey("k")) { try Self.parse(#"{"k":"same","k":"same"}"#) }
        #expect(throws: JSONValue.ParseError.duplicateKey("offerId")) { try Self.parse(#"[{"receipt":{"offerId":null,"offerId":"A"}}]"#) }
        #expect(throws: JSONValue.ParseError.duplicateKey("k")) { try Self.parse(#"{"k":1,"\u006b":2}"#) }
        #expect(try Self.parse(#"{"k":{"k":1},"K":2}"#) == .object(["k": .object(["k": .number("1")]), "K": .number("2")]))
        #expect(Array(#"{"status":0,"status":21003}"#.utf8).withUnsafeBytes { JSONValue.object($0, maxDepth: 4, maxValues: 10) } == nil, "an answer from Apple too")
    }

    @Test("texts that are not JSON are refused", arguments: [
        "", " ", "{", "}", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "[1,]", "[,1]", "{,}", "{\"a\" 1}", "{'a':1}", "{a:1}",
        "[1 2]", "01", "-", "1.", ".5", "+1", "1e", "1e+", "--1", "0x10", "NaN", "Infinity", "-Infinity", "tru", "nul",
        "True", "\"abc", "\"a\\x\"", "\"a\\u12\"", "\"a\\u12g4\"", "\"\\ud800\"", "\"\\ud800x\"", "\"\\ud800\\u0041\"",
        "\"\\udc00\"", "\"a\tb\"", "\"a\nb\"", "{} x", "[] []", "1 2", "/* c */ {}", "{} // c", "\u{feff}{}", "[\"a\"\"b\"]",
    ])
    func malformed(text: String) {
        #expect(throws: JSONValue.ParseError.malformed) { try Self.parse(text) }
    }

    @Test("bytes that are not UTF-8 are refused, in plain and escaped strings")
    func invalidUTF8() {
        for bytes: [UInt8] in [
            [0x22, 0xff, 0x22], [0x22, 0xc0, 0xaf, 0x22], [0x22, 0x5c, 0x6e, 0xed, 0xa0, 0x80, 0x22], [0x22, 0xe2, 0x82, 0x22],
            // After ASCII, which alone takes a path without validation.
            [0x22, 0x61, 0x62, 0x80, 0x22], [0x22, 0x61, 0x62, 0x63, 0xf4, 0x90, 0x80, 0x80, 0x22],
        ] {
            #expect(throws: JSONValue.ParseError.malformed) { try Self.parse(bytes) }
        }
    }

    @Test("nesting is counted as it is read: maxDepth passes, one more is refused, however deep the rest")
    func depth() throws {
        func nested(_ depth: Int) -> String { String(repeating: "[", count: depth) + String(repeating: "]", count: depth) }
        #expect(throws: Never.self) { try Self.parse(nested(32)) }
        #expect(throws: JSONValue.ParseError.tooDeep) { try Self.parse(nested(33)) }
        #expect(throws: JSONValue.ParseError.tooDeep) { try Self.parse(String(repeating: "{\"a\":", count: 40) + "1" + String(repeating: "}", count: 40)) }
        #expect(throws: JSONValue.ParseError.tooDeep) { try Self.parse(String(repeating: "[", count: 200_000)) }
        #expect(throws: JSONValue.ParseError.malformed) { try Self.parse("[[[1,]]]") }
    }

    @Test("values are counted as they are read, members, elements and the text's own value alike: maxValues passes, one more is refused")
    func valueCount() throws {
        // An object of two members, one an array of three: 1 + 2 + 3 values.
        let text = #"{"a":[1,"x",null],"b":{}}"#
        #expect(throws: Never.self) { try Self.parse(text, maxValues: 6) }
        #expect(throws: JSONValue.ParseError.tooManyValues) { try Self.parse(text, maxValues: 5) }
        #expect(throws: JSONValue.ParseError.tooManyValues) { try Self.parse("0", maxValues: 0) }
        // Refused as soon as the limit is passed, before the rest is read (the rest here is not even JSON).
        #expect(throws: JSONValue.ParseError.tooManyValues) { try Self.parse("[" + String(repeating: "0,", count: 100) + "?", maxValues: 10) }
    }

    // MARK: Against JSONSerialization

    /// Whether a parsed value is the same as Foundation's reading of the same text.
    static func same(_ value: JSONValue, _ foundation: Any) -> Bool {
        switch value {
        case .null: return foundation is NSNull
        case .bool(let flag):
            guard let number = foundation as? NSNumber, String(cString: number.objCType) == "c" else { return false }
            return number.boolValue == flag
        case .number(let literal):
            guard let number = foundation as? NSNumber, String(cString: number.objCType) != "c", let double = Double(literal) else { return false }
            return number.doubleValue == double
        case .string(let text): return (foundation as? String) == text
        case .array(let elements):
            guard let others = foundation as? [Any], others.count == elements.count else { return false }
            return zip(elements, others).allSatisfy { Self.same($0, $1) }
        case .object(let members):
            guard let others = foundation as? [String: Any], others.count == members.count else { return false }
            return members.allSatisfy { key, member in others[key].map { Self.same(member, $0) } ?? false }
        }
    }

    /// Whether a comma, outside strings, is followed (after whitespace) by `]` or `}`: not JSON, but
    /// swift-corelibs-foundation reads `[1,]` and `{"a":1,}`.
    static func hasTrailingComma(_ bytes: [UInt8]) -> Bool {
        var inString = false, escaped = false, afterComma = false
        for byte in bytes {
            if inString {
                if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""): inString = true; afterComma = false
            case UInt8(ascii: ","): afterComma = true
            case UInt8(ascii: "]"), UInt8(ascii: "}"): if afterComma { return true }
            case 0x20, 0x09, 0x0a, 0x0d: break
            default: afterComma = false
            }
        }
        return false
    }

    /// Whether a value holds a number literal whose magnitude overflows Double (`1e400`).
    static func holdsNumberBeyondDouble(_ value: JSONValue) -> Bool {
        switch value {
        case .number(let literal): !(Double(literal)?.isFinite ?? false)
        case .array(let elements): elements.contains { Self.holdsNumberBeyondDouble($0) }
        case .object(let members): members.values.contains { Self.holdsNumberBeyondDouble($0) }
        case .null, .bool, .string: false
        }
    }

    /// A random JSON value built from a list of choices: nested objects and arrays, numbers, and strings
    /// with quotes, backslashes, control characters and characters beyond the BMP.
    static func build(_ choices: inout IndexingIterator<[Int]>, depth: Int = 0) -> Any {
        let pieces = ["a", "\"", "\\", "/", "\n", "\u{1}", "\u{1f}", "é", "😀", "\u{2028}", " ", "Z", "\u{7f}", "\u{ffff}"]
        guard let choice = choices.next() else { return "end" }
        switch choice % (depth < 6 ? 9 : 6) {
        case 0: return NSNull()
        case 1: return choice % 2 == 0
        case 2: return choice - 500
        case 3: return Double(choice) / 8 - 60
        case 4, 5:
            var text = ""
            for _ in 0..<(choice % 7) { text += pieces[(choices.next() ?? 0) % pieces.count] }
            return text
        case 6:
            return (0..<(choice % 4)).map { _ in Self.build(&choices, depth: depth + 1) }
        default:
            var object: [String: Any] = [:]
            for index in 0..<(choice % 4) {
                let key = "k\(index)" + pieces[(choices.next() ?? 0) % pieces.count]
                object[key] = Self.build(&choices, depth: depth + 1)
            }
            return object
        }
    }

    @Test("what JSONSerialization writes parses to the same value")
    func roundTrip() async {
        await propertyCheck(count: 1000, input: Gen.int(in: 0...10_000).array(of: 1...80)) { choices in
            var iterator = choices.makeIterator()
            let built = Self.build(&iterator)
            let data = try! JSONSerialization.data(withJSONObject: built, options: [.fragmentsAllowed])
            let parsed = try? Self.parse(Array(data))
            #expect(parsed.map { Self.same($0, built) } == true, "\(String(decoding: data, as: UTF8.self))")
        }
    }

    @Test("texts with bytes overwritten, inserted or cut: accepted only when JSONSerialization reads the same value")
    func mutations() async {
        let values = Gen.int(in: 0...10_000).array(of: 1...60)
        let edits = Gen.int(in: 0...Int(UInt16.max)).array(of: 1...8)
        await propertyCheck(count: 2000, input: values, edits) { choices, edits in
            var iterator = choices.makeIterator()
            var bytes = Array(try! JSONSerialization.data(withJSONObject: Self.build(&iterator), options: [.fragmentsAllowed]))
            for pair in stride(from: 0, to: edits.count - 1, by: 2) {
                let position = edits[pair] % max(bytes.count, 1)
                let byte = UInt8(truncatingIfNeeded: edits[pair + 1])
                switch (edits[pair + 1] >> 8) % 3 {
                case 0 where !bytes.isEmpty: bytes[position] = byte
                case 1: bytes.insert(byte, at: position)
                default: bytes = Array(bytes.prefix(position))
                }
            }
            let foundation = try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
            let text = String(decoding: bytes, as: UTF8.self)
            switch Result(catching: { () throws(JSONValue.ParseError) in try Self.parse(bytes, maxDepth: 64) }) {
            case .success(let value):
                // Foundation refuses a number beyond Double's range; RFC 8259 §6 lets a parser keep it.
                #expect(foundation.map { Self.same(value, $0) } ?? Self.holdsNumberBeyondDouble(value), "accepted what Foundation reads otherwise: \(text)")
            case .failure(.duplicateKey):
                break  // Foundation keeps one of the two; see `duplicateKeys`.
            case .failure:
                // Foundation also reads UTF-16 and UTF-32 texts (only UTF-8 is JSON, RFC 8259 §8.1),
                // and on Linux a comma before a closing bracket.
                #expect(foundation == nil || bytes.contains(0) || Self.hasTrailingComma(bytes), "refused what Foundation reads: \(text)")
            }
        }
    }
}
