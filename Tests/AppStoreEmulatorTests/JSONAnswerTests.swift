import Hummingbird
import HummingbirdTesting
import Testing
@testable import AppStoreEmulator

@Suite("JSON answers")
struct JSONAnswerTests {
    @Test("absent fields are omitted and slashes stay unescaped, as Apple writes them")
    func shape() async throws {
        try await Fixtures.makeApplication().test(.router) { client in
            #expect(String(buffer: try await client.verifyRaw("not json").body) == #"{"status":21000}"#)
            let answer = String(buffer: try await client.verify(Fixtures.receiptData(Fixtures.simpleScenario())).body)
            #expect(answer.contains(" America/Los_Angeles\""))
        }
    }
}
