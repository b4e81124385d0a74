import Foundation
import Logging
import Testing

@testable import Shared

@Suite("JSON log lines")
struct JSONLogHandlerTests {
    @Test("a line is one JSON object: ts, level, label, msg, then metadata; hostile text is escaped")
    func line() throws {
        var handler = JSONLogHandler(label: "tollgate.test", level: .info)
        handler[metadataKey: "publisher"] = "p-1"
        let hostile = "quote \" backslash \\ newline \n tab \t nul \u{0} bell \u{7} del \u{7f} sep \u{2028} ünï 🎟 </script>"
        let text = handler.line(level: .warning, message: hostile, metadata: [
            "job": "j-1", "count": .stringConvertible(3), "list": ["a", "b"], "nested": ["k": "v"], "msg": "not overriding",
        ])
        #expect(text.hasSuffix("}\n"))
        #expect(text.filter { $0 == "\n" }.count == 1)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        #expect(object["level"] as? String == "warning")
        #expect(object["label"] as? String == "tollgate.test")
        #expect(object["msg"] as? String == hostile)
        #expect(object["publisher"] as? String == "p-1")
        #expect(object["job"] as? String == "j-1")
        #expect(object["count"] as? String == "3")
        #expect(object["list"] as? [String] == ["a", "b"])
        #expect(object["nested"] as? [String: String] == ["k": "v"])
        let ts = try #require(object["ts"] as? String)
        #expect(ts.wholeMatch(of: /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z/) != nil)
        // The fixed keys come first, in order.
        #expect(text.hasPrefix("{\"ts\":\""))
        #expect(text.contains("\",\"level\":\"warning\",\"label\":\"tollgate.test\",\"msg\":"))
    }

    @Test("metadata: the handler's and the event's in key order, the event's value winning a shared key")
    func metadataOrder() {
        var handler = JSONLogHandler(label: "t", level: .info)
        handler[metadataKey: "b"] = "handler"
        handler[metadataKey: "d"] = "4"
        let text = handler.line(level: .info, message: "m", metadata: ["c": "3", "b": "event", "a": "1", "label": "no"])
        #expect(text.hasSuffix(#""msg":"m","a":"1","b":"event","c":"3","d":"4"}"# + "\n"))
        #expect(handler.line(level: .info, message: "m", metadata: nil).hasSuffix(#""msg":"m","b":"handler","d":"4"}"# + "\n"))
    }
}
