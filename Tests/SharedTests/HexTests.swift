import Testing
@testable import Shared

@Suite("Hex")
struct HexTests {
    @Test("encodes lower-case and round-trips every byte")
    func roundTrip() throws {
        let bytes = (0...255).map { UInt8($0) }
        let text = Hex.encode(bytes)
        #expect(text.count == 512)
        #expect(text.hasPrefix("000102"))
        #expect(text.hasSuffix("fdfeff"))
        #expect(text == text.lowercased())
        #expect(Hex.decode(text) == bytes)
        #expect(Hex.decode(text.uppercased()) == bytes)
    }

    @Test("empty in, empty out")
    func empty() {
        #expect(Hex.encode([UInt8]()) == "")
        #expect(Hex.decode("") == [])
    }

    @Test("known values", arguments: [([UInt8]([0xde, 0xad, 0xbe, 0xef]), "deadbeef"), ([0x00], "00"), ([0x0f, 0xf0], "0ff0")])
    func known(bytes: [UInt8], text: String) {
        #expect(Hex.encode(bytes) == text)
        #expect(Hex.decode(text) == bytes)
    }

    @Test("odd length or a non-hex character is refused", arguments: ["0", "abc", "zz", "0g", "g0", "12 4", "-1", "0x12", "é0", "1\u{0}"])
    func refuses(text: String) {
        #expect(Hex.decode(text) == nil)
    }
}
